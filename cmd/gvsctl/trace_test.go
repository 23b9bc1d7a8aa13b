package main

import (
	"strings"
	"testing"

	"github.com/gvswitch/gvs/conntrack"
	"github.com/gvswitch/gvs/flowtable"
)

// TestTraceArgs: --ct-next states travel as ct_next items of the
// description, in order, and read back with flowtable.ParseTrace; a bad
// state or a missing description fails before any call.
func TestTraceArgs(t *testing.T) {
	got, err := traceArgs([]string{"--ct-next", "trk|est", "in_port=1,tcp", "--ct-next=+trk+new", "nw_dst=10.0.0.2"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "in_port=1,tcp,nw_dst=10.0.0.2,ct_next=trk|est,ct_next=+trk+new"; got != want {
		t.Fatalf("traceArgs = %q, want %q", got, want)
	}
	f, o, err := flowtable.ParseTrace(got)
	if err != nil || f.InPort != 1 || f.NwDst != [4]byte{10, 0, 0, 2} || len(o.CTNext) != 2 ||
		o.CTNext[0] != conntrack.StateTrk|conntrack.StateEst || o.CTNext[1] != conntrack.StateTrk|conntrack.StateNew {
		t.Fatalf("ParseTrace(%q) = %+v, %+v, %v", got, f, o, err)
	}
	for _, bad := range [][]string{{"--ct-next", "bogus", "ip"}, {"ip", "--ct-next"}, {"--ct-next", "trk"}, {"--ct-next", "trk-new", "ip"}} {
		if _, err := traceArgs(bad); err == nil {
			t.Errorf("traceArgs(%q) accepted", strings.Join(bad, " "))
		}
	}
}
