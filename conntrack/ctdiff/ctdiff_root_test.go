package ctdiff

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/lab/ovs"
)

// A rule set of the differential test: its rules (ovs-ofctl text, {macA}
// and {macB} standing for the MACs of pods A and B), the traffic to send
// through it, and the observations whose values the test also checks, so
// that two switches agreeing on nothing cannot pass.
type ctCase struct {
	name    string
	rules   string
	traffic func(ctx context.Context, s *side, o observations) error
	want    observations
}

var (
	aIP, bIP, cIP = podIPs[0], podIPs[1], podIPs[2]
	ap            = netip.AddrPortFrom
)

var ctCases = []ctCase{{
	name: "firewall",
	// A may open connections to B; only their replies (and related ICMP
	// errors) come back. Nothing B opens reaches A.
	rules: `
table=0, priority=100, ip, ct_state=-trk, actions=ct(table=1)
table=1, priority=100, in_port=1, ip, ct_state=+trk+new, actions=ct(commit),output:2
table=1, priority=100, in_port=1, ip, ct_state=+trk+est, actions=output:2
table=1, priority=100, in_port=1, ip, ct_state=+trk+rel, actions=output:2
table=1, priority=100, in_port=2, ip, ct_state=+trk+est, actions=output:1
table=1, priority=100, in_port=2, ip, ct_state=+trk+rel, actions=output:1
table=1, priority=0, actions=drop
`,
	traffic: func(ctx context.Context, s *side, o observations) error {
		a, b := s.pods[0], s.pods[1]
		return all(
			func() error { return tcpEcho(ctx, o, "A>B", a, b, ap(bIP, 7001), 7001) },
			func() error { return tcpRefused(o, "A>B", a, ap(bIP, 7002)) },
			func() error { return tcpAbort(o, "A>B", a, b, ap(bIP, 7003), 7003) },
			func() error { return tcpWindow(o, "A>B", a, b, 7004) },
			func() error { return udpEcho(o, "A>B", a, b, ap(bIP, 7005), 7005) },
			func() error { return udpClosed(o, "A>B", a, ap(bIP, 7006)) },
			func() error { return ping(ctx, s, o, "A>B", a, bIP, 56) },
			func() error { return ping(ctx, s, o, "A>B", a, bIP, 3000) },
			func() error { return tcpEcho(ctx, o, "B>A", b, a, ap(aIP, 7011), 7011) },
			func() error { return udpEcho(o, "B>A", b, a, ap(aIP, 7015), 7015) },
			func() error { return ping(ctx, s, o, "B>A", b, aIP, 56) },
		)
	},
	want: observations{
		"A>B tcp connect": "ok", "A>B tcp echo": "true", "A>B tcp closed port": "refused", "A>B tcp abort": "reset",
		"A>B tcp in-window ack": "delivered", "A>B tcp out-of-window data": "dropped", "A>B tcp ack of unsent data": "dropped",
		"A>B tcp syn+fin": "dropped", "A>B udp answer": "ok", "A>B udp closed port": "refused",
		"A>B ping 56": "3", "A>B ping 3000": "3",
		"B>A tcp connect": "timeout", "B>A udp answer": "timeout", "B>A udp peer": "none", "B>A ping 56": "0",
	},
}, {
	name: "zones",
	// A's and B's connections to C are committed in zones 1 and 2 (from
	// a register); C's replies are looked up in zone 1 only, so B's are
	// +new there and dropped: what zone 2 holds is not seen from zone 1.
	rules: `
table=0, priority=100, in_port=1, ip, actions=load:0x1->NXM_NX_REG0[0..15],ct(zone=NXM_NX_REG0[0..15],table=1)
table=0, priority=100, in_port=2, ip, actions=load:0x2->NXM_NX_REG0[0..15],ct(zone=NXM_NX_REG0[0..15],table=1)
table=0, priority=100, in_port=3, ip, actions=load:0x1->NXM_NX_REG0[0..15],ct(zone=NXM_NX_REG0[0..15],table=1)
table=1, priority=100, in_port=1, ip, ct_state=+trk+new, actions=ct(commit,zone=NXM_NX_REG0[0..15]),output:3
table=1, priority=100, in_port=2, ip, ct_state=+trk+new, actions=ct(commit,zone=NXM_NX_REG0[0..15]),output:3
table=1, priority=100, in_port=1, ip, ct_state=+trk+est, actions=output:3
table=1, priority=100, in_port=2, ip, ct_state=+trk+est, actions=output:3
table=1, priority=100, in_port=3, ip, ct_state=+trk+est, ct_zone=1, nw_dst=10.1.0.1, actions=output:1
table=1, priority=100, in_port=3, ip, ct_state=+trk+est, ct_zone=1, nw_dst=10.1.0.2, actions=output:2
table=1, priority=100, in_port=3, ip, ct_state=+trk+rel, ct_zone=1, nw_dst=10.1.0.1, actions=output:1
table=1, priority=0, actions=drop
`,
	traffic: func(ctx context.Context, s *side, o observations) error {
		a, b, c := s.pods[0], s.pods[1], s.pods[2]
		return all(
			func() error { return tcpEcho(ctx, o, "A>C", a, c, ap(cIP, 7101), 7101) },
			func() error { return udpEcho(o, "A>C", a, c, ap(cIP, 7102), 7102) },
			func() error { return udpClosed(o, "A>C", a, ap(cIP, 7103)) },
			func() error { return ping(ctx, s, o, "A>C", a, cIP, 56) },
			func() error { return tcpEcho(ctx, o, "B>C", b, c, ap(cIP, 7111), 7111) },
			func() error { return udpEcho(o, "B>C", b, c, ap(cIP, 7112), 7112) },
			func() error { return ping(ctx, s, o, "B>C", b, cIP, 56) },
		)
	},
	want: observations{
		"A>C tcp connect": "ok", "A>C tcp echo": "true", "A>C udp answer": "ok", "A>C udp closed port": "refused", "A>C ping 56": "3",
		"B>C tcp connect": "timeout", "B>C udp answer": "timeout", "B>C udp peer": "10.1.0.2", "B>C ping 56": "0",
	},
}, {
	name: "snat",
	// A's connections to C leave from 10.1.0.100; C's replies to it are
	// translated back (ICMP errors too) and sent to A.
	rules: `
table=0, priority=100, in_port=1, ip, actions=ct(zone=5,nat,table=1)
table=0, priority=100, in_port=3, ip, nw_dst=10.1.0.100, actions=ct(zone=5,nat,table=1)
table=1, priority=100, in_port=1, ip, ct_state=+trk+new, actions=ct(commit,zone=5,nat(src=10.1.0.100)),output:3
table=1, priority=100, in_port=1, ip, ct_state=+trk+est, actions=output:3
table=1, priority=100, in_port=1, ip, ct_state=+trk+rel, actions=output:3
table=1, priority=100, in_port=3, ip, ct_state=+trk+est, actions=mod_dl_dst:{macA},output:1
table=1, priority=100, in_port=3, ip, ct_state=+trk+rel, actions=mod_dl_dst:{macA},output:1
table=1, priority=0, actions=drop
`,
	traffic: func(ctx context.Context, s *side, o observations) error {
		a, c := s.pods[0], s.pods[2]
		return all(
			func() error { return tcpEcho(ctx, o, "A>C", a, c, ap(cIP, 7201), 7201) },
			func() error { return tcpRefused(o, "A>C", a, ap(cIP, 7202)) },
			func() error { return udpEcho(o, "A>C", a, c, ap(cIP, 7203), 7203) },
			func() error { return udpClosed(o, "A>C", a, ap(cIP, 7204)) },
			func() error { return ping(ctx, s, o, "A>C", a, cIP, 56) },
			func() error { return ping(ctx, s, o, "A>C", a, cIP, 3000) },
			func() error { return ping(ctx, s, o, "C>nat", c, natAddr, 56) },
		)
	},
	want: observations{
		"A>C tcp connect": "ok", "A>C tcp echo": "true", "A>C tcp peer": "10.1.0.100", "A>C tcp closed port": "refused",
		"A>C udp answer": "ok", "A>C udp peer": "10.1.0.100", "A>C udp closed port": "refused",
		"A>C ping 56": "3", "A>C ping 3000": "3", "C>nat ping 56": "0",
	},
}, {
	name: "dnat",
	// A reaches the virtual address 10.1.0.200: TCP port 80 is B's 8080,
	// UDP port 53 B's 5353, the rest B's same port; B's replies are
	// translated back to come from 10.1.0.200.
	rules: `
table=0, priority=100, in_port=1, ip, actions=ct(zone=7,nat,table=1)
table=0, priority=100, in_port=2, ip, actions=ct(zone=7,nat,table=1)
table=1, priority=110, in_port=1, tcp, nw_dst=10.1.0.200, tp_dst=80, ct_state=+trk+new, actions=ct(commit,zone=7,nat(dst=10.1.0.2:8080)),mod_dl_dst:{macB},output:2
table=1, priority=110, in_port=1, udp, nw_dst=10.1.0.200, tp_dst=53, ct_state=+trk+new, actions=ct(commit,zone=7,nat(dst=10.1.0.2:5353)),mod_dl_dst:{macB},output:2
table=1, priority=100, in_port=1, ip, nw_dst=10.1.0.200, ct_state=+trk+new, actions=ct(commit,zone=7,nat(dst=10.1.0.2)),mod_dl_dst:{macB},output:2
table=1, priority=100, in_port=1, ip, ct_state=+trk+est, actions=mod_dl_dst:{macB},output:2
table=1, priority=100, in_port=1, ip, ct_state=+trk+rel, actions=mod_dl_dst:{macB},output:2
table=1, priority=100, in_port=2, ip, ct_state=+trk+est, actions=output:1
table=1, priority=100, in_port=2, ip, ct_state=+trk+rel, actions=output:1
table=1, priority=0, actions=drop
`,
	traffic: func(ctx context.Context, s *side, o observations) error {
		a, b := s.pods[0], s.pods[1]
		return all(
			func() error { return tcpEcho(ctx, o, "A>vip", a, b, ap(vipAddr, 80), 8080) },
			func() error { return tcpAbort(o, "A>vip", a, b, ap(vipAddr, 80), 8080) },
			func() error { return tcpRefused(o, "A>vip", a, ap(vipAddr, 81)) },
			func() error { return udpEcho(o, "A>vip", a, b, ap(vipAddr, 53), 5353) },
			func() error { return udpClosed(o, "A>vip", a, ap(vipAddr, 54)) },
			func() error { return ping(ctx, s, o, "A>vip", a, vipAddr, 56) },
			func() error { return ping(ctx, s, o, "A>vip", a, vipAddr, 3000) },
			func() error { return tcpEcho(ctx, o, "B>A", b, a, ap(aIP, 7301), 7301) },
		)
	},
	want: observations{
		"A>vip tcp connect": "ok", "A>vip tcp echo": "true", "A>vip tcp peer": "10.1.0.1", "A>vip tcp abort": "reset",
		"A>vip tcp closed port": "refused", "A>vip udp answer": "ok", "A>vip udp peer": "10.1.0.1",
		"A>vip udp closed port": "refused", "A>vip ping 56": "3", "A>vip ping 3000": "3", "B>A tcp connect": "timeout",
	},
}}

