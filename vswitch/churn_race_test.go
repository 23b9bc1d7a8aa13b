//go:build race

package vswitch

// TestChurnNoLoss's program under the race detector: a tenth of the normal
// one (10 117 rules), so that loading it stays well under a second. The
// updates and the traffic are the same.
const (
	churnPods     = 1200
	churnRemotes  = 1340
	churnMinRules = 10000
)
