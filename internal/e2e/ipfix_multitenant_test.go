package e2e

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/daemon"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/netconf"
)

// TestIPFIXMultitenant: with flow export on, the multitenant program
// commits pod-to-pod connections for accounting (sdn.NodeConfig.Accounting),
// which it otherwise leaves untracked, so node 1 exports them: a UDP
// exchange with a pod of the same project on the node and one with a pod
// of the project on the other node, 20 datagrams each way, counted
// exactly. A datagram to a pod of another project, which isolation drops,
// leaves no record (it is never committed), and isolation still holds
// with accounting on.
func TestIPFIXMultitenant(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	// Per node: p1 alpha, p2 beta, p3 alpha.
	c := up(t, "ix2", cluster.Spec{
		Lab:          lab.Spec{Nodes: 2, PodsPerNode: 3, Projects: []string{"alpha", "beta"}, External: true},
		Mode:         "multitenant",
		ControlPlane: cluster.ControlPlaneEmbedded,
		CNI:          true,
		Configure: func(c *cluster.Cluster, i int, cfg *daemon.Config) {
			if i != 0 {
				return
			}
			cfg.IPFIX = &daemon.IPFIXConfig{Collectors: []string{c.Lab.External.IP.String() + ":4740"},
				IdleTimeout: "1s", TemplateRefresh: "1s"}
		},
	})
	ext := c.Lab.External
	own := listenIPFIX(t, ext.NSPath, netip.AddrPortFrom(ext.IP, 4740))
	client, beta, local, remote := c.Nodes[0].Pods[0], c.Nodes[0].Pods[1], c.Nodes[0].Pods[2], c.Nodes[1].Pods[0]
	if client.Project != local.Project || client.Project != remote.Project || beta.Project == client.Project {
		t.Fatalf("projects: client %s, local %s, remote %s, beta %s", client.Project, local.Project, remote.Project, beta.Project)
	}

	// Isolation: a datagram to beta's pod is dropped, and not counted.
	var isolated flowKey
	if err := netconf.Do(client.NSPath, func() error {
		conn, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(beta.IP, 5500)))
		if err != nil {
			return err
		}
		defer conn.Close()
		isolated = flowKey{netip.MustParseAddrPort(conn.LocalAddr().String()), netip.AddrPortFrom(beta.IP, 5500), 17}
		_, err = conn.Write(make([]byte, 100))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Lab.Exec(ctx(t), client.NS, "ping", "-c", "1", "-W", "1", "-q", beta.IP.String()); err == nil {
		t.Fatalf("alpha reaches beta with accounting on:\n%s", out)
	}

	x1 := flowKey{ixUDPExchange(t, client, local, 5501, 20, 500), netip.AddrPortFrom(local.IP, 5501), 17}
	x2 := flowKey{ixUDPExchange(t, client, remote, 5502, 20, 500), netip.AddrPortFrom(remote.IP, 5502), 17}
	if err := testutil.Poll(30*time.Second, "records of both exchanges", func() (bool, error) {
		s := own.sums()
		for _, k := range []flowKey{x1, x1.reverse(), x2, x2.reverse()} {
			if s[k].packets < 20 {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		ct, _ := c.Ctl(ctx(t), 0, "dump-conntrack")
		t.Fatalf("%v: the collector has %+v\nnode 1's connections:\n%s", err, own.sums(), ct)
	}
	s := own.sums()
	for _, k := range []flowKey{x1, x1.reverse(), x2, x2.reverse()} {
		if f := s[k]; f.packets != 20 || f.bytes != 20*(500+28) {
			t.Errorf("%v: %d packets, %d bytes; want 20 and %d", k, f.packets, f.bytes, 20*(500+28))
		}
	}
	// The project's VNID: the same for the client and the local pod, both
	// alpha's, and not the global 0.
	if f := s[x2]; f.srcPod != client.Project+"/"+client.Name || f.srcVNID == 0 || f.srcVNID != s[x1].dstVNID {
		t.Errorf("%v names pod %q VNID %d, want %s/%s with alpha's VNID (the local pod's is %d)", x2, f.srcPod, f.srcVNID,
			client.Project, client.Name, s[x1].dstVNID)
	}
	for k, f := range s {
		if k.dst.Addr() == beta.IP || k.src.Addr() == beta.IP {
			t.Errorf("a record of beta's pod, which isolation kept out: %v %+v (the datagram was %v)", k, f, isolated)
		}
	}
	if t.Failed() {
		var keys []string
		for k := range s {
			keys = append(keys, k.String())
		}
		t.Logf("records: %s", strings.Join(keys, ", "))
	}
}
