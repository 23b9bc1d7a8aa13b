package ipfix

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gvswitch/gvs/conntrack"
	"github.com/gvswitch/gvs/internal/nstest"
	"github.com/gvswitch/gvs/internal/testutil"
)

// TestNfdumpNAT: a collector gvs did not write, Debian's nfcapd, reads
// the post-NAT elements (225–228) of a source-translated UDP exchange as
// its translated addresses and ports (nfdump's src4_xlt_ip, …), in a
// throwaway namespace on its loopback. Root, and nfdump installed (make
// deps).
func TestNfdumpNAT(t *testing.T) {
	nstest.RequireRoot(t)
	if _, err := exec.LookPath("nfcapd"); err != nil {
		t.Skip("nfcapd is not installed (make deps installs nfdump)")
	}
	ns := nstest.New(t, "ipfix", "nf")
	if out, err := exec.Command("ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	dir := t.TempDir()
	logf, err := os.Create(filepath.Join(t.TempDir(), "nfcapd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	nfcapd := exec.Command("ip", "netns", "exec", ns, "nfcapd", "-p", "4739", "-w", dir, "-t", "60")
	nfcapd.Stdout, nfcapd.Stderr = logf, logf
	if err := nfcapd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = nfcapd.Process.Signal(syscall.SIGTERM)
			_ = nfcapd.Wait()
		}
	}
	t.Cleanup(stop)
	testutil.WaitFor(t, 10*time.Second, "nfcapd listening on UDP 4739", func() (bool, error) {
		out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/proc/net/udp").Output()
		return strings.Contains(string(out), ":1283 "), err // 4739
	})

	var e *Exporter
	if err := nstest.Do(ns, func() (err error) {
		e, err = New(Config{Collectors: []string{"127.0.0.1:4739"}, IdleTimeout: -1, ActiveTimeout: -1})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	tr, err := conntrack.New(conntrack.Config{MaxEntries: 64, Accounting: true, OnEnd: e.OnEnd})
	if err != nil {
		t.Fatal(err)
	}
	snat := conntrack.Action{Commit: true, NAT: conntrack.NAT{Kind: conntrack.NATSrc, MinAddr: node}}
	bare := conntrack.Action{NAT: conntrack.NAT{Kind: conntrack.NATBare}}
	for _, p := range []struct {
		b []byte
		a *conntrack.Action
	}{
		{udpPacket(podA, ext, 5000, 53, 100), &snat},
		{udpPacket(ext, node, 53, 5000, 300), &bare},
	} {
		var m conntrack.Meta
		if r := tr.Process(tr.Now(), p.b, conntrack.CsumVerified, p.a, &m); r != conntrack.ReasonNone {
			t.Fatal(r)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx, tr); close(done) }()
	tr.Flush()
	testutil.WaitFor(t, 10*time.Second, "the two records sent", func() (bool, error) { return e.Stats().Records == 2, nil })
	cancel()
	<-done
	// Sent is not yet read: nfcapd stops without draining its socket.
	nstest.WaitUDPRead(t, ns, 4739, 10*time.Second)
	stop() // nfcapd writes its file as it stops

	out, err := exec.Command("nfdump", "-R", dir, "-o", "json").Output()
	if err != nil {
		log, _ := os.ReadFile(logf.Name())
		t.Fatalf("nfdump: %v\n%s\nnfcapd:\n%s", err, out, log)
	}
	var recs []struct {
		Src     string `json:"src4_addr"`
		Dst     string `json:"dst4_addr"`
		SrcPort uint16 `json:"src_port"`
		DstPort uint16 `json:"dst_port"`
		Bytes   uint64 `json:"in_bytes"`
		XSrc    string `json:"src4_xlt_ip"`
		XDst    string `json:"dst4_xlt_ip"`
		XSport  string `json:"src_xlt_port"`
		XDport  string `json:"dst_xlt_port"`
	}
	if err := json.Unmarshal(out, &recs); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(recs) != 2 {
		t.Fatalf("nfdump read %d records, want 2:\n%s", len(recs), out)
	}
	got := map[string]string{}
	for _, r := range recs {
		got[fmt.Sprintf("%s:%d>%s:%d %d", r.Src, r.SrcPort, r.Dst, r.DstPort, r.Bytes)] = r.XSrc + ":" + r.XSport + ">" + r.XDst + ":" + r.XDport
	}
	want := map[string]string{
		"10.128.0.5:5000>192.0.2.9:53 128":   "192.168.1.10:5000>192.0.2.9:53", // out: the source translated to the node
		"192.0.2.9:53>192.168.1.10:5000 328": "192.0.2.9:53>10.128.0.5:5000",   // back: the destination translated to the pod
	}
	t.Logf("nfdump read: %v", got)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: nfdump's translated addresses %q, want %q\n%s", k, got[k], v, out)
		}
	}
}
