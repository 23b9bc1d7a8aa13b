package conntrack

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
	"strings"
	"testing"
	"time"
)

// populated returns a tracker holding one of each kind of entry: an
// established TCP connection behind SNAT with a mark and label, a DNATed
// UDP flow in zone 3, an ICMP echo, a GRE flow.
func populated(t *testing.T) (*Tracker, *clock) {
	tr, c := newTracker(t, Config{})
	mark := Action{Commit: true, NAT: snat.NAT, SetMark: true, Mark: 42, MarkMask: ^uint32(0),
		SetLabel: true, Label: Label{Hi: 7, Lo: 9}, LabelMask: Label{Hi: ^uint64(0), Lo: ^uint64(0)}}
	run(t, tr, c, []step{
		{name: "SYN", pkt: tcp4(pod, 40000, far, 80, tcpSYN, 1, 0, 0), act: mark, state: trkNew | StateSNAT},
		{name: "SYN+ACK", pkt: tcp4(far, 80, node, 40000, tcpSYN|tcpACK, 9, 2, 0), act: natBare, state: trkEstRpl | StateDNAT},
		{name: "ACK", pkt: tcp4(pod, 40000, far, 80, tcpACK, 2, 10, 0), act: natBare, state: trkEst | StateSNAT},
		{name: "udp", pkt: udp4(cliIP, 5353, vip, 53, 10), act: Action{Zone: 3, Commit: true, NAT: NAT{Kind: NATDst, MinAddr: ip4(bknd)}}, state: trkNew | StateDNAT},
		{name: "ping", pkt: echo(cliIP, far, icmpEcho, 5, 8), act: commit, state: trkNew},
		{name: "gre", pkt: build(hdr{src: cliIP, dst: far, proto: 47}), act: commit, state: trkNew},
	})
	return tr, c
}

func TestSaveLoad(t *testing.T) {
	tr, c := populated(t)
	var buf bytes.Buffer
	n, err := tr.Save(&buf)
	if err != nil || n != 4 {
		t.Fatalf("Save: %d, %v", n, err)
	}
	saved := dump(tr, c, true)

	// Another tracker (another hash seed, another clock) takes over.
	tr2, c2 := newTracker(t, Config{})
	c2.advance(time.Hour)
	res, err := tr2.Load(bytes.NewReader(buf.Bytes()))
	if err != nil || res.Loaded != 4 || res.Skipped != 0 {
		t.Fatalf("Load: %+v, %v", res, err)
	}
	if got := dump(tr2, c2, true); !slices.Equal(got, saved) {
		t.Errorf("loaded\n%q\nsaved\n%q", got, saved)
	}
	if st := tr2.Stats(); st.ByClass[TCPEstablished] != 1 || st.ByClass[UDPUnreplied] != 1 || st.Entries != 4 {
		t.Errorf("stats after load: %+v", st)
	}
	checkBothWays(t, tr2, c2)
	// The connections carry on: TCP data in window, translated both ways,
	// with the mark and label.
	var m Meta
	b := tcp4(far, 80, node, 40000, tcpACK|tcpPSH, 10, 2, 100)
	tr2.Process(c2.Now(), b, 0, &natBare, &m)
	if want := tcp4(far, 80, pod, 40000, tcpACK|tcpPSH, 10, 2, 100); string(b) != string(want) ||
		m.State != trkEstRpl|StateDNAT || m.Mark != 42 || m.Label != (Label{Hi: 7, Lo: 9}) {
		t.Errorf("after load: %v mark %d label %v, packet %x", m.State, m.Mark, m.Label, b[12:24])
	}
	run(t, tr2, c2, []step{
		{name: "out of window after load", pkt: tcp4(far, 80, node, 40000, tcpACK, 10+1<<30, 2, 100), act: natBare, state: trkInv, reason: ReasonTCPWindow},
		{name: "udp answer", pkt: udp4(bknd, 53, cliIP, 5353, 10), act: Action{Zone: 3, NAT: NAT{Kind: NATBare}}, state: trkEstRpl | StateSNAT,
			want: udp4(vip, 53, cliIP, 5353, 10)},
	})
	// The time left was kept: the ping expires 30 s after it was sent.
	c2.advance(30 * time.Second)
	tr2.Sweep(c2.Now(), 0)
	if tr2.Len() != 3 {
		t.Errorf("%d entries 30 s on, want 3 (the ping gone)", tr2.Len())
	}
	// Loading again adds nothing: the keys are taken.
	if res, err := tr2.Load(bytes.NewReader(buf.Bytes())); err != nil || res.Loaded != 1 || res.Skipped != 3 {
		t.Errorf("second load: %+v %v (only the expired ping comes back)", res, err)
	}
}

