package daemon

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/bench/gen"
	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/sdn"
)

// slowDNS is a resolver whose server (in this process, over pipes: DNS
// over a stream, length-prefixed) answers every A query with addr once
// release is closed.
func slowDNS(addr netip.Addr, release <-chan struct{}) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		client, server := net.Pipe()
		go func() {
			defer server.Close()
			for {
				var l [2]byte
				if _, err := io.ReadFull(server, l[:]); err != nil {
					return
				}
				q := make([]byte, binary.BigEndian.Uint16(l[:]))
				if _, err := io.ReadFull(server, q); err != nil {
					return
				}
				<-release
				pq, err := gen.ParseDNSQuery(q)
				if err != nil {
					return
				}
				var addrs []netip.Addr
				if pq.Type == 1 {
					addrs = []netip.Addr{addr}
				}
				a := gen.DNSAnswer(q, pq, addrs)
				if _, err := server.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(a))), a...)); err != nil {
					return
				}
			}
		}()
		return &streamConn{client}, nil
	}}
}

// streamConn makes the Go resolver speak DNS over TCP framing to a pipe.
type streamConn struct{ net.Conn }

func (streamConn) LocalAddr() net.Addr  { return &net.TCPAddr{} }
func (streamConn) RemoteAddr() net.Addr { return &net.TCPAddr{} }

// An egress firewall naming a DNS name is installed without waiting for
// DNS: until the name resolves, its project's egress is denied entirely
// (a Deny rule on the name must not let its traffic through meanwhile);
// then the object's own rules replace the deny-all.
func TestEgressFirewallDoesNotWaitForDNS(t *testing.T) {
	d := newTestDaemon(t)
	release := make(chan struct{})
	d.node.egress.resolver = slowDNS(netip.MustParseAddr("203.0.113.7"), release)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
		d.node.egress.wg.Wait()
	})
	rules := func() string {
		var out []string
		for _, r := range d.dp.table.Rules() {
			if r.Cookie == sdn.EgressFirewallCookie(10) {
				out = append(out, r.String())
			}
		}
		return strings.Join(out, "\n")
	}
	start := time.Now()
	err := d.node.SetEgressFirewall("alpha", "default", []source.EgressRule{
		{Allow: false, DNSName: "blocked.example"},
		{Allow: true, CIDR: netip.MustParsePrefix("0.0.0.0/0")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("SetEgressFirewall waited %v for DNS", took)
	}
	if got := rules(); strings.Count(got, "\n") != 0 || !strings.Contains(got, "drop") || strings.Contains(got, "203.0.113.7") {
		t.Fatalf("while the name resolves, want one deny-all rule for VNID 10:\n%s", got)
	}
	close(release)
	d.node.egress.wg.Wait()
	got := rules()
	t.Logf("VNID 10's egress firewall:\n%s", got)
	if !strings.Contains(got, "nw_dst=203.0.113.7") || !strings.Contains(got, "actions=goto_table:101") {
		t.Errorf("after the name resolved, want its rule and the allow:\n%s", got)
	}
}
