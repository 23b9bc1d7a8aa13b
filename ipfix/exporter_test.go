package ipfix

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/gvswitch/gvs/conntrack"
)

// udpPacket returns an IPv4 UDP packet with n payload bytes (checksums
// left zero: the tracker is told they are verified).
func udpPacket(src, dst [4]byte, sport, dport uint16, n int) []byte {
	b := make([]byte, 28+n)
	b[0], b[8], b[9] = 0x45, 64, conntrack.ProtoUDP
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	copy(b[12:], src[:])
	copy(b[16:], dst[:])
	binary.BigEndian.PutUint16(b[20:], sport)
	binary.BigEndian.PutUint16(b[22:], dport)
	binary.BigEndian.PutUint16(b[24:], uint16(8+n))
	return b
}

var (
	podA = [4]byte{10, 128, 0, 5}
	ext  = [4]byte{192, 0, 2, 9}
	node = [4]byte{192, 168, 1, 10}
)

func resolve(a [4]byte) (Endpoint, bool) {
	if a == podA {
		return Endpoint{Pod: "alpha/client", VNID: 7}, true
	}
	return Endpoint{}, false
}

// field returns the value of element id (IANA when pen is 0) of record r
// under template t.
func field(t *Template, r *DataRecord, id uint16, pen uint32) []byte {
	for i, f := range t.Fields {
		if f.ID == id && f.Enterprise == pen {
			return r.Values[i]
		}
	}
	return nil
}

// TestExporter runs an exporter on a tracker: a SNATed UDP exchange
// flushed from the table comes out as two records (one per direction)
// with the counts, the post-NAT addresses and ports, the pod's name and
// VNID, after the templates.
func TestExporter(t *testing.T) {
	e := newExporter(Config{Collectors: []string{"192.0.2.1:4739"}, Resolve: resolve, Domain: 9, IdleTimeout: -1, ActiveTimeout: -1})
	client, peer := net.Pipe()
	e.dest = []collector{{name: "pipe", write: func(b []byte) error { _, err := client.Write(b); return err }}}
	t.Cleanup(func() { client.Close(); peer.Close() })
	msgs := make(chan []byte, 16)
	go func() {
		for {
			b := make([]byte, 65536)
			n, err := peer.Read(b)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- b[:n]
		}
	}()

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
		{udpPacket(podA, ext, 5000, 53, 100), &bare},
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
	if n := tr.Flush(); n != 1 {
		t.Fatalf("flushed %d", n)
	}

	var d Decoder
	var recs []DataRecord
	deadline := time.After(10 * time.Second)
	for len(recs) < 2 {
		select {
		case b := <-msgs:
			dec, err := d.Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if dec.Header.Domain != 9 {
				t.Errorf("domain %d", dec.Header.Domain)
			}
			recs = append(recs, dec.Records...)
		case <-deadline:
			t.Fatalf("%d records after 10s", len(recs))
		}
	}
	cancel()
	<-done
	tmpl := Templates(DocumentationPEN)[1]
	type want struct {
		src, dst, postSrc, postDst [4]byte
		sport, dport, psport       uint16
		octets, packets            uint64
		dir                        byte
		srcPod                     string
		srcVNID                    uint32
	}
	for i, w := range []want{
		{podA, ext, node, ext, 5000, 53, 5000, 2 * 128, 2, DirInitiator, "alpha/client", 7},
		{ext, node, ext, podA, 53, 5000, 53, 328, 1, DirReverseInitiator, "", NoVNID},
	} {
		r := &recs[i]
		if r.Template != TemplateFlowNAT {
			t.Fatalf("record %d: template %d", i, r.Template)
		}
		get := func(id uint16) []byte { return field(&tmpl, r, id, 0) }
		if [4]byte(get(IESourceIPv4Address)) != w.src || [4]byte(get(IEDestinationIPv4Address)) != w.dst ||
			[4]byte(get(IEPostNATSourceIPv4Address)) != w.postSrc || [4]byte(get(IEPostNATDestinationIPv4Address)) != w.postDst {
			t.Errorf("record %d: addresses %v→%v post %v→%v, want %+v", i, get(IESourceIPv4Address), get(IEDestinationIPv4Address),
				get(IEPostNATSourceIPv4Address), get(IEPostNATDestinationIPv4Address), w)
		}
		if binary.BigEndian.Uint16(get(IESourceTransportPort)) != w.sport || binary.BigEndian.Uint16(get(IEDestinationTransportPort)) != w.dport ||
			binary.BigEndian.Uint16(get(IEPostNAPTSourceTransportPort)) != w.psport {
			t.Errorf("record %d: ports, want %+v", i, w)
		}
		if binary.BigEndian.Uint64(get(IEOctetDeltaCount)) != w.octets || binary.BigEndian.Uint64(get(IEPacketDeltaCount)) != w.packets {
			t.Errorf("record %d: %d octets %d packets, want %d %d", i, binary.BigEndian.Uint64(get(IEOctetDeltaCount)),
				binary.BigEndian.Uint64(get(IEPacketDeltaCount)), w.octets, w.packets)
		}
		if get(IEBiflowDirection)[0] != w.dir || get(IEFlowEndReason)[0] != byte(conntrack.FlowForced) || get(IEProtocolIdentifier)[0] != 17 {
			t.Errorf("record %d: direction %d, end %d, protocol %d", i, get(IEBiflowDirection)[0], get(IEFlowEndReason)[0], get(IEProtocolIdentifier)[0])
		}
		if pod := string(field(&tmpl, r, IESourcePodName, DocumentationPEN)); pod != w.srcPod {
			t.Errorf("record %d: source pod %q, want %q", i, pod, w.srcPod)
		}
		if v := binary.BigEndian.Uint32(field(&tmpl, r, IESourceVNID, DocumentationPEN)); v != w.srcVNID {
			t.Errorf("record %d: source VNID %#x, want %#x", i, v, w.srcVNID)
		}
		start := int64(binary.BigEndian.Uint64(get(IEFlowStartMilliseconds)))
		if d := time.Since(time.UnixMilli(start)); d < 0 || d > time.Minute {
			t.Errorf("record %d: start %v ago", i, d)
		}
	}
	if s := e.Stats(); s.Records != 2 || s.Dropped != 0 || s.Messages < 2 || s.SendErrors != 0 {
		t.Errorf("stats %+v: want 2 records in at least 2 messages (templates first)", s)
	}
}

