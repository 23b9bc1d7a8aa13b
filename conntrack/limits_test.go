package conntrack

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func udpFrom(i int) []byte {
	return udp4(fmt.Sprintf("10.1.%d.%d", i/256, i%256), 1000, srv, 53, 8)
}

func udpTo(i int) []byte {
	return udp4(srv, 53, fmt.Sprintf("10.1.%d.%d", i/256, i%256), 1000, 8)
}

func TestGlobalLimitAndEviction(t *testing.T) {
	tr, c := newTracker(t, Config{MaxEntries: 8})
	for i := range 8 {
		run(t, tr, c, []step{{name: "fill", pkt: udpFrom(i), act: commit, state: trkNew}})
	}
	// Full of unreplied connections: the next commit evicts one.
	run(t, tr, c, []step{{name: "ninth, evicting", pkt: udpFrom(8), act: commit, state: trkNew}})
	if st := tr.Stats(); st.Entries != 8 || st.Evicted != 1 || st.Created != 9 {
		t.Fatalf("after eviction: %+v", st)
	}
	// Answer them all: nothing is evictable now.
	for i := range 9 {
		var m Meta
		tr.Process(c.Now(), udpTo(i), 0, &lookup, &m)
	}
	run(t, tr, c, []step{{name: "refused", pkt: udpFrom(20), act: commit, state: trkNew, reason: ReasonTableFull}})
	if st := tr.Stats(); st.Entries != 8 || st.Reasons[ReasonTableFull] != 1 || st.ByClass[UDPReplied] != 8 {
		t.Fatalf("after refusal: %+v", st)
	}
	// A replied connection that expired makes room.
	c.advance(121 * time.Second)
	run(t, tr, c, []step{{name: "room again", pkt: udpFrom(21), act: commit, state: trkNew}})
	if st := tr.Stats(); st.Entries > 8 || st.Expired == 0 {
		t.Errorf("after expiry: %+v", st)
	}
}

func TestClosingTCPEvictable(t *testing.T) {
	tr, c := newTracker(t, Config{MaxEntries: 1})
	run(t, tr, c, []step{
		{name: "SYN", pkt: tcpc(tcpSYN, 1000, 0, 0), act: commit, state: trkNew},
		{name: "SYN+ACK", pkt: tcps(tcpSYN|tcpACK, 5000, 1001, 0), state: trkEstRpl},
		{name: "ACK", pkt: tcpc(tcpACK, 1001, 5001, 0), state: trkEst},
		{name: "established is kept", pkt: udpFrom(1), act: commit, state: trkNew, reason: ReasonTableFull},
		{name: "FIN", pkt: tcpc(tcpFIN|tcpACK, 1001, 5001, 0), state: trkEst},
		{name: "closing is evicted", pkt: udpFrom(1), act: commit, state: trkNew},
	})
}

func TestZoneLimit(t *testing.T) {
	tr, c := newTracker(t, Config{ZoneLimits: map[uint16]int{5: 2}, DefaultZoneLimit: 3})
	z5, z6 := Action{Zone: 5, Commit: true}, Action{Zone: 6, Commit: true}
	for i := range 2 {
		run(t, tr, c, []step{{name: "zone 5", pkt: udpFrom(i), act: z5, state: trkNew}})
		var m Meta
		tr.Process(c.Now(), udpTo(i), 0, &Action{Zone: 5}, &m) // replied: not evictable
	}
	run(t, tr, c, []step{
		{name: "zone 5 is full", pkt: udpFrom(2), act: z5, state: trkNew, reason: ReasonZoneFull},
		{name: "zone 6 (default 3)", pkt: udpFrom(2), act: z6, state: trkNew},
		{name: "zone 6", pkt: udpFrom(3), act: z6, state: trkNew},
		{name: "zone 6", pkt: udpFrom(4), act: z6, state: trkNew},
		{name: "zone 6, evicts its own unreplied", pkt: udpFrom(5), act: z6, state: trkNew},
	})
	if l, n := tr.ZoneLimit(6); l != 3 || n != 3 {
		t.Errorf("zone 6: limit %d count %d", l, n)
	}
	tr.SetZoneLimit(5, 0)
	run(t, tr, c, []step{{name: "zone 5 unlimited", pkt: udpFrom(2), act: z5, state: trkNew}})
	if _, n := tr.ZoneLimit(5); n != 3 {
		t.Errorf("zone 5 holds %d", n)
	}
}

