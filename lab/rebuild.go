package lab

import (
	"context"
	"fmt"
	"net/netip"
	"time"
)

// RebuildNode tears node name's network namespace down and makes it again
// under the same name, as a rebooted machine's comes back: lo and eth0 on
// the underlay with the node's address, up, and nothing else (no route, no
// other link, no sysctl set). Every process in the old namespace must
// have ended (the caller's to end); the node's pod namespaces, if any, are
// left as they are. The underlay's port for the node is deleted (with it
// the old eth0) before the new one is attached.
func (l *Lab) RebuildNode(ctx context.Context, name string) error {
	var n *Node
	for i := range l.Nodes {
		if l.Nodes[i].Name == name {
			n = &l.Nodes[i]
		}
	}
	if n == nil {
		return fmt.Errorf("lab: no node %q", name)
	}
	if err := deleteNamed(n.NS); err != nil {
		return err
	}
	ulh, err := openHandle(l.UnderlayNS())
	if err != nil {
		return err
	}
	defer ulh.close()
	// Deleting the underlay's end removes the pair at once; the old
	// namespace itself may take a while to go (its cleanup is the kernel's,
	// queued behind every other namespace being destroyed on the machine).
	if port, err := ulh.LinkByName(n.Name); err == nil {
		if err := ulh.LinkDel(port); err != nil {
			return fmt.Errorf("lab: rebuild %s: delete the underlay's port %s: %w", n.NS, n.Name, err)
		}
	}
	for {
		if _, err := ulh.LinkByName(n.Name); err != nil {
			break // the old veth is gone
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lab: rebuild %s: the old namespace's link %s is still there (a process or open file still holds the namespace?): %w", n.NS, n.Name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := createNamed(n.NS); err != nil {
		return err
	}
	return attach(ulh, n.Name, n.NS, netip.PrefixFrom(n.IP, l.Underlay.Bits()))
}
