package main

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/gvswitch/gvs/cniplugin"
)

// TestInProcess drives the shim's verbs in-process with the reference
// plugins' testutils (environment set, stdout captured, result decoded in
// the configuration's version) against a cniplugin.Server.
func TestInProcess(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "cni.sock")
	ipam, err := cniplugin.OpenIPAM(filepath.Join(dir, "ipam"), netip.MustParsePrefix("10.128.0.0/23"), 1000)
	if err != nil {
		t.Fatal(err)
	}
	srv := cniplugin.NewServer(cniplugin.ServerConfig{IPAM: ipam, Backend: memBackend{}})
	l, err := cniplugin.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx, l); close(done) }()
	defer func() { cancel(); <-done }()

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
