package sdn

import (
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gvswitch/gvs/flowtable"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func sampleNode(mode Mode) NodeConfig {
	return NodeConfig{
		NodeName:        "node-1",
		NodeIP:          netip.MustParseAddr("192.168.100.11"),
		Subnet:          netip.MustParsePrefix("10.128.0.0/23"),
		ClusterNetworks: []netip.Prefix{netip.MustParsePrefix("10.128.0.0/14")},
		ServiceNetwork:  netip.MustParsePrefix("172.30.0.0/16"),
		Mode:            mode,
		MTU:             1450,
	}
}

func samplePods() []Pod {
	return []Pod{
		{Name: "router", Namespace: "default", IP: netip.MustParseAddr("10.128.0.2"), Port: 3, VNID: 0},
		{Name: "web", Namespace: "alpha", IP: netip.MustParseAddr("10.128.0.3"), Port: 4, VNID: 10},
		{Name: "db", Namespace: "beta", IP: netip.MustParseAddr("10.128.1.200"), Port: 5, VNID: 11},
	}
}

func sampleNodes() []RemoteNode {
	return []RemoteNode{
		{Name: "node-2", IP: netip.MustParseAddr("192.168.100.12"), Subnet: netip.MustParsePrefix("10.128.2.0/23")},
		{Name: "node-3", IP: netip.MustParseAddr("192.168.100.13"), Subnet: netip.MustParsePrefix("10.128.4.0/23")},
	}
}

// sampleProgram returns the text of the sample node's program.
func sampleProgram(t *testing.T, mode Mode) []string {
	t.Helper()
	return Text(sampleRules(t, mode))
}