// TestExporterQueueFull: with the queue full OnEnd drops and counts, and
// neither blocks nor allocates.
func TestExporterQueueFull(t *testing.T) {
	e := newExporter(Config{Collectors: []string{"192.0.2.1:4739"}, QueueLen: 1})
	f := conntrack.Flow{Packets: [2]uint64{3, 1}}
	e.OnEnd(f)
	if n := testing.AllocsPerRun(100, func() { e.OnEnd(f) }); n != 0 {
		t.Errorf("OnEnd: %v allocations", n)
	}
	if s := e.Stats(); s.Dropped != 2*101 {
		t.Errorf("dropped %d records, want %d (two directions, 101 flows)", s.Dropped, 2*101)
	}
}

// TestConfigValidate: collectors are IPv4:port; ranges are checked.
func TestConfigValidate(t *testing.T) {
	ok := Config{Collectors: []string{"192.0.2.10:4739"}}
	if err := ok.Validate(); err != nil {
		t.Error(err)
	}
	for name, c := range map[string]Config{
		"name":        {Collectors: []string{"collector:4739"}},
		"no port":     {Collectors: []string{"192.0.2.10"}},
		"port 0":      {Collectors: []string{"192.0.2.10:0"}},
		"IPv6":        {Collectors: []string{"[2001:db8::1]:4739"}},
		"unspecified": {Collectors: []string{"0.0.0.0:4739"}},
		"queue":       {Collectors: ok.Collectors, QueueLen: -1},
		"message":     {Collectors: ok.Collectors, MaxMessage: 100},
		"rate":        {Collectors: ok.Collectors, MaxRate: -1},
	} {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}

// BenchmarkRecords is the exporter's cost per connection once it is
// reported: its two records built and encoded into a message.
func BenchmarkRecords(b *testing.B) {
	f := conntrack.Flow{
		Orig:    conntrack.Tuple{Src: podA, Dst: ext, SrcPort: 5000, DstPort: 53, Proto: conntrack.ProtoUDP},
		Reply:   conntrack.Tuple{Src: ext, Dst: node, SrcPort: 53, DstPort: 5000, Proto: conntrack.ProtoUDP},
		NAT:     conntrack.NATSrc,
		Packets: [2]uint64{2, 1}, Bytes: [2]uint64{256, 328}, End: conntrack.FlowEnded,
	}
	clock := Clock{Wall: time.Now()}
	var out [2]Record
	var m Message
	buf := make([]byte, 0, 2048)
	b.ReportAllocs()
	for b.Loop() {
		m.Begin(buf, 0, 0, 0)
		m.StartSet(TemplateFlowNAT)
		n := Records(&f, clock, resolve, &out)
		for i := range n {
			m.SetBytes(AppendRecord(m.Bytes(), &out[i]))
		}
		if _, err := m.Finish(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRecords: a connection without translation uses template 256 and
// skips a direction without packets; an ICMP query carries its type and
// code in icmpTypeCodeIPv4 and no ports; start and end are dated by the
// clock.
func TestRecords(t *testing.T) {
	clock := Clock{Wall: time.UnixMilli(1_000_000), Now: conntrack.Time(5 * time.Second)}
	var out [2]Record
	tcp := conntrack.Flow{
		Orig:    conntrack.Tuple{Src: podA, Dst: ext, SrcPort: 40000, DstPort: 80, Proto: conntrack.ProtoTCP},
		Reply:   conntrack.Tuple{Src: ext, Dst: podA, SrcPort: 80, DstPort: 40000, Proto: conntrack.ProtoTCP},
		Packets: [2]uint64{1, 0}, Bytes: [2]uint64{60, 0},
		Start: conntrack.Time(4 * time.Second), Last: conntrack.Time(4*time.Second + 500*time.Millisecond), End: conntrack.FlowIdle,
	}
	if n := Records(&tcp, clock, nil, &out); n != 1 {
		t.Fatalf("%d records, want 1 (the reply direction carried nothing)", n)
	}
	want := Record{Src: podA, Dst: ext, SrcPort: 40000, DstPort: 80, Proto: 6, Octets: 60, Packets: 1,
		StartMs: 999_000, EndMs: 999_500, EndReason: conntrack.FlowIdle, Direction: DirInitiator, SrcVNID: NoVNID, DstVNID: NoVNID}
	if out[0] != want || out[0].TemplateID() != TemplateFlow {
		t.Errorf("got %+v\nwant %+v", out[0], want)
	}
	icmp := conntrack.Flow{
		Orig:    conntrack.Tuple{Src: podA, Dst: ext, SrcPort: 8, DstPort: 0, ID: 7, Proto: conntrack.ProtoICMP},
		Reply:   conntrack.Tuple{Src: ext, Dst: podA, SrcPort: 0, DstPort: 0, ID: 7, Proto: conntrack.ProtoICMP},
		Packets: [2]uint64{1, 1}, Bytes: [2]uint64{84, 84},
	}
	if n := Records(&icmp, clock, resolve, &out); n != 2 {
		t.Fatalf("%d records, want 2", n)
	}
	if out[0].ICMPTypeCode != 8<<8 || out[1].ICMPTypeCode != 0 || out[0].SrcPort != 0 || out[0].DstPort != 0 {
		t.Errorf("ICMP records %+v", out)
	}
	if out[0].SrcPod != "alpha/client" || out[0].SrcVNID != 7 || out[1].DstPod != "alpha/client" || out[1].SrcVNID != NoVNID {
		t.Errorf("pods: %+v", out)
	}
}

// TestExporterSplits: records that do not fit in one message of
// MaxMessage bytes go in several, each within the bound, each decodable,
// with sequence numbers that count the records sent before it (RFC 7011
// section 3.1).
func TestExporterSplits(t *testing.T) {
	e := newExporter(Config{Collectors: []string{"192.0.2.1:4739"}, MaxMessage: 512, IdleTimeout: -1, ActiveTimeout: -1, Resolve: resolve})
	client, peer := net.Pipe()
	t.Cleanup(func() { client.Close(); peer.Close() })
	e.dest = []collector{{name: "pipe", write: func(b []byte) error { _, err := client.Write(b); return err }}}
	tr, err := conntrack.New(conntrack.Config{MaxEntries: 64, Accounting: true})
	if err != nil {
		t.Fatal(err)
	}
	const flows = 20
	for i := range flows {
		f := conntrack.Flow{
			Orig:    conntrack.Tuple{Src: podA, Dst: ext, SrcPort: uint16(1000 + i), DstPort: 53, Proto: conntrack.ProtoUDP},
			Reply:   conntrack.Tuple{Src: ext, Dst: node, SrcPort: 53, DstPort: uint16(1000 + i), Proto: conntrack.ProtoUDP},
			Packets: [2]uint64{1, 1}, Bytes: [2]uint64{100, 100},
		}
		if i%2 == 0 {
			f.NAT = conntrack.NATSrc // alternate the templates
		}
		e.OnEnd(f)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx, tr); close(done) }()
	var d Decoder
	got := uint32(0)
	for got < 2*flows {
		b := make([]byte, 65536)
		if err := peer.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		n, err := peer.Read(b)
		if err != nil {
			t.Fatalf("after %d records: %v", got, err)
		}
		if n > 512 {
			t.Errorf("a message of %d bytes, more than 512", n)
		}
		m, err := d.Decode(b[:n])
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Seq != got {
			t.Errorf("sequence number %d after %d records", m.Header.Seq, got)
		}
		got += uint32(len(m.Records))
	}
	cancel()
	go func() { // Run's last flush may have nothing; read whatever comes
		b := make([]byte, 65536)
		for {
			if _, err := peer.Read(b); err != nil {
				return
			}
		}
	}()
	<-done
	if got != 2*flows || e.Stats().Records != 2*flows {
		t.Errorf("%d records read, %d sent; want %d", got, e.Stats().Records, 2*flows)
	}
}
