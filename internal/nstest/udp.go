package nstest

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/testutil"
)

// WaitUDPRead waits up to timeout until the UDP socket bound to port in
// the named namespace has no unread datagram (its rx_queue in
// /proc/net/udp is 0), and fails t if it does not come. A collector such
// as nfcapd stops without draining its socket: a test that stops it
// right after the last datagram was sent loses what the kernel still
// queues for it.
func WaitUDPRead(t testing.TB, ns string, port uint16, timeout time.Duration) {
	t.Helper()
	testutil.WaitFor(t, timeout, fmt.Sprintf("UDP port %d in %s to read its queue", port, ns), func() (bool, error) {
		out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/proc/net/udp").Output()
		if err != nil {
			return false, fmt.Errorf("reading %s's /proc/net/udp: %w", ns, err)
		}
		return udpQueueEmpty(string(out), port)
	})
}

// udpQueueEmpty reads /proc/net/udp's text: whether the socket bound to
// port (any address) has an empty receive queue. Its columns are "sl
// local_address rem_address st tx_queue:rx_queue …", addresses and
// queues in hexadecimal.
func udpQueueEmpty(procNetUDP string, port uint16) (bool, error) {
	suffix := fmt.Sprintf(":%04X", port)
	for _, line := range strings.Split(procNetUDP, "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasSuffix(f[1], suffix) {
			return strings.HasSuffix(f[4], ":00000000"), nil
		}
	}
	return false, fmt.Errorf("no UDP socket on port %d", port)
}
