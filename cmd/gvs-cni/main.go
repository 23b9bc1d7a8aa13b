// Command gvs-cni is gvs's CNI plugin (network type "gvs"). It is a thin,
// stateless shim: it forwards the CNI environment and the network
// configuration over a unix socket to gvs-switchd, which does the work
// (address lease, TAP, rules), and prints the daemon's result converted to
// the requested cniVersion. See docs/cni.md.
package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/gvswitch/gvs/cniplugin"
)

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    func(a *skel.CmdArgs) error { return run("ADD", a) },
		Del:    func(a *skel.CmdArgs) error { return run("DEL", a) },
		Check:  func(a *skel.CmdArgs) error { return run("CHECK", a) },
		GC:     func(a *skel.CmdArgs) error { return run("GC", a) },
		Status: func(a *skel.CmdArgs) error { return run("STATUS", a) },
	}, version.PluginSupports(cniplugin.SupportedVersions()...), "gvs-cni: attaches pods to gvs-switchd")
}

func run(cmd string, a *skel.CmdArgs) error {
	conf, err := cniplugin.ParseNetConf(a.StdinData)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cniplugin.DefaultTimeout)
	defer cancel()
	resp, err := cniplugin.Call(ctx, conf.Socket, &cniplugin.Request{
		Command: cmd, ContainerID: a.ContainerID, Netns: a.Netns, IfName: a.IfName,
		Args: a.Args, Path: a.Path, Config: a.StdinData,
	})
	if err != nil {
		code := uint(types.ErrTryAgainLater)
		if cmd == "STATUS" {
			code = types.ErrPluginNotAvailable
		}
		if errors.Is(err, cniplugin.ErrUnreachable) {
			return types.NewError(code, "gvs-switchd is not reachable; is it running with cniSocket "+conf.Socket+"?", err.Error())
		}
		return types.NewError(code, "no answer from gvs-switchd", err.Error())
	}
	if resp.Error != nil {
		return resp.Error
	}
	if cmd != "ADD" {
		return nil
	}
	r, err := types100.NewResult(resp.Result)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, "gvs-switchd sent a result that does not decode", err.Error())
	}
	if err := types.PrintResult(r, conf.CNIVersion); err != nil {
		return fmt.Errorf("gvs-cni: print result: %w", err)
	}
	return nil
}