func TestLoadLimits(t *testing.T) {
	tr, _ := populated(t)
	var buf bytes.Buffer
	if _, err := tr.Save(&buf); err != nil {
		t.Fatal(err)
	}
	small, c := newTracker(t, Config{MaxEntries: 2, ZoneLimits: map[uint16]int{3: 0}, DefaultZoneLimit: 1})
	// Zone 0 takes 1 (default zone limit), zone 3 its limit 0 means none.
	res, err := small.Load(bytes.NewReader(buf.Bytes()))
	if err != nil || res.Loaded != 2 || res.Skipped != 2 || small.Len() != 2 {
		t.Fatalf("%+v %v, %d entries", res, err, small.Len())
	}
	if _, n := small.ZoneLimit(0); n != 1 {
		t.Errorf("zone 0 holds %d, limit 1", n)
	}
	checkBothWays(t, small, c)
	// Timeouts shorter than the time left clamp it.
	short, c2 := newTracker(t, Config{Timeouts: Timeouts{TCPEstablished: time.Minute}})
	if _, err := short.Load(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	for e := range short.All(c2.Now()) {
		if e.Class == TCPEstablished && e.Timeout != time.Minute {
			t.Errorf("established entry has %v left, want the new 1m timeout", e.Timeout)
		}
	}
}

// resum rewrites a saved table's CRC after a test changed it.
func resum(b []byte) []byte {
	n := len(b) - 4
	binary.BigEndian.PutUint32(b[n:], crc32.Checksum(b[:n], castagnoli))
	return b
}

func TestLoadRefuses(t *testing.T) {
	tr, _ := populated(t)
	var buf bytes.Buffer
	if _, err := tr.Save(&buf); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	rec := func(i, off int) int { return headerLen + i*recordLen + off }
	cases := []struct {
		name string
		in   []byte
		err  error
		msg  string
	}{
		{"empty", nil, ErrFormat, "header"},
		{"not ours", []byte("hello, this is not a table at all"), ErrFormat, "not a saved"},
		{"version 2", mut(func(b []byte) []byte { b[7] = 2; return resum(b) }), ErrVersion, "version 2"},
		{"truncated", good[:len(good)-20], ErrFormat, "truncated"},
		{"no checksum", good[:len(good)-4], ErrFormat, "truncated checksum"},
		{"bit flip", mut(func(b []byte) []byte { b[rec(1, 40)] ^= 1; return b }), ErrFormat, "checksum mismatch"},
		{"trailing data", append(append([]byte(nil), good...), 0), ErrFormat, "after the end"},
		{"count wrong", mut(func(b []byte) []byte { b[len(b)-5]++; return resum(b) }), ErrFormat, "the end says"},
		{"unknown tag", mut(func(b []byte) []byte { b[rec(0, 0)] = 7; return resum(b) }), ErrFormat, "unknown record tag"},
		{"class of another protocol", mut(func(b []byte) []byte { b[rec(0, 31)] = uint8(UDPReplied); return resum(b) }), ErrFormat, "entry: class"},
		{"tcp state out of range", mut(func(b []byte) []byte { b[rec(0, 75)] = 40; return resum(b) }), ErrFormat, "tcp state"},
		{"no time left", mut(func(b []byte) []byte { clear(b[rec(0, 56):rec(0, 64)]); return resum(b) }), ErrFormat, "time left"},
		{"reply key not a translation", mut(func(b []byte) []byte { b[rec(0, 16)] ^= 1; return resum(b) }), ErrFormat, "source translation"},
		{"port 0", mut(func(b []byte) []byte { clear(b[rec(0, 12):rec(0, 14)]); return resum(b) }), ErrFormat, "ports"},
		{"unknown nat", mut(func(b []byte) []byte { b[rec(0, 30)] = 3; return resum(b) }), ErrFormat, "nat kind"},
		{"reserved bytes", mut(func(b []byte) []byte { b[rec(0, 34)] = 1; return resum(b) }), ErrFormat, "reserved bytes"},
	}
	for _, tc := range cases {
		fresh, _ := newTracker(t, Config{})
		res, err := fresh.Load(bytes.NewReader(tc.in))
		if !errors.Is(err, tc.err) || err == nil || !strings.Contains(err.Error(), tc.msg) || res.Loaded != 0 || fresh.Len() != 0 {
			t.Errorf("%s: %+v, %v; want %v (%q) and nothing loaded", tc.name, res, err, tc.err, tc.msg)
		}
	}
}
