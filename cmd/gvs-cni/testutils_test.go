package main

import (
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/testutils"
)

// TestInProcess drives the shim's verbs in-process with the reference
// plugins' testutils (environment set, stdout captured, result decoded in
// the configuration's version) against a cniplugin.Server.
func TestInProcess(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "cni.sock")
	ipam := startServer(t, dir, sock)

	args := &skel.CmdArgs{ContainerID: "ctr-ip", Netns: "/run/netns/none", IfName: "eth0",
		StdinData: []byte(`{"cniVersion":"1.0.0","name":"pods","type":"gvs","socket":"` + sock + `"}`)}
	res, _, err := testutils.CmdAddWithArgs(args, func() error { return run("ADD", args) })
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	r, err := types100.GetResult(res)
	if err != nil || len(r.IPs) != 1 || r.IPs[0].Gateway.String() != "10.128.0.1" || r.Interfaces[0].Sandbox != "/run/netns/none" {
		t.Fatalf("ADD result %v (%v)", res, err)
	}
	if l, ok := ipam.Get("ctr-ip", "eth0"); !ok || l.IP.String() != r.IPs[0].Address.IP.String() {
		t.Errorf("lease %+v does not match the result %v", l, r.IPs[0].Address)
	}
	if err := testutils.CmdCheckWithArgs(args, func() error { return run("CHECK", args) }); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	for range 2 {
		if err := testutils.CmdDelWithArgs(args, func() error { return run("DEL", args) }); err != nil {
			t.Errorf("DEL: %v", err)
		}
	}
	if n := len(ipam.Leases()); n != 0 {
		t.Errorf("%d leases after DEL", n)
	}
	if err := testutils.CmdStatus(func() error { return run("STATUS", args) }); err != nil {
		t.Errorf("STATUS: %v", err)
	}
}
