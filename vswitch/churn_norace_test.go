//go:build !race

package vswitch

// TestChurnNoLoss's program without the race detector: 12 000 local pods
// and 13 400 remote nodes, 100 297 rules.
const (
	churnPods     = 12000
	churnRemotes  = 13400
	churnMinRules = 100000
)