// all runs steps in order and stops at the first error.
func all(steps ...func() error) error {
	for i, s := range steps {
		if err := s(); err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
	}
	return nil
}

// TestDifferentialOVS loads each rule set into a gvs switch and an OVS
// userspace bridge, sends the same traffic through both and compares
// what the pods observed.
func TestDifferentialOVS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces")
	}
	if err := ovs.Available(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l := newLab(t, ctx)
	sides := []*side{newGVSSide(t, ctx, l), newOVSSide(t, ctx, l)}
	for _, c := range ctCases {
		t.Run(c.name, func(t *testing.T) {
			obs := make([]observations, len(sides))
			for i, s := range sides {
				macs := strings.NewReplacer("{macA}", s.pods[0].mac.String(), "{macB}", s.pods[1].mac.String())
				if err := s.load(ctx, macs.Replace(c.rules)); err != nil {
					t.Fatalf("%s: load: %v", s.name, err)
				}
				obs[i] = observations{}
				if err := c.traffic(ctx, s, obs[i]); err != nil {
					t.Fatalf("%s: traffic: %v", s.name, err)
				}
			}
			keys := map[string]bool{}
			for _, o := range obs {
				for k := range o {
					keys[k] = true
				}
			}
			var lines []string
			for _, k := range slices.Sorted(maps.Keys(keys)) {
				g, v := obs[0][k], obs[1][k]
				mark := "  "
				if g != v {
					mark = "!="
					t.Errorf("%s: gvs %q, ovs %q", k, g, v)
				}
				if w, ok := c.want[k]; ok && w != g {
					t.Errorf("%s: gvs %q, want %q", k, g, w)
				}
				lines = append(lines, fmt.Sprintf("%s %-30s gvs %-10s ovs %s", mark, k, g, v))
			}
			for k := range c.want {
				if !keys[k] {
					t.Errorf("%s: not observed", k)
				}
			}
			t.Logf("%s deliveries:\n%s", c.name, strings.Join(lines, "\n"))
		})
	}
}