// sampleRules returns the sample node's program.
func sampleRules(t *testing.T, mode Mode) []*flowtable.Rule {
	t.Helper()
	cfg := sampleNode(mode)
	if err := cfg.Validate(); err != nil {
		t.Fatalf("sample config: %v", err)
	}
	for _, p := range samplePods() {
		if err := cfg.CheckPod(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range sampleNodes() {
		if err := cfg.CheckRemote(n); err != nil {
			t.Fatal(err)
		}
	}
	rules, err := Program(cfg, samplePods(), sampleNodes())
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

// must returns the text of a generator's rules, failing the test on an
// error or when a rule's text does not parse back to the rule.
func must(t *testing.T) func([]*flowtable.Rule, error) []string {
	return func(rs []*flowtable.Rule, err error) []string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		checkRoundTrip(t, rs)
		return Text(rs)
	}
}

// checkRoundTrip checks that the String of each rule parses back to an
// Equal rule.
func checkRoundTrip(t *testing.T, rs []*flowtable.Rule) {
	t.Helper()
	for _, r := range rs {
		p, err := flowtable.ParseRule(r.String())
		if err != nil || !p.Equal(r) {
			t.Errorf("%s does not parse back to the rule: %v", r, err)
		}
	}
}

var goldenModes = []struct {
	name string
	mode Mode
}{{"subnet", ModeSubnet}, {"multitenant", ModeMultitenant}, {"networkpolicy", ModeNetworkPolicy}}

// TestGolden checks the program against testdata/*.golden, rule by rule:
// each line of the golden file, parsed, must be Equal to the rule the
// generators build, in order. The golden files keep the text they were
// written in (flowtable may print a rule differently, tp_dst for udp_dst)
// until the program changes; then go test -update, after bumping
// RuleVersion, rewrites them with Text.
func TestGolden(t *testing.T) {
	for _, m := range goldenModes {
		t.Run(m.name, func(t *testing.T) {
			rules := sampleRules(t, m.mode)
			path := goldenPath(m.name)
			want, err := os.ReadFile(path)
			if err != nil && !(*update && errors.Is(err, os.ErrNotExist)) {
				t.Fatalf("%v (run go test -update)", err)
			}
			diff := goldenDiff(string(want), rules)
			if diff == "" {
				return
			}
			if *update {
				checkPin(t) // refuse to rewrite a changed program under the same RuleVersion
				if err := os.WriteFile(path, []byte(strings.Join(Text(rules), "\n")+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			t.Errorf("program differs from %s (run go test -update after bumping RuleVersion):\n%s", path, diff)
		})
	}
}

func goldenPath(name string) string { return filepath.Join("testdata", name+".golden") }

// goldenDiff compares the rules of a golden file's text with rules and
// describes the differences, "" when there are none.
func goldenDiff(golden string, rules []*flowtable.Rule) string {
	lines := strings.Split(strings.TrimSuffix(golden, "\n"), "\n")
	if golden == "" {
		lines = nil
	}
	var b strings.Builder
	for i := 0; i < len(lines) || i < len(rules); i++ {
		var gl, rl string
		var gr *flowtable.Rule
		if i < len(lines) {
			gl = lines[i]
			var err error
			if gr, err = flowtable.ParseRule(gl); err != nil {
				fmt.Fprintf(&b, "line %d: %v\n", i+1, err)
			}
		}
		if i < len(rules) {
			rl = rules[i].String()
		}
		if gr == nil || i >= len(rules) || !gr.Equal(rules[i]) {
			fmt.Fprintf(&b, "line %d:\n- %s\n+ %s\n", i+1, gl, rl)
		}
	}
	return b.String()
}

// programText returns the text of mode's sample program as the golden
// file holds it when its rules are the program's, else Text's.
func programText(t *testing.T, name string, mode Mode) string {
	t.Helper()
	rules := sampleRules(t, mode)
	golden, err := os.ReadFile(goldenPath(name))
	if err == nil && goldenDiff(string(golden), rules) == "" {
		return strings.TrimSuffix(string(golden), "\n")
	}
	return strings.Join(Text(rules), "\n")
}

// TestRuleVersionPinned ties RuleVersion to the program: a change to the
// program without a new RuleVersion fails, even with -update. The pin
// hashes the program's text as the golden file holds it (programText), so
// a change of how flowtable prints rules alone needs no new RuleVersion,
// which would make every node rebuild its bridge.
func TestRuleVersionPinned(t *testing.T) {
	got, changed := checkPin(t)
	if !changed {
		return
	}
	if !*update {
		t.Fatalf("RuleVersion is now %d: run go test -update", RuleVersion)
	}
	if err := os.WriteFile(pinPath, []byte(got), 0o644); err != nil {
		t.Fatal(err)
	}
}

var pinPath = filepath.Join("testdata", "version.pin")

// checkPin computes the pin (RuleVersion and a hash of each golden program)
// and compares it with testdata/version.pin. It fails the test when the
// program changed but RuleVersion did not; otherwise it reports whether the
// pin must be rewritten.
func checkPin(t *testing.T) (pin string, changed bool) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "RuleVersion %d\n", RuleVersion)
	for _, m := range goldenModes {
		prog := programText(t, m.name, m.mode)
		fmt.Fprintf(&b, "%s %x\n", m.name, sha256.Sum256([]byte(prog)))
	}
	got := b.String()
	want, err := os.ReadFile(pinPath)
	if err != nil && !(*update && errors.Is(err, os.ErrNotExist)) {
		t.Fatalf("%v (run go test -update)", err)
	}
	if got == string(want) {
		return got, false
	}
	oldVersion := -1
	if line, _, ok := strings.Cut(string(want), "\n"); ok {
		oldVersion, _ = strconv.Atoi(strings.TrimPrefix(line, "RuleVersion "))
	}
	if oldVersion == RuleVersion {
		t.Fatalf("the rule program changed but RuleVersion is still %d: bump RuleVersion, then run go test -update\nwant:\n%sgot:\n%s", RuleVersion, want, got)
	}
	return got, true
}

// parsedRule is a rule split into its parts, for structural checks.
type parsedRule struct {
	text     string
	table    int
	priority int
	cookie   uint64
	match    []string
	actions  []string
}

var (
	matchRE = regexp.MustCompile(`^(ip|arp|tcp|udp|sctp|` +
		`ct_state=([+-](trk|new|est|rel|rpl|inv))+|ct_mark=0x[0-9a-f]+/0x[0-9a-f]+|` +
		`in_port=\d+|` +
		`(nw_src|nw_dst)=\d+\.\d+\.\d+\.\d+(/\d+)?|` +
		`(tun_src|tun_dst)=\d+\.\d+\.\d+\.\d+|` +
		`(dl_src|dl_dst|arp_sha)=([0-9a-f]{2}:){5}[0-9a-f]{2}|` +
		`(tp_dst|udp_dst|nw_proto|arp_op)=\d+|` +
		`reg[0-7]=\d+|reg[0-7]=0x[0-9a-f]+/0x[0-9a-f]+|tun_id=\d+|tun_id=0x[0-9a-f]+)$`)
	actionRE = regexp.MustCompile(`^(output:\d+|output:NXM_NX_REG2\[\]|goto_table:\d+|drop|` +
		`load:0x[0-9a-f]+->NXM_NX_REG[0-7]\[(\d+)?\]|load:0x[0-9a-f]+->NXM_NX_TUN_ID\[0\.\.31\]|` +
		`move:NXM_NX_TUN_ID\[0\.\.31\]->NXM_NX_REG0\[\]|move:NXM_NX_REG0\[\]->NXM_NX_TUN_ID\[0\.\.31\]|` +
		`set_field:\d+\.\d+\.\d+\.\d+->tun_dst|set_field:([0-9a-f]{2}:){5}[0-9a-f]{2}->eth_dst|note:[0-9a-f]{2}(\.[0-9a-f]{2})*|` +
		`ct\((commit,)?table=\d+(,exec\(set_field:0x[0-9a-f]+/0x[0-9a-f]+->ct_mark\))?\)|` +
		`ct\(commit(,exec\(set_field:0x[0-9a-f]+/0x[0-9a-f]+->ct_mark\))?\))$`)
)

// parseRule checks a rule against the ovs-ofctl subset the flowtable
// accepts and splits it.
func parseRule(t *testing.T, s string) parsedRule {
	t.Helper()
	r := parsedRule{text: s}
	head, acts, ok := strings.Cut(s, ", actions=")
	if !ok || acts == "" {
		t.Fatalf("no actions: %q", s)
	}
	parts := strings.Split(head, ", ")
	if len(parts) < 2 || !strings.HasPrefix(parts[0], "table=") || !strings.HasPrefix(parts[1], "priority=") {
		t.Fatalf("want table=N, priority=P first: %q", s)
	}
	var err error
	if r.table, err = strconv.Atoi(strings.TrimPrefix(parts[0], "table=")); err != nil || r.table < 0 || r.table > 254 {
		t.Fatalf("bad table in %q", s)
	}
	if r.priority, err = strconv.Atoi(strings.TrimPrefix(parts[1], "priority=")); err != nil || r.priority < 0 || r.priority > 65535 {
		t.Fatalf("bad priority in %q", s)
	}
	parts = parts[2:]
	if len(parts) > 0 && strings.HasPrefix(parts[0], "cookie=") {
		if r.cookie, err = strconv.ParseUint(strings.TrimPrefix(parts[0], "cookie="), 0, 64); err != nil || r.cookie == 0 {
			t.Fatalf("bad cookie in %q", s)
		}
		parts = parts[1:]
	}
	for _, m := range parts {
		if !matchRE.MatchString(m) {
			t.Errorf("match %q outside the supported syntax in %q", m, s)
		}
		r.match = append(r.match, m)
	}
	for _, a := range splitActions(acts) {
		if !actionRE.MatchString(a) {
			t.Errorf("action %q outside the supported syntax in %q", a, s)
		}
		r.actions = append(r.actions, a)
	}
	return r
}

// splitActions splits an action list at the commas outside parentheses.
func splitActions(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

func TestProgramStructure(t *testing.T) {
	for _, m := range goldenModes {
		t.Run(m.name, func(t *testing.T) {
			rules := sampleProgram(t, m.mode)
			tables := map[int]bool{}
			seen := map[string]bool{}
			var parsed []parsedRule
			for _, s := range rules {
				r := parseRule(t, s)
				parsed = append(parsed, r)
				tables[r.table] = true
				key := fmt.Sprintf("%d/%d/%s", r.table, r.priority, strings.Join(r.match, ","))
				if seen[key] {
					t.Errorf("two rules with the same table, priority and match: %q", s)
				}
				seen[key] = true
			}
			notes := 0
			for _, r := range parsed {
				for _, a := range r.actions {
					if n, ok := strings.CutPrefix(a, "goto_table:"); ok {
						target, _ := strconv.Atoi(n)
						if !tables[target] {
							t.Errorf("goto_table:%d has no rules: %q", target, r.text)
						}
						if target <= r.table {
							t.Errorf("goto_table:%d goes backwards: %q", target, r.text)
						}
					}
					if a == "note:"+VersionNote(m.mode) {
						if r.table != TableVersion {
							t.Errorf("version note outside table %d: %q", TableVersion, r.text)
						}
						notes++
					}
				}
			}
			if notes != 1 {
				t.Errorf("want one version note %q, found %d", VersionNote(m.mode), notes)
			}
			// Every table that is a goto target or table 0 has a rule of
			// priority 0 or a catch-all, so that misses are explicit.
			for tb := range tables {
				if tb == TableVersion {
					continue
				}
				found := false
				for _, r := range parsed {
					if r.table == tb && len(r.match) == 0 && r.cookie == 0 {
						found = true
					}
				}
				if !found {
					t.Errorf("table %d has no catch-all rule", tb)
				}
			}
		})
	}
}

func TestPodRules(t *testing.T) {
	for _, m := range goldenModes {
		cfg := sampleNode(m.mode)
		cookies := map[uint64]string{}
		for _, p := range samplePods() {
			rules := must(t)(PodRules(cfg, p))
			if len(rules) != PodRuleCount {
				t.Fatalf("%s: pod %s has %d rules, want 5", m.name, p.Name, len(rules))
			}
			wantTables := []int{TablePodIn, TablePodIn, TableFromHost, TableARPLocal, TableIPLocal}
			mac := FormatMAC(PodMAC(p.IP))
			wantVNID := p.VNID
			if m.mode == ModeSubnet {
				wantVNID = 0
			}
			for i, s := range rules {
				r := parseRule(t, s)
				if r.table != wantTables[i] {
					t.Errorf("%s: rule %d in table %d, want %d: %q", m.name, i, r.table, wantTables[i], s)
				}
				if r.cookie != PodCookie(p.IP) {
					t.Errorf("%s: rule %q has cookie %#x, want %#x", m.name, s, r.cookie, PodCookie(p.IP))
				}
				if i < 3 && !strings.Contains(s, fmt.Sprintf("load:%#x->NXM_NX_REG0[]", wantVNID)) {
					t.Errorf("%s: rule %q does not load VNID %d", m.name, s, wantVNID)
				}
			}
			if !strings.Contains(rules[0], "arp_sha="+mac) {
				t.Errorf("ARP rule %q does not match the pod MAC %s", rules[0], mac)
			}
			if other, dup := cookies[PodCookie(p.IP)]; dup {
				t.Errorf("pods %s and %s share a cookie", other, p.Name)
			}
			cookies[PodCookie(p.IP)] = p.Name
		}
		for _, n := range sampleNodes() {
			rules := must(t)(NodeRules(cfg, n))
			if len(rules) != 3 {
				t.Fatalf("node %s has %d rules, want 3", n.Name, len(rules))
			}
			for _, s := range rules {
				if r := parseRule(t, s); r.cookie != NodeCookie(n.IP) {
					t.Errorf("node rule %q has cookie %#x, want %#x", s, r.cookie, NodeCookie(n.IP))
				}
			}
			if other, dup := cookies[NodeCookie(n.IP)]; dup {
				t.Errorf("node %s shares a cookie with %s", n.Name, other)
			}
			cookies[NodeCookie(n.IP)] = n.Name
		}
	}
}

func TestCookies(t *testing.T) {
	ip := netip.MustParseAddr("10.128.0.5")
	if got, want := PodCookie(ip), uint64(0x10a800005); got != want {
		t.Errorf("PodCookie = %#x, want %#x", got, want)
	}
	if PodCookie(ip) == NodeCookie(ip) || VNIDCookie(5) == MulticastCookie(5) {
		t.Error("cookie classes collide")
	}
	if got, want := PodFilter(ip), "cookie=0x10a800005/0xffffffffffffffff"; got != want {
		t.Errorf("PodFilter = %q, want %q", got, want)
	}
	if got, want := NodeFilter(netip.MustParseAddr("192.168.1.2")), "cookie=0x2c0a80102/0xffffffffffffffff"; got != want {
		t.Errorf("NodeFilter = %q, want %q", got, want)
	}
	if got := PodCookie(netip.MustParseAddr("::ffff:10.128.0.5")); got != PodCookie(ip) {
		t.Errorf("IPv4-mapped address gives cookie %#x", got)
	}
}

func TestVNIDRules(t *testing.T) {
	if r, err := VNIDRules(sampleNode(ModeSubnet), 10); r != nil || err != nil {
		t.Errorf("subnet mode VNIDRules = %q, %v; want none", r, err)
	}
	mt := sampleNode(ModeMultitenant)
	if r, err := VNIDRules(mt, 0); r != nil || err != nil {
		t.Errorf("VNID 0 rules = %q, %v; want none (SetupRules covers it)", r, err)
	}
	r := must(t)(VNIDRules(mt, 10))
	if len(r) != 1 || r[0] != "table=80, priority=100, cookie=0x30000000a, reg0=10, reg1=10, actions=output:NXM_NX_REG2[]" {
		t.Errorf("VNIDRules(10) = %q", r)
	}
}

func TestMulticastRules(t *testing.T) {
	cfg := sampleNode(ModeMultitenant)
	if r, err := MulticastRules(cfg, 10, nil); r != nil || err != nil {
		t.Error("rules without ports")
	}
	r := must(t)(MulticastRules(cfg, 10, []uint32{7, 3, 7}))
	want := []string{
		"table=110, priority=100, cookie=0x40000000a, reg0=10, actions=goto_table:111",
		"table=120, priority=100, cookie=0x40000000a, reg0=10, actions=output:3,output:7",
	}
	if strings.Join(r, "\n") != strings.Join(want, "\n") {
		t.Errorf("MulticastRules = %q, want %q", r, want)
	}
	for i, s := range r {
		parseRule(t, s)
		if !mustParse(t, want[i]).Equal(mustParse(t, s)) {
			t.Errorf("%q and %q are different rules", want[i], s)
		}
	}
}

func TestMulticastFanoutRules(t *testing.T) {
	cfg := sampleNode(ModeMultitenant)
	if r, err := MulticastFanoutRules(cfg, nil); r != nil || err != nil {
		t.Errorf("fan-out without remote nodes = %q, %v; want none", r, err)
	}
	n2, n3 := netip.MustParseAddr("192.168.100.12"), netip.MustParseAddr("192.168.100.13")
	r := must(t)(MulticastFanoutRules(cfg, []netip.Addr{n3, n2, n3}))
	want := "table=111, priority=100, cookie=0x401000000, actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31]," +
		"set_field:192.168.100.12->tun_dst,output:1,set_field:192.168.100.13->tun_dst,output:1,goto_table:120"
	if len(r) != 1 || r[0] != want {
		t.Errorf("MulticastFanoutRules = %q, want [%q]", r, want)
	}
	parseRule(t, r[0])
	if MulticastFanoutCookie&^(0xff<<32) <= MaxVNID || MulticastFanoutCookie>>32 != MulticastCookie(0)>>32 {
		t.Errorf("fan-out cookie %#x: want the multicast class with a key above every VNID", MulticastFanoutCookie)
	}
	if rs, err := MulticastFanoutRules(cfg, []netip.Addr{netip.MustParseAddr("fd00::1")}); err == nil || rs != nil || !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("fan-out to an IPv6 node = %d rules, %v", len(rs), err)
	}
}

func mustParse(t *testing.T, s string) *flowtable.Rule {
	t.Helper()
	r, err := flowtable.ParseRule(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSetupRulesModes(t *testing.T) {
	sub := strings.Join(must(t)(SetupRules(sampleNode(ModeSubnet))), "\n")
	short := strings.Join(must(t)(SetupRules(sampleNode("subnet"))), "\n")
	empty := strings.Join(must(t)(SetupRules(sampleNode(""))), "\n")
	if sub != short || sub != empty {
		t.Error("mode spellings give different programs")
	}
	if !strings.Contains(sub, "table=80, priority=100, actions=output:NXM_NX_REG2[]") {
		t.Error("subnet mode: table 80 does not allow all")
	}
	if !strings.Contains(sub, "note:00.") {
		t.Error("subnet mode note")
	}
	mt := strings.Join(must(t)(SetupRules(sampleNode("multitenant"))), "\n")
	for _, want := range []string{
		"table=80, priority=200, reg0=0, actions=output:NXM_NX_REG2[]",
		"table=80, priority=150, reg1=0, actions=output:NXM_NX_REG2[]",
		"table=80, priority=0, actions=drop",
		"table=80, priority=300, ip, nw_src=10.128.0.1, actions=output:NXM_NX_REG2[]",
		"table=0, priority=200, in_port=2, ip, actions=load:0x0->NXM_NX_REG0[],goto_table:30",
		"note:01.",
	} {
		if !strings.Contains(mt, want) {
			t.Errorf("multitenant program lacks %q", want)
		}
	}
	if strings.Contains(mt, "table=80, priority=100, actions=") {
		t.Error("multitenant program allows all in table 80")
	}
}

func TestValidate(t *testing.T) {
	good := sampleNode(ModeMultitenant)
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*NodeConfig)
		want error
	}{
		{"bad mode", func(c *NodeConfig) { c.Mode = "flat" }, ErrInvalidConfig},
		{"no node IP", func(c *NodeConfig) { c.NodeIP = netip.Addr{} }, ErrInvalidConfig},
		{"host bits", func(c *NodeConfig) { c.Subnet = netip.MustParsePrefix("10.128.0.1/23") }, ErrInvalidConfig},
		{"subnet outside", func(c *NodeConfig) { c.Subnet = netip.MustParsePrefix("10.200.0.0/23") }, ErrInvalidConfig},
		{"no cluster", func(c *NodeConfig) { c.ClusterNetworks = nil }, ErrInvalidConfig},
		{"overlap", func(c *NodeConfig) {
			c.ClusterNetworks = append(c.ClusterNetworks, netip.MustParsePrefix("10.129.0.0/16"))
		}, ErrInvalidConfig},
		{"service overlap", func(c *NodeConfig) { c.ServiceNetwork = netip.MustParsePrefix("10.130.0.0/16") }, ErrInvalidConfig},
		{"no service", func(c *NodeConfig) { c.ServiceNetwork = netip.Prefix{} }, ErrInvalidConfig},
		{"mtu", func(c *NodeConfig) { c.MTU = 100 }, ErrInvalidConfig},
		{"ipv6", func(c *NodeConfig) { c.Subnet = netip.MustParsePrefix("fd00::/64") }, ErrInvalidConfig},
	} {
		c := sampleNode(ModeMultitenant)
		c.ClusterNetworks = append([]netip.Prefix(nil), c.ClusterNetworks...)
		tc.mod(&c)
		if err := c.Validate(); !errors.Is(err, tc.want) {
			t.Errorf("%s: Validate = %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestCheckPodAndRemote(t *testing.T) {
	cfg := sampleNode(ModeSubnet)
	for _, ip := range []string{"10.128.0.0", "10.128.0.1", "10.128.1.255", "10.128.2.5", "fd00::1"} {
		if err := cfg.CheckPod(Pod{Name: "p", IP: netip.MustParseAddr(ip), Port: 3}); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("CheckPod(%s) = %v", ip, err)
		}
	}
	if err := cfg.CheckPod(Pod{Name: "p", IP: netip.MustParseAddr("10.128.0.9"), Port: 2}); err == nil {
		t.Error("pod on port 2 accepted")
	}
	for _, n := range []RemoteNode{
		{Name: "self", IP: cfg.NodeIP, Subnet: netip.MustParsePrefix("10.128.2.0/23")},
		{Name: "overlap", IP: netip.MustParseAddr("192.168.100.20"), Subnet: netip.MustParsePrefix("10.128.0.0/22")},
		{Name: "outside", IP: netip.MustParseAddr("192.168.100.20"), Subnet: netip.MustParsePrefix("10.200.0.0/23")},
	} {
		if err := cfg.CheckRemote(n); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("CheckRemote(%s) = %v", n.Name, err)
		}
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{
		"": ModeSubnet, "subnet": ModeSubnet, "redhat/openshift-ovs-subnet": ModeSubnet,
		"Multitenant": ModeMultitenant, "redhat/openshift-ovs-multitenant": ModeMultitenant,
		"networkpolicy": ModeNetworkPolicy,
	} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %v, %v", in, got, err)
		}
	}
	if ModeMultitenant.Short() != "multitenant" {
		t.Error(ModeMultitenant.Short())
	}
	if _, err := ParseMode("ovn"); !errors.Is(err, ErrInvalidConfig) {
		t.Error(err)
	}
}

func TestGatewayAndMAC(t *testing.T) {
	cfg := sampleNode(ModeSubnet)
	if got := cfg.Gateway(); got != netip.MustParseAddr("10.128.0.1") {
		t.Errorf("Gateway = %v", got)
	}
	if got := FormatMAC(GatewayMAC(cfg)); got != "0a:58:0a:80:00:01" {
		t.Errorf("GatewayMAC = %s", got)
	}
	if got := VersionNote(ModeMultitenant); got != fmt.Sprintf("01.%02x", RuleVersion) {
		t.Errorf("VersionNote = %s", got)
	}
}

func TestEgressFirewallRulesRefused(t *testing.T) {
	to := []EgressRule{{Allow: true, To: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}}
	if _, err := EgressFirewallRules(sampleNode(ModeSubnet), 10, to); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("subnet mode: %v", err)
	}
	if _, err := EgressFirewallRules(sampleNode(ModeMultitenant), 0, to); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("VNID 0: %v", err)
	}
	if _, err := EgressFirewallRules(sampleNode(ModeMultitenant), 10, make([]EgressRule, MaxEgressRules+1)); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("too many rules: %v", err)
	}
	rs, err := EgressFirewallRules(sampleNode(ModeNetworkPolicy), 10, append(to, EgressRule{To: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}))
	if err != nil || len(rs) != 2 || rs[0].Priority <= rs[1].Priority {
		t.Fatalf("%v %v", Text(rs), err)
	}
	for _, r := range rs {
		if p, err := flowtable.ParseRule(r.String()); err != nil || !p.Equal(r) {
			t.Errorf("%s does not read back: %v", r, err)
		}
	}
}
