package gen

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

func listen(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sink runs Sink on conn until the returned function is called, which
// returns what it received (after a 100 ms grace for datagrams in flight).
func sink(t *testing.T, conn *net.UDPConn) (stop func() SinkResult) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan SinkResult, 1)
	go func() {
		r, err := Sink(ctx, conn)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	return func() SinkResult {
		time.Sleep(100 * time.Millisecond) // pacing: the sink collects what is still in flight
		cancel()
		return <-done
	}
}

func TestSendSink(t *testing.T) {
	conn := listen(t)
	stop := sink(t, conn)
	s, err := Send(context.Background(), FlowConfig{Addr: conn.LocalAddr().String(), Frame: 100, Flows: 8, Rate: 20000, Duration: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := stop()
	if s.Packets < 2000 || s.Packets > 6000 {
		t.Errorf("sent %d packets at 20 kpps for 0.2 s", s.Packets)
	}
	if r.Packets == 0 || r.Packets > s.Packets {
		t.Errorf("received %d of %d", r.Packets, s.Packets)
	}
	if r.Bytes != r.Packets*100 {
		t.Errorf("received %d bytes in %d frames of 100", r.Bytes, r.Packets)
	}
}

func TestFrameSize(t *testing.T) {
	for _, f := range []int{63, 9001} {
		if _, err := Send(context.Background(), FlowConfig{Addr: "127.0.0.1:9", Frame: f}); !errors.Is(err, ErrFrameSize) {
			t.Errorf("frame %d: err %v", f, err)
		}
	}
}

func TestProbeEcho(t *testing.T) {
	conn := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = Echo(ctx, conn) }()
	r, err := Probe(context.Background(), ProbeConfig{Addr: conn.LocalAddr().String(), Count: 50, Interval: time.Millisecond, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Sent != 50 || r.Received != 50 {
		t.Errorf("sent %d received %d", r.Sent, r.Received)
	}
	if !(r.P50us > 0 && r.P50us <= r.P90us && r.P90us <= r.P99us && r.P99us <= r.Maxus) {
		t.Errorf("percentiles out of order: %+v", r)
	}
}

func TestPercentile(t *testing.T) {
	s := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		p    int
		want time.Duration
	}{{50, 5}, {90, 9}, {99, 10}, {100, 10}, {0, 1}} {
		if got := Percentile(s, c.p); got != c.want {
			t.Errorf("p%d = %d, want %d", c.p, got, c.want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("empty")
	}
}

func TestSendGSO(t *testing.T) {
	conn := listen(t)
	stop := sink(t, conn)
	s, err := Send(context.Background(), FlowConfig{Addr: conn.LocalAddr().String(), Frame: 1000, Flows: 2, GSO: 8, Duration: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := stop()
	if s.Packets == 0 || s.Packets%8 != 0 || s.Errors != 0 {
		t.Errorf("sent %d datagrams (%d errors), want a multiple of 8", s.Packets, s.Errors)
	}
	// The kernel cuts each send into 8 datagrams of the frame's payload.
	if r.Packets == 0 || r.Packets > s.Packets || r.Bytes != r.Packets*1000 {
		t.Errorf("received %d datagrams, %d bytes, of %d sent", r.Packets, r.Bytes, s.Packets)
	}
	for _, c := range []FlowConfig{{Frame: 1000, GSO: MaxGSO + 1}, {Frame: 1000, GSO: 8, Rate: 1000}} {
		c.Addr = conn.LocalAddr().String()
		if _, err := Send(context.Background(), c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

func TestParseNetpolTarget(t *testing.T) {
	tg, err := ParseNetpolTarget("sctp/10.128.0.2:81")
	if err != nil || tg.Proto != "sctp" || tg.Addr.Port() != 81 || tg.String() != "sctp/10.128.0.2:81" {
		t.Errorf("%+v, %v", tg, err)
	}
	for _, s := range []string{"", "tcp", "tcp/10.0.0.1", "icmp/10.0.0.1:1", "tcp/[::1]:80", "udp/10.0.0.1:0", "10.0.0.1:80"} {
		if _, err := ParseNetpolTarget(s); err == nil {
			t.Errorf("%q parsed", s)
		}
	}
}

func FuzzParseNetpolTarget(f *testing.F) {
	f.Add("tcp/10.128.0.2:80")
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := ParseNetpolTarget(s)
		if err != nil {
			return
		}
		back, err := ParseNetpolTarget(tg.String())
		if err != nil || back != tg {
			t.Errorf("%q → %+v → %q → %+v, %v", s, tg, tg.String(), back, err)
		}
	})
}
