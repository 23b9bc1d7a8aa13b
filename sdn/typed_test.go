package sdn

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/gvswitch/gvs/flowtable"
)

// TestGeneratorsRoundTrip builds the rules of every generator for random
// pods, nodes, VNIDs and ports in both modes and checks that each rule's
// text parses back to it. (TestGolden checks the other way: the golden
// files' text parses to the rules built.)
func TestGeneratorsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, m := range goldenModes {
		cfg := benchNode()
		cfg.Mode = m.mode
		cfg.ClusterNetworks = []netip.Prefix{netip.MustParsePrefix("10.128.0.0/14"), netip.MustParsePrefix("10.200.0.0/16")}
		must(t)(SetupRules(cfg))
		for range 200 {
			i := rng.IntN(4000)
			pod := benchPod(i)
			pod.VNID = rng.Uint32N(MaxVNID + 1)
			pod.Port = FirstPodPort + rng.Uint32N(1<<20)
			if err := cfg.CheckPod(pod); err != nil {
				continue
			}
			if n := len(must(t)(PodRules(cfg, pod))); n != PodRuleCount {
				t.Fatalf("PodRules gave %d rules, want %d", n, PodRuleCount)
			}
			must(t)(VNIDRules(cfg, pod.VNID))
			must(t)(MulticastRules(cfg, pod.VNID, []uint32{pod.Port, pod.Port + 1}))
			must(t)(NodeRules(cfg, benchRemote(rng.IntN(100))))
		}
	}
}

// TestGeneratorsRefuse checks that the generators return an error, and
// build no rules, for inputs that validation refuses and that cannot be
// written as rules.
func TestGeneratorsRefuse(t *testing.T) {
	cfg := sampleNode(ModeMultitenant)
	v6 := netip.MustParseAddr("fd00::5")
	if rs, err := PodRules(cfg, Pod{Name: "p", IP: v6, Port: 3, VNID: 1}); err == nil || rs != nil || !errors.Is(err, flowtable.ErrInvalidRule) {
		t.Errorf("PodRules with an IPv6 pod = %d rules, %v", len(rs), err)
	}
	if rs, err := NodeRules(cfg, RemoteNode{Name: "n", IP: v6, Subnet: netip.MustParsePrefix("10.128.2.0/23")}); err == nil || rs != nil || !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NodeRules with an IPv6 node = %d rules, %v", len(rs), err)
	}
	if rs, err := NodeRules(cfg, RemoteNode{Name: "n", IP: netip.MustParseAddr("192.168.100.12"), Subnet: netip.MustParsePrefix("fd00::/64")}); err == nil || rs != nil {
		t.Errorf("NodeRules with an IPv6 subnet = %d rules, %v", len(rs), err)
	}
	bad := cfg
	bad.NodeIP = v6
	if rs, err := SetupRules(bad); err == nil || rs != nil || !errors.Is(err, flowtable.ErrInvalidRule) {
		t.Errorf("SetupRules with an IPv6 node IP = %d rules, %v", len(rs), err)
	}
	if rs, err := Program(cfg, []Pod{{Name: "p", IP: v6, Port: 3}}, nil); err == nil || rs != nil {
		t.Errorf("Program with an IPv6 pod = %d rules, %v", len(rs), err)
	}
}
