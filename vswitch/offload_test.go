package vswitch

import (
	"testing"
	"time"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/port"
)

// TestSwitchCarriesGSO: a super-frame read from an offload port reaches
// another offload port with its metadata; a plain port never sees it (the
// switch drops it as DropGSO); a complete frame from the offload port
// still reaches the plain port.
func TestSwitchCarriesGSO(t *testing.T) {
	sw, _ := newTestSwitch(t, `
table=0, priority=100, in_port=3, ip, nw_dst=10.0.0.4, actions=output:4
table=0, priority=100, in_port=3, ip, nw_dst=10.0.0.5, actions=output:5
`)
	a, b, c := newMemOffloadPort("a"), newMemOffloadPort("b"), newMemPort("c")
	for no, p := range map[uint32]Port{3: a, 4: b, 5: c} {
		if err := sw.AddPort(no, p); err != nil {
			t.Fatal(err)
		}
	}
	g := packet.GSO{Type: packet.GSOTCPv4, NeedsCsum: true, HdrLen: 54, Size: 1448, CsumStart: 34, CsumOffset: 16}
	a.sendMeta(udpFrame(3, 4), port.Meta{GSO: g})
	a.sendMeta(udpFrame(3, 5), port.Meta{GSO: g})
	a.send(udpFrame(3, 5))
	testutil.WaitFor(t, 5*time.Second, "the frames", func() (bool, error) { return len(b.written()) == 1 && len(c.written()) == 1, nil })
	if got, m := b.written()[0], b.writtenMeta()[0]; m.GSO != g || string(got) != string(udpFrame(3, 4)) {
		t.Errorf("offload port got %x %+v", got, m)
	}
	if m := c.writtenMeta()[0]; m.GSO.IsGSO() {
		t.Errorf("plain port got GSO metadata %+v", m)
	}
	testutil.WaitFor(t, 5*time.Second, "a gso drop", func() (bool, error) { return sw.Stats().Drops[DropGSO] == 1, nil })
}

// TestSwitchNoOffload: with Config.NoOffload no port counts as an offload
// port: a super-frame read anywhere is dropped (DropGSO), complete frames
// still pass.
func TestSwitchNoOffload(t *testing.T) {
	tbl := flowtable.New(flowtable.Config{})
	rs, err := flowtable.ParseRules("table=0, priority=100, in_port=3, ip, actions=output:4\n")
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.Add(rs...); err != nil {
		t.Fatal(err)
	}
	sw, err := New(Config{Table: tbl, NoOffload: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Close() })
	a, b := newMemOffloadPort("a"), newMemOffloadPort("b")
	if err := sw.AddPort(3, a); err != nil {
		t.Fatal(err)
	}
	if err := sw.AddPort(4, b); err != nil {
		t.Fatal(err)
	}
	a.sendMeta(udpFrame(3, 4), port.Meta{GSO: packet.GSO{Type: packet.GSOTCPv4, HdrLen: 54, Size: 1000}})
	a.send(udpFrame(3, 4))
	testutil.WaitFor(t, 5*time.Second, "the complete frame", func() (bool, error) { return len(b.written()) == 1, nil })
	testutil.WaitFor(t, 5*time.Second, "a gso drop", func() (bool, error) { return sw.Stats().Drops[DropGSO] == 1, nil })
}

func TestSwitchGSOToTunnel(t *testing.T) {
	sw, _ := newTestSwitch(t, `
table=0, priority=100, in_port=3, ip, actions=set_field:192.0.2.2->tun_dst, load:0x2a->NXM_NX_TUN_ID[0..31], output:1
`)
	a := newMemOffloadPort("a")
	vx := newMemTunnel()
	vx.caps.Offload = true
	if err := sw.AddPort(3, a); err != nil {
		t.Fatal(err)
	}
	if err := sw.AddPort(1, vx); err != nil {
		t.Fatal(err)
	}
	g := packet.GSO{Type: packet.GSOTCPv4, Size: 1000, HdrLen: 54}
	a.sendMeta(udpFrame(3, 9), port.Meta{GSO: g})
	testutil.WaitFor(t, 5*time.Second, "the tunnel write", func() (bool, error) { return len(vx.written()) == 1, nil })
	if m := vx.writtenMeta()[0]; m.GSO != g || m.Tunnel != (port.Endpoint{Addr: [4]byte{192, 0, 2, 2}, VNI: 42}) {
		t.Errorf("tunnel got metadata %+v", m)
	}
}
