package vswitch

import (
	"bytes"
	"testing"
	"time"

	"github.com/gvswitch/gvs/flowtable"
)

// wakePort is a memPort whose Read can be woken (Waker).
type wakePort struct{ *memPort }

func (p wakePort) Wake() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Config.TrimIdle: a worker idle for TrimIdle after a batch that dirtied its
// buffers is woken, releases them once, and forwards the next frames
// unharmed; a clean worker is left alone.
func TestTrimIdle(t *testing.T) {
	tbl := flowtable.New(flowtable.Config{})
	rs, err := flowtable.ParseRules("table=0, priority=100, in_port=1, actions=output:2")
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.Add(rs...); err != nil {
		t.Fatal(err)
	}
	sw, err := New(Config{Table: tbl, TrimIdle: 40 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Close() })
	mp := newMemPort("in")
	mp.wake = make(chan struct{}, 1)
	in := wakePort{mp}
	out := newMemPort("out")
	// A batch of three, read at once: more than the first buffer.
	for i := range 3 {
		in.send(udpFrame(1, byte(10+i)))
	}
	if err := sw.AddPort(2, out); err != nil {
		t.Fatal(err)
	}
	if err := sw.AddPort(1, in); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the batch", func() bool { return len(out.written()) == 3 })
	waitFor(t, "a release", func() bool { return sw.Stats().BufferReleases == 1 })

	frame := udpFrame(1, 99)
	in.send(frame)
	waitFor(t, "a frame after the release", func() bool { return len(out.written()) == 4 })
	if got := out.written()[3]; !bytes.Equal(got, frame) {
		t.Fatalf("after the release the switch wrote %x, want %x", got, frame)
	}
	// One small frame leaves the buffers clean: no further release.
	time.Sleep(300 * time.Millisecond)
	if n := sw.Stats().BufferReleases; n != 1 {
		t.Errorf("%d releases after a clean batch, want 1", n)
	}
	if _, err := New(Config{Table: tbl, TrimIdle: -time.Second}); err == nil {
		t.Error("a negative TrimIdle was taken")
	}
}
