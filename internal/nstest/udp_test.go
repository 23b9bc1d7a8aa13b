package nstest

import "testing"

func TestUDPQueueEmpty(t *testing.T) {
	const proc = `   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  12: 0A000002:1283 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 0000000000000000 0
  13: 0A000002:1284 00000000:0000 07 00000000:00000340 00:00000000 00000000     0        0 3 2 0000000000000000 0
`
	for _, c := range []struct {
		port      uint16
		empty, ok bool
	}{{4739, true, true}, {4740, false, true}, {4741, false, false}} {
		empty, err := udpQueueEmpty(proc, c.port)
		if empty != c.empty || (err == nil) != c.ok {
			t.Errorf("port %d: empty %v, err %v; want %v, ok %v", c.port, empty, err, c.empty, c.ok)
		}
	}
}
