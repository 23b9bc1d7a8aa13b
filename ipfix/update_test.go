package ipfix

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/gvswitch/gvs/conntrack"
	"github.com/gvswitch/gvs/internal/testutil"
)

// collectors records what an exporter wrote to each address, decoded.
type collectors struct {
	mu   sync.Mutex
	dec  map[netip.AddrPort]*Decoder
	tmpl map[netip.AddrPort]int
	pkts map[netip.AddrPort]uint64 // packetDeltaCount summed
	err  error
}

func (c *collectors) write(b []byte, to netip.AddrPort) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dec[to] == nil {
		c.dec[to] = &Decoder{}
	}
	m, err := c.dec[to].Decode(b)
	if err != nil {
		c.err = errors.Join(c.err, err)
		return nil
	}
	c.tmpl[to] += len(m.Templates)
	tmpl := Templates(DocumentationPEN)
	for i := range m.Records {
		r := &m.Records[i]
		c.pkts[to] += binary.BigEndian.Uint64(field(&tmpl[r.Template-TemplateFlow], r, IEPacketDeltaCount, 0))
	}
	return nil
}

func (c *collectors) get(to netip.AddrPort) (templates int, packets uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tmpl[to], c.pkts[to]
}

// TestExporterUpdate: a running exporter's collectors and timeouts change
// without a restart. A connection that was never reported while the
// exporter had collector A (no timeouts) is reported to B, added by an
// update that also sets an active timeout, with every packet it carried
// before the update; B has the templates at once; A, removed, gets
// nothing more; with no collector the exporter sends nothing; an
// invalid update is refused and changes nothing.
func TestExporterUpdate(t *testing.T) {
	a, b := netip.MustParseAddrPort("192.0.2.1:4739"), netip.MustParseAddrPort("192.0.2.2:4739")
	e := newExporter(Config{Collectors: []string{a.String()}, IdleTimeout: -1, ActiveTimeout: -1, Interval: 10 * time.Millisecond})
	got := &collectors{dec: map[netip.AddrPort]*Decoder{}, tmpl: map[netip.AddrPort]int{}, pkts: map[netip.AddrPort]uint64{}}
	e.writeTo = got.write
	e.setCollectors(e.cfg.Collectors)

	tr, err := conntrack.New(conntrack.Config{MaxEntries: 64, Accounting: true, OnEnd: e.OnEnd})
	if err != nil {
		t.Fatal(err)
	}
	commit := conntrack.Action{Commit: true}
	for range 3 {
		var m conntrack.Meta
		if r := tr.Process(tr.Now(), udpPacket(podA, ext, 5000, 53, 100), conntrack.CsumVerified, &commit, &m); r != conntrack.ReasonNone {
			t.Fatal(r)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx, tr); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	testutil.WaitFor(t, 10*time.Second, "A to have the templates", func() (bool, error) { n, _ := got.get(a); return n == 2, nil })

	if err := e.Update(Config{Collectors: []string{"collector:4739"}}); !errors.Is(err, ErrConfig) {
		t.Fatalf("an update naming a host: %v, want ErrConfig", err)
	}
	if err := e.Update(Config{Collectors: []string{b.String()}, IdleTimeout: -1, ActiveTimeout: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "B to have the connection's 3 packets", func() (bool, error) {
		_, n := got.get(b)
		return n == 3, nil
	})
	if n, _ := got.get(b); n < 2 {
		t.Errorf("B has %d templates, want them", n)
	}
	if tm, n := got.get(a); tm != 2 || n != 0 {
		t.Errorf("A, removed, has %d templates and %d packets; want the first 2 templates and no record", tm, n)
	}
	if s := e.Stats(); s.Collectors != 1 {
		t.Errorf("%d collectors, want 1", s.Collectors)
	}

	// No collector: nothing is sent, and the packets of meanwhile wait in
	// the tracker for the next one.
	if err := e.Update(Config{IdleTimeout: -1, ActiveTimeout: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "no collector", func() (bool, error) { return e.Stats().Collectors == 0, nil })
	messages := e.Stats().Messages
	var m conntrack.Meta
	tr.Process(tr.Now(), udpPacket(podA, ext, 5000, 53, 100), conntrack.CsumVerified, &commit, &m)
	time.Sleep(100 * time.Millisecond) // several walks, which must not take the packet
	if s := e.Stats(); s.Messages != messages {
		t.Errorf("%d messages sent with no collector", s.Messages-messages)
	}
	if err := e.Update(Config{Collectors: []string{a.String()}, IdleTimeout: -1, ActiveTimeout: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "A, back, to have the packet sent while there was no collector", func() (bool, error) {
		_, n := got.get(a)
		return n == 1, nil
	})
	got.mu.Lock()
	defer got.mu.Unlock()
	if got.err != nil {
		t.Errorf("a message the decoder refuses: %v", got.err)
	}
}
