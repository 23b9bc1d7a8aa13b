package daemon

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/port/busypoll"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/tap/uring"
)

const goodConfig = `{
  "nodeName": "n1", "nodeIP": "192.168.240.11", "subnet": "10.128.0.0/23",
  "mode": "multitenant", "clusterNetworks": ["10.128.0.0/14"], "serviceNetwork": "172.30.0.0/16",
  "projects": {"alpha": 10},
  "peers": [{"name": "n2", "ip": "192.168.240.12", "subnet": "10.128.2.0/23"}]
}`

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(goodConfig))
	if err != nil {
		t.Fatal(err)
	}
	n, err := c.Node()
	if err != nil {
		t.Fatal(err)
	}
	if n.Mode != sdn.ModeMultitenant || n.MTU != 1450 || n.Subnet.String() != "10.128.0.0/23" {
		t.Errorf("node config = %+v", n)
	}
	// queues and vxlanReaders: vxlan0 follows queues unless set apart.
	for _, q := range []struct {
		json            string
		queues, readers int
	}{
		{``, 1, 1},
		{`"queues": 2,`, 2, 2},
		{`"queues": 2, "vxlanReaders": 1,`, 2, 1},
		{`"vxlanReaders": 3,`, 1, 3},
	} {
		c, err := ParseConfig([]byte(strings.Replace(goodConfig, `"mode"`, q.json+`"mode"`, 1)))
		if err != nil {
			t.Fatalf("%s: %v", q.json, err)
		}
		d := &dataplane{cfg: c}
		if d.podQueues() != q.queues || d.vxlanReaders() != q.readers {
			t.Errorf("%s: pod queues %d, vxlan0 readers %d; want %d, %d", q.json, d.podQueues(), d.vxlanReaders(), q.queues, q.readers)
		}
	}
	bad := []struct{ name, json, want string }{
		{"not json", `{`, "unexpected EOF"},
		{"unknown key", `{"nodeName":"n1","subnett":"x"}`, "unknown field"},
		{"bad ip", strings.Replace(goodConfig, "192.168.240.11", "192.168.240", 1), "nodeIP"},
		{"bad subnet", strings.Replace(goodConfig, "10.128.0.0/23", "10.128.0.0/33", 1), "subnet"},
		{"bad mode", strings.Replace(goodConfig, "multitenant", "flat", 1), "flat"},
		{"subnet outside the cluster", strings.Replace(goodConfig, `"10.128.0.0/23"`, `"10.200.0.0/23"`, 1), "10.200.0.0/23"},
		{"too many queues", strings.Replace(goodConfig, `"mode"`, `"queues": 17, "mode"`, 1), "queues: 17"},
		{"negative queues", strings.Replace(goodConfig, `"mode"`, `"queues": -1, "mode"`, 1), "queues: -1"},
		{"too many readers", strings.Replace(goodConfig, `"mode"`, `"vxlanReaders": 99, "mode"`, 1), "vxlanReaders: 99"},
		{"queues with the control plane", `{"nodeName":"n1","nodeIP":"192.168.240.11","etcdEndpoints":["http://127.0.0.1:2379"],"queues":40}`, "queues: 40"},
	}
	for _, b := range bad {
		_, err := ParseConfig([]byte(b.json))
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: error %v, want one mentioning %q", b.name, err, b.want)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(goodConfig))
	f.Add([]byte(`{"mode":"subnet"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		if _, err := c.Node(); err != nil {
			t.Fatalf("ParseConfig accepted a config whose Node() fails: %v", err)
		}
	})
}

func TestParseConfigFromRegistry(t *testing.T) {
	for _, good := range []string{
		`{"nodeName":"n1","nodeIP":"192.168.0.1","etcdEndpoints":["http://192.168.0.1:2379"],"etcdInsecure":true}`,
		`{"nodeName":"n1","nodeIP":"192.168.0.1","etcdEndpoints":["https://192.168.0.1:2379"],"etcdTLS":{"caFile":"/a","certFile":"/b","keyFile":"/c"}}`,
	} {
		c, err := ParseConfig([]byte(good))
		if err != nil {
			t.Fatalf("%s: %v", good, err)
		}
		if !c.FromRegistry() {
			t.Error("FromRegistry false")
		}
	}
	for _, bad := range []string{
		`{"nodeIP":"192.168.0.1","etcdEndpoints":["http://x:2379"],"etcdInsecure":true}`,
		`{"nodeName":"n1","nodeIP":"nope","etcdEndpoints":["http://x:2379"],"etcdInsecure":true}`,
		`{"nodeName":"n1","nodeIP":"192.168.0.1"}`, // static: subnet etc. required
		// Plain text without saying so; TLS without certificates.
		`{"nodeName":"n1","nodeIP":"192.168.0.1","etcdEndpoints":["http://192.168.0.1:2379"]}`,
		`{"nodeName":"n1","nodeIP":"192.168.0.1","etcdEndpoints":["https://192.168.0.1:2379"]}`,
		`{"nodeName":"n1/x","nodeIP":"192.168.0.1","etcdEndpoints":["http://x:2379"],"etcdInsecure":true}`,
		`{"nodeName":"n1","nodeIP":"192.168.0.1","etcdEndpoints":["http://x:2379"],"etcdInsecure":true,"vnidWait":"-1s"}`,
		`{"nodeName":"n1","nodeIP":"192.168.0.1","etcdEndpoints":["http://x:2379"],"etcdInsecure":true,"socketGroup":"no-such-group-here"}`,
	} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func TestParseConfigFromKubernetes(t *testing.T) {
	for _, good := range []string{
		`{"nodeName":"n1","nodeIP":"192.168.0.1","kubeconfig":"/etc/gvs/kubeconfig"}`,
		`{"nodeName":"n1","nodeIP":"192.168.0.1","kubeconfig":"in-cluster"}`,
	} {
		c, err := ParseConfig([]byte(good))
		if err != nil {
			t.Fatalf("%s: %v", good, err)
		}
		if !c.FromKubernetes() || c.FromRegistry() {
			t.Errorf("%s: FromKubernetes %v, FromRegistry %v", good, c.FromKubernetes(), c.FromRegistry())
		}
	}
	for _, bad := range []string{
		// Two control planes; no node name; a bad one; no address.
		`{"nodeName":"n1","nodeIP":"192.168.0.1","kubeconfig":"/k","etcdEndpoints":["http://x:2379"],"etcdInsecure":true}`,
		`{"nodeIP":"192.168.0.1","kubeconfig":"/k"}`,
		`{"nodeName":"N1_x","nodeIP":"192.168.0.1","kubeconfig":"/k"}`,
		`{"nodeName":"n1","kubeconfig":"/k"}`,
	} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// TestNetworkPolicyModeRefused: policies come only from the API server, so
// a node in networkpolicy mode without the Kubernetes source refuses to
// start rather than ignore every policy.
func TestNetworkPolicyModeRefused(t *testing.T) {
	d := &Daemon{cfg: &Config{}, node: &nodeState{}}
	n := sdn.NodeConfig{NodeName: "n1", NodeIP: netip.MustParseAddr("192.168.1.1"), Subnet: netip.MustParsePrefix("10.128.0.0/23"),
		ClusterNetworks: []netip.Prefix{netip.MustParsePrefix("10.128.0.0/14")}, ServiceNetwork: netip.MustParsePrefix("172.30.0.0/16"),
		Mode: sdn.ModeNetworkPolicy}
	if err := d.init(n, nil, false); !errors.Is(err, sdn.ErrUnsupportedMode) {
		t.Fatalf("init in networkpolicy mode: %v, want ErrUnsupportedMode", err)
	}
	if d.node.prog != nil || d.node.pods != nil {
		t.Error("a refused mode left a rule program behind")
	}
}

func TestEgressDNSConfigRefused(t *testing.T) {
	for _, js := range []string{
		`{"nodeName":"n1","nodeIP":"192.168.0.1","subnet":"10.128.0.0/23","clusterNetworks":["10.128.0.0/14"],"serviceNetwork":"172.30.0.0/16","egressDNSServer":"dns.example:53"}`,
		`{"nodeName":"n1","nodeIP":"192.168.0.1","subnet":"10.128.0.0/23","clusterNetworks":["10.128.0.0/14"],"serviceNetwork":"172.30.0.0/16","egressDNSInterval":"10ms"}`,
	} {
		if _, err := ParseConfig([]byte(js)); err == nil || !strings.Contains(err.Error(), "egressDNS") {
			t.Errorf("%s: %v", js, err)
		}
	}
}

func TestTrimIdleConfig(t *testing.T) {
	for v, want := range map[string]time.Duration{"": DefaultTrimIdle, "0": 0, "30s": 30 * time.Second, "100ms": 100 * time.Millisecond} {
		c := Config{TrimIdle: v}
		if got, err := c.trimIdle(); err != nil || got != want {
			t.Errorf("trimIdle %q: %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"-1s", "10ms", "soon"} {
		c := Config{TrimIdle: v}
		if _, err := c.trimIdle(); err == nil {
			t.Errorf("trimIdle %q taken", v)
		}
	}
}

func TestSchedSliceConfig(t *testing.T) {
	for _, tc := range []struct {
		slice, when string
		want        time.Duration
		always      bool
	}{
		{"", "", DefaultSchedSlice, false},
		{"", "busy", DefaultSchedSlice, false},
		{"", "always", DefaultSchedSlice, true},
		{"0", "", 0, false},
		{"0s", "always", 0, false},
		{"100us", "", 100 * time.Microsecond, false},
		{"2ms", "always", 2 * time.Millisecond, true},
	} {
		c := Config{SchedSlice: tc.slice, SchedSliceWhen: tc.when}
		if got, always, err := c.schedSlice(); err != nil || got != tc.want || always != tc.always {
			t.Errorf("schedSlice %q when %q: %v always %v (%v); want %v always %v", tc.slice, tc.when, got, always, err, tc.want, tc.always)
		}
	}
	// The kernel would clamp these; a typo must not become a slice.
	for _, c := range []Config{{SchedSlice: "-1ms"}, {SchedSlice: "50us"}, {SchedSlice: "1s"}, {SchedSlice: "fast"}, {SchedSliceWhen: "sometimes"}} {
		if _, _, err := c.schedSlice(); err == nil {
			t.Errorf("schedSlice %q when %q taken", c.SchedSlice, c.SchedSliceWhen)
		}
		if _, err := New(&c, nil); err == nil {
			t.Errorf("New with schedSlice %q when %q succeeded", c.SchedSlice, c.SchedSliceWhen)
		}
	}
}

func TestBusyPollConfig(t *testing.T) {
	def := DefaultBusyPoll
	if runtime.NumCPU() == 1 {
		def = 0
	}
	for _, tc := range []struct {
		poll    string
		pollers int
		want    time.Duration
	}{
		{"", 0, def},
		{"0", 3, 0},
		{"50us", 0, 50 * time.Microsecond},
		{"1ms", 1, time.Millisecond},
	} {
		c := Config{BusyPoll: tc.poll, BusyPollers: tc.pollers}
		bc, err := c.busyPoll()
		if err != nil || bc.Max != tc.want || bc.Pollers != tc.pollers {
			t.Errorf("busyPoll %q pollers %d: %+v (%v); want %v", tc.poll, tc.pollers, bc, err, tc.want)
		}
		var d dataplane
		if d.busy, err = busypoll.New(bc); err != nil {
			t.Fatal(err)
		}
		if on := d.busyState() != ""; on != (tc.want > 0) {
			t.Errorf("busyPoll %q: show says %q", tc.poll, d.busyState())
		}
	}
	for _, c := range []Config{{BusyPoll: "-1us"}, {BusyPoll: "2ms"}, {BusyPoll: "fast"}, {BusyPoll: "50"}, {BusyPoll: "50us", BusyPollers: -1}} {
		if _, err := c.busyPoll(); err == nil {
			t.Errorf("busyPoll %q pollers %d taken", c.BusyPoll, c.BusyPollers)
		}
		if _, err := New(&c, nil); err == nil {
			t.Errorf("New with busyPoll %q pollers %d succeeded", c.BusyPoll, c.BusyPollers)
		}
	}
}

// TestIOEngineConfig: auto and "" follow the kernel's answer, tap is always
// tap, uring and uring-always are refused where the kernel cannot run
// them, and anything else is refused.
func TestIOEngineConfig(t *testing.T) {
	supported := uring.Supported() == nil
	auto := IOEngineTAP
	if supported {
		auto = IOEngineUring
	}
	for v, want := range map[string]string{"": auto, IOEngineAuto: auto, IOEngineTAP: IOEngineTAP} {
		c := Config{IOEngine: v}
		if got, why, err := c.ioEngine(); err != nil || got != want || (why == nil) != (got == IOEngineUring || v == IOEngineTAP) {
			t.Errorf("ioEngine %q: %q (%v), %v; want %q", v, got, why, err, want)
		}
	}
	for _, v := range []string{IOEngineUring, IOEngineUringAlways} {
		c := Config{IOEngine: v}
		if got, _, err := c.ioEngine(); supported != (err == nil) || (supported && got != v) {
			t.Errorf("ioEngine %s on a kernel that supports it %v: %q, %v", v, supported, got, err)
		}
	}
	for _, v := range []string{"io_uring", "URING", "vhost"} {
		c := Config{IOEngine: v}
		if _, _, err := c.ioEngine(); err == nil {
			t.Errorf("ioEngine %q taken", v)
		}
	}
}

func TestGoMaxProcsConfig(t *testing.T) {
	for _, tc := range []struct {
		set, goDefault int
		env            bool
		want           int
	}{
		{0, 2, false, 4},   // twice Go's default
		{0, 1, false, 2},   // one CPU: a spare too
		{0, 64, false, 72}, // at most 8 more
		{0, 2, true, 0},    // GOMAXPROCS in the environment decides
		{4, 2, true, 4},    // the configuration beats the environment
		{1, 8, false, 1},
	} {
		c := Config{GoMaxProcs: tc.set}
		if got := c.GoProcs(tc.goDefault, tc.env); got != tc.want {
			t.Errorf("goMaxProcs %d, Go's default %d, env %v: %d, want %d", tc.set, tc.goDefault, tc.env, got, tc.want)
		}
	}
	for _, n := range []int{-1, MaxGoMaxProcs + 1} {
		c, err := ParseConfig([]byte(strings.Replace(goodConfig, `"mode"`, fmt.Sprintf(`"goMaxProcs": %d, "mode"`, n), 1)))
		if err == nil {
			t.Errorf("goMaxProcs %d taken (%+v)", n, c.GoMaxProcs)
		} else if !strings.Contains(err.Error(), "goMaxProcs") {
			t.Errorf("goMaxProcs %d: %v, want an error naming goMaxProcs", n, err)
		}
	}
}

// rxBufferBudgetMiB: 16 MiB a CPU and at least 64 by default, -1 no
// bound, a value in MiB; anything below -1 or above the maximum refused
// with an error naming the key.
func TestRxBufferBudgetConfig(t *testing.T) {
	for _, tc := range []struct {
		set, cpus int
		want      int64
	}{
		{0, 2, 64 << 20},
		{0, 8, 128 << 20},
		{-1, 8, 0},
		{3, 2, 3 << 20},
		{MaxRxBufferBudgetMiB, 2, MaxRxBufferBudgetMiB << 20},
	} {
		c := Config{RxBufferBudgetMiB: tc.set}
		if got := c.rxBufferBudget(tc.cpus); got != tc.want {
			t.Errorf("rxBufferBudgetMiB %d on %d CPUs: %d bytes, want %d", tc.set, tc.cpus, got, tc.want)
		}
	}
	for _, n := range []int{-2, MaxRxBufferBudgetMiB + 1} {
		c, err := ParseConfig([]byte(strings.Replace(goodConfig, `"mode"`, fmt.Sprintf(`"rxBufferBudgetMiB": %d, "mode"`, n), 1)))
		if err == nil {
			t.Errorf("rxBufferBudgetMiB %d taken (%+v)", n, c.RxBufferBudgetMiB)
		} else if !strings.Contains(err.Error(), "rxBufferBudgetMiB") {
			t.Errorf("rxBufferBudgetMiB %d: %v, want an error naming rxBufferBudgetMiB", n, err)
		}
	}
}
