package pods

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"testing"

	"github.com/gvswitch/gvs/netconf"
	"github.com/gvswitch/gvs/port"
	"github.com/gvswitch/gvs/tap"
	vswitch "github.com/gvswitch/gvs/vswitch"
)

// TestPodTAPClose: the switch's closing a CNI pod's TAP deletes the
// interface, except when the daemon is exiting or the adoption is being
// undone; forwarding through the wrapper does not allocate.
func TestPodTAPClose(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates TAPs in a network namespace")
	}
	name := fmt.Sprintf("gvst-dmn-%d", os.Getpid())
	nsPath, err := netconf.CreateNamedNS(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netconf.DeleteNamedNS(name) })
	m := New(Config{Logger: slog.New(slog.DiscardHandler)})
	exists := func(ifname string) bool {
		var ok bool
		_ = netconf.Do(nsPath, func() error { _, err := net.InterfaceByName(ifname); ok = err == nil; return nil })
		return ok
	}
	mk := func(ifname string) *podTAP {
		var dev *tap.Device
		if err := netconf.Do(nsPath, func() (err error) { dev, err = tap.CreatePersistent(tap.Config{Name: ifname}); return }); err != nil {
			t.Fatal(err)
		}
		return &podTAP{tapIO: dev, dev: dev, m: m}
	}

	p := mk("gvst-del")
	var sp vswitch.Port = p // what the switch holds
	if err := netconf.ConfigureLink(nsPath, netconf.LinkConfig{Name: "gvst-del", Up: true}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64+60)
	copy(buf[64:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0a, 0x58, 10, 0, 0, 9, 0x88, 0xb5}) // local experimental ethertype
	bufs, meta := [][]byte{buf}, []port.Meta{{Size: 60}}
	if n, err := sp.Write(bufs, meta, 64); n != 1 || err != nil {
		t.Fatalf("Write through podTAP: %d, %v", n, err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = sp.Write(bufs, meta, 64) }); n != 0 {
		t.Errorf("Write through podTAP: %v allocations, want 0", n)
	}
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}
	if exists("gvst-del") {
		t.Error("closing a pod's TAP (RemovePort) left the interface")
	}

	p = mk("gvst-keep")
	p.keep.Store(true)
	p.Close()
	if !exists("gvst-keep") {
		t.Error("an undone adoption deleted the pod's interface")
	}

	m.Exiting()
	p = mk("gvst-exit")
	p.Close()
	if !exists("gvst-exit") {
		t.Error("the daemon's exit deleted the pod's interface")
	}
	err = netconf.Do(nsPath, func() error {
		return errors.Join(tap.DeletePersistent("gvst-keep"), tap.DeletePersistent("gvst-exit"))
	})
	if err != nil || exists("gvst-keep") || exists("gvst-exit") {
		t.Errorf("cleanup: %v", err)
	}
}
