package vswitch

import (
	"testing"

	"github.com/gvswitch/gvs/conntrack"
	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/port"
	"github.com/gvswitch/gvs/sdn"
)

// BenchmarkOpenShiftPodToPod: a batch of 64 UDP frames of 64 flows from one
// local pod to another of its project, through the whole OpenShift rule
// program of a multitenant node (sdn.Program). "tracked" is the program as
// generated, whose table 0 sends every packet to the cluster network
// through the connection tracker first (services: docs/openshift-rules.md);
// "untracked" is the same program without that rule, as before. The
// difference is what the services' connection state costs every packet.
func BenchmarkOpenShiftPodToPod(b *testing.B) {
	for _, tracked := range []bool{true, false} {
		name := "untracked"
		if tracked {
			name = "tracked"
		}
		b.Run(name, func(b *testing.B) { benchBatch(b, openShiftWorker(b, tracked)) })
	}
}

// openShiftWorker returns a worker for local pod 0's port of a churnNode
// with 100 pods, loaded with a batch to pod 50 (same VNID).
func openShiftWorker(tb testing.TB, tracked bool) *worker {
	tb.Helper()
	var pods []sdn.Pod
	for i := range 100 {
		pods = append(pods, churnPod(i))
	}
	rs, err := sdn.Program(churnNode, pods, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if !tracked {
		rs = slicesDeleteFunc(rs, func(r *flowtable.Rule) bool {
			return r.Table == sdn.TableClassify && r.Priority == 1000
		})
	}
	tbl := flowtable.New(flowtable.Config{})
	if err := tbl.Add(rs...); err != nil {
		tb.Fatal(err)
	}
	ct, err := conntrack.New(conntrack.Config{MaxEntries: 1024})
	if err != nil {
		tb.Fatal(err)
	}
	sw, err := New(Config{Table: tbl, Conntrack: ct})
	if err != nil {
		tb.Fatal(err)
	}
	src, dst := churnPod(0), churnPod(50)
	sink := &discardPort{}
	m := portMap{
		src.Port: {no: src.Port, q: []Port{sink}},
		dst.Port: {no: dst.Port, q: []Port{sink}},
	}
	sw.ports.Store(&m)
	w := sw.newWorker(m[src.Port], sink)
	for i := range w.bufs {
		f := udpCT(src.IP.As4(), dst.IP.As4(), uint16(10000+i), 53, "0123456789abcdef")
		copy(f[6:12], []byte{0x0a, 0x58, 10, 128, 0, 2})
		w.meta[i] = port.Meta{Size: copy(w.bufs[i][Headroom:], f)}
	}
	w.process(len(w.bufs))
	if sink.n != len(w.bufs) {
		tb.Fatalf("%d of %d frames delivered", sink.n, len(w.bufs))
	}
	return w
}

func slicesDeleteFunc(rs []*flowtable.Rule, del func(*flowtable.Rule) bool) []*flowtable.Rule {
	out := rs[:0]
	for _, r := range rs {
		if !del(r) {
			out = append(out, r)
		}
	}
	return out
}
