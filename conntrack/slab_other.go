//go:build !linux

package conntrack

func (t *Tracker) allocSlab(n, m int) ([]entry, []atomicU32) {
	return make([]entry, n), make([]atomicU32, m)
}
