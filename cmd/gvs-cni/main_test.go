package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/gvswitch/gvs/cniplugin"
)

// memBackend attaches nothing; it lets the shim be tested against a real
// cniplugin.Server without root.
type memBackend struct{}

func (memBackend) Attach(_ context.Context, l cniplugin.Lease) (cniplugin.Attachment, error) {
	return cniplugin.Attachment{MAC: "0a:58:0a:80:00:02", Prefix: netip.PrefixFrom(l.IP, 23),
		Gateway: netip.MustParseAddr("10.128.0.1"),
		Routes:  []cniplugin.Route{{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gw: netip.MustParseAddr("10.128.0.1")}}}, nil
}
func (memBackend) Detach(context.Context, cniplugin.Lease) error { return nil }
func (memBackend) Check(context.Context, cniplugin.Lease) error  { return nil }

func buildShim(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gvs")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

type shimResult struct {
	out  []byte
	err  *types.Error
	code int
}

func runShim(t *testing.T, bin, cmd, conf string) shimResult {
	t.Helper()
	c := exec.Command(bin)
	c.Env = []string{"CNI_COMMAND=" + cmd, "CNI_CONTAINERID=ctr1", "CNI_NETNS=/run/netns/none", "CNI_IFNAME=eth0",
		"CNI_PATH=/nonexistent", "CNI_ARGS=K8S_POD_NAMESPACE=alpha"}
	c.Stdin = strings.NewReader(conf)
	var stdout bytes.Buffer
	c.Stdout = &stdout
	err := c.Run()
	r := shimResult{out: stdout.Bytes()}
	if err != nil {
		r.code = 1
		var te types.Error
		if jerr := json.Unmarshal(stdout.Bytes(), &te); jerr != nil {
			t.Fatalf("%s: exit %v with output that is not a CNI error: %s", cmd, err, stdout.Bytes())
		}
		r.err = &te
	}
	return r
}

// startServer serves the CNI socket sock with a cniplugin.Server whose
// leases live under dir and whose pods are in memory (memBackend), until
// the test ends. It returns the server's IPAM.
func startServer(t *testing.T, dir, sock string) *cniplugin.IPAM {
	t.Helper()
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
	t.Cleanup(func() { cancel(); <-done })
	return ipam
}

func TestShim(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin")
	}
	bin := buildShim(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "cni.sock")
	conf := func(version string) string {
		return `{"cniVersion":"` + version + `","name":"pods","type":"gvs","socket":"` + sock + `"}`
	}

	// Daemon not running: 11 for ADD, 50 for STATUS.
	if r := runShim(t, bin, "ADD", conf("1.1.0")); r.err == nil || r.err.Code != types.ErrTryAgainLater {
		t.Errorf("ADD without a daemon: %+v, want code 11", r.err)
	}
	if r := runShim(t, bin, "STATUS", conf("1.1.0")); r.err == nil || r.err.Code != types.ErrPluginNotAvailable {
		t.Errorf("STATUS without a daemon: %+v, want code 50", r.err)
	}
	if r := runShim(t, bin, "ADD", `{"cniVersion":"1.1.0","name":"pods","type":"gvs","socket":"rel.sock"}`); r.err == nil || r.err.Code != types.ErrInvalidNetworkConfig {
		t.Errorf("ADD with a relative socket: %+v, want code 7", r.err)
	}

	startServer(t, dir, sock)

	if r := runShim(t, bin, "STATUS", conf("1.1.0")); r.err != nil {
		t.Errorf("STATUS: %v", r.err)
	}
	// The result comes back in the configuration's version.
	for _, v := range []string{"1.1.0", "1.0.0", "0.4.0"} {
		r := runShim(t, bin, "ADD", conf(v))
		if r.err != nil {
			t.Fatalf("ADD %s: %v", v, r.err)
		}
		var res struct {
			CNIVersion string `json:"cniVersion"`
			IPs        []struct {
				Address string `json:"address"`
				Version string `json:"version"`
			} `json:"ips"`
		}
		if err := json.Unmarshal(r.out, &res); err != nil || res.CNIVersion != v || len(res.IPs) != 1 ||
			!strings.HasSuffix(res.IPs[0].Address, "/23") || (v == "0.4.0") != (res.IPs[0].Version == "4") {
			t.Errorf("ADD %s result: %s (%v)", v, r.out, err)
		}
		if r := runShim(t, bin, "DEL", conf(v)); r.err != nil {
			t.Errorf("DEL %s: %v", v, r.err)
		}
	}
	if r := runShim(t, bin, "CHECK", conf("1.1.0")); r.err == nil || r.err.Code != types.ErrUnknownContainer {
		t.Errorf("CHECK of a deleted container: %+v, want code 3", r.err)
	}
	if r := runShim(t, bin, "VERSION", conf("1.1.0")); r.err != nil || !strings.Contains(string(r.out), `"0.4.0","1.0.0","1.1.0"`) {
		t.Errorf("VERSION: %s %v", r.out, r.err)
	}
	if _, err := os.Stat(sock); err != nil {
		t.Error(err)
	}
}