func TestExpiry(t *testing.T) {
	tr, c := newTracker(t, Config{Timeouts: Timeouts{UDPUnreplied: 5 * time.Second}})
	for i := range 10 {
		run(t, tr, c, []step{{name: "udp", pkt: udpFrom(i), act: commit, state: trkNew}})
	}
	run(t, tr, c, []step{{name: "ping", pkt: echo(cli, srv, icmpEcho, 1, 8), act: commit, state: trkNew}})
	c.advance(4 * time.Second)
	if n := tr.Sweep(c.Now(), 0); n != 0 {
		t.Fatalf("swept %d before the timeout", n)
	}
	c.advance(2 * time.Second)
	// A small budget: an incremental sweep.
	if n := tr.Sweep(c.Now(), 4); n != 4 {
		t.Errorf("budget 4 removed %d", n)
	}
	if n := tr.Sweep(c.Now(), 0); n != 6 || tr.Len() != 1 {
		t.Errorf("second sweep removed %d, %d left (the ping has 30s)", n, tr.Len())
	}
	if st := tr.Stats(); st.Expired != 10 || st.ByClass[UDPUnreplied] != 0 || st.ByClass[ICMPUnreplied] != 1 {
		t.Errorf("stats %+v", st)
	}
	// Lazy expiry: a packet finding its entry expired starts over.
	c.advance(31 * time.Second)
	run(t, tr, c, []step{
		{name: "echo reply to the expired ping", pkt: echo(srv, cli, icmpEchoReply, 1, 8), act: lookup, state: trkInv, reason: ReasonNotNew},
		{name: "ping again", pkt: echo(cli, srv, icmpEcho, 1, 8), act: commit, state: trkNew},
	})
	if tr.Len() != 1 {
		t.Errorf("%d entries after the expired one was replaced", tr.Len())
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []Config{
		{MaxEntries: -1},
		{MaxEntries: MaxEntriesLimit + 1},
		{DefaultZoneLimit: -1},
		{ZoneLimits: map[uint16]int{3: -2}},
		{MaxFragments: -1},
		{Timeouts: Timeouts{TCPEstablished: -time.Second}},
		{Timeouts: Timeouts{Fragment: 2 * maxTimeout}},
	}
	for _, cfg := range bad {
		if err := cfg.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", cfg, err)
		}
		if _, err := New(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v): %v", cfg, err)
		}
	}
	var zero Config
	if err := zero.Validate(); err != nil {
		t.Error(err)
	}
	tr, err := New(Config{MaxEntries: 16})
	if err != nil || tr.Cap() != 16 {
		t.Fatal(err)
	}
	if tr.Now() < 0 {
		t.Error("clock")
	}
}

func TestActionValidate(t *testing.T) {
	bad := []Action{
		{Force: true},
		{SetMark: true},
		{NAT: NAT{Kind: NATBare, MinPort: 1}},
		{Commit: true, NAT: NAT{Kind: NATSrc, MinAddr: ip4("10.0.0.9"), MaxAddr: ip4("10.0.0.1")}},
		{Commit: true, NAT: NAT{Kind: NATDst, MinPort: 9, MaxPort: 1}},
		{Commit: true, NAT: NAT{Kind: NATDst, MaxPort: 1}},
		{NAT: NAT{Kind: 9}},
	}
	for _, a := range bad {
		if err := a.Validate(); !errors.Is(err, ErrAction) {
			t.Errorf("%+v: %v", a, err)
		}
	}
	for _, a := range []Action{commit, snat, dnat, natBare, {Commit: true, Force: true, SetLabel: true}} {
		if err := a.Validate(); err != nil {
			t.Errorf("%+v: %v", a, err)
		}
	}
	// Process clamps what Validate refuses, and does not panic on it.
	tr, c := newTracker(t, Config{})
	for _, a := range bad {
		var m Meta
		tr.Process(c.Now(), udpFrom(1), 0, &a, &m)
		tr.Process(c.Now(), tcpc(tcpSYN, 1, 0, 0), 0, &a, &m)
	}
}

func TestFlushTuple(t *testing.T) {
	tr, c := newTracker(t, Config{})
	run(t, tr, c, []step{
		{name: "udp", pkt: udpFrom(1), act: commit, state: trkNew},
		{name: "ping", pkt: echo(cli, srv, icmpEcho, 4, 8), act: commit, state: trkNew},
	})
	if err := tr.FlushTuple(1, Tuple{Src: ip4("10.1.0.1"), Dst: ip4(srv), SrcPort: 1000, DstPort: 53, Proto: ProtoUDP}); !errors.Is(err, ErrNotFound) {
		t.Errorf("wrong zone: %v", err)
	}
	// By its reply tuple.
	if err := tr.FlushTuple(0, Tuple{Src: ip4(srv), Dst: ip4("10.1.0.1"), SrcPort: 53, DstPort: 1000, Proto: ProtoUDP}); err != nil {
		t.Error(err)
	}
	if err := tr.FlushTuple(0, Tuple{Src: ip4(cli), Dst: ip4(srv), SrcPort: icmpEcho, ID: 4, Proto: ProtoICMP}); err != nil {
		t.Error(err)
	}
	if st := tr.Stats(); st.Entries != 0 || st.Flushed != 2 {
		t.Errorf("%+v", st)
	}
}
