package e2e

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/gvswitch/gvs/bench/gen"
	"github.com/gvswitch/gvs/lab"
)

// udpProbe sends 20 UDP probes from ns to a udp-echo at addr and returns
// how many came back.
func udpProbe(t *testing.T, l *lab.Lab, ns, addr string) (got, sent int, out string) {
	t.Helper()
	b, err := l.Exec(ctx(t), ns, filepath.Join(binDir, "gvs-bench"), "udp-probe", "-c", addr, "-n", "20", "-i", "5ms")
	var r gen.LatencyResult
	if err != nil || json.Unmarshal(b, &r) != nil {
		return 0, 20, string(b)
	}
	return r.Received, r.Sent, string(b)
}

// sctpProbe sends 5 SCTP INITs from ns to an sctp-respond at addr and
// returns how many were answered.
func sctpProbe(t *testing.T, l *lab.Lab, ns, addr string) (got, sent int, out string) {
	t.Helper()
	b, err := l.Exec(ctx(t), ns, filepath.Join(binDir, "gvs-bench"), "sctp-probe", "-c", addr, "-n", "5", "-timeout", "1s")
	var r gen.SCTPResult
	if err != nil || json.Unmarshal(b, &r) != nil {
		return 0, 5, string(b)
	}
	return r.Answered, r.Sent, string(b)
}

// probeAsWanted reports whether got of sent answers is what want says: most
// of them answered (a loaded machine loses some), or none at all (a
// refusal lets nothing through, not even some).
func probeAsWanted(want bool, got, sent int) bool {
	if want {
		return sent > 0 && 4*got >= 3*sent
	}
	return got == 0
}
