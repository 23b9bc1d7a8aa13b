package master

import (
	"errors"
	"net/netip"
	"testing"
)

func mustAlloc(t *testing.T, cns ...ClusterNetwork) *SubnetAllocator {
	t.Helper()
	sa, err := NewSubnetAllocator(cns)
	if err != nil {
		t.Fatal(err)
	}
	return sa
}

func cn(s string, h int) ClusterNetwork {
	return ClusterNetwork{CIDR: netip.MustParsePrefix(s), HostSubnetLength: h}
}

func next(t *testing.T, sa *SubnetAllocator) string {
	t.Helper()
	p, err := sa.Allocate()
	if err != nil {
		t.Fatal(err)
	}
	return p.String()
}

func TestKnownSequences(t *testing.T) {
	tests := []struct {
		net  ClusterNetwork
		want map[int]string // allocation number → subnet
	}{
		{cn("10.1.0.0/16", 6), map[int]string{0: "10.1.0.0/26", 1: "10.1.1.0/26", 2: "10.1.2.0/26", 255: "10.1.255.0/26",
			256: "10.1.0.64/26", 257: "10.1.1.64/26", 512: "10.1.0.128/26", 1023: "10.1.255.192/26"}},
		{cn("10.0.0.0/14", 10), map[int]string{0: "10.0.0.0/22", 1: "10.1.0.0/22", 2: "10.2.0.0/22", 3: "10.3.0.0/22",
			4: "10.0.4.0/22", 5: "10.1.4.0/22", 255: "10.3.252.0/22"}},
		// The default: S = 9 subnet bits run into the host octet, so L = 7.
		{cn("10.128.0.0/14", 9), map[int]string{0: "10.128.0.0/23", 1: "10.129.0.0/23", 2: "10.130.0.0/23", 3: "10.131.0.0/23",
			4: "10.128.2.0/23", 5: "10.129.2.0/23", 511: "10.131.254.0/23"}},
		{cn("10.1.0.0/24", 6), map[int]string{0: "10.1.0.0/26", 1: "10.1.0.64/26", 3: "10.1.0.192/26"}}, // no rotation: one octet
		{cn("10.0.0.0/8", 8), map[int]string{0: "10.0.0.0/24", 1: "10.0.1.0/24", 256: "10.1.0.0/24"}},
	}
	for _, tt := range tests {
		t.Run(tt.net.String(), func(t *testing.T) {
			sa := mustAlloc(t, tt.net)
			max := 0
			for k := range tt.want {
				max = maxInt(max, k)
			}
			seen := map[string]bool{}
			for i := 0; i <= max; i++ {
				got := next(t, sa)
				if seen[got] {
					t.Fatalf("allocation %d: %s given twice", i, got)
				}
				seen[got] = true
				if w, ok := tt.want[i]; ok && got != w {
					t.Errorf("allocation %d = %s, want %s", i, got, w)
				}
			}
		})
	}
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

func TestExhaustionReleaseCursor(t *testing.T) {
	sa := mustAlloc(t, cn("10.128.0.0/14", 9))
	var all []netip.Prefix
	for range 512 {
		p, err := sa.Allocate()
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, p)
	}
	if _, err := sa.Allocate(); !errors.Is(err, ErrExhausted) {
		t.Fatalf("513th allocation: err = %v, want ErrExhausted", err)
	}
	// Release two; the cursor wrapped to 0, so the lower one comes first.
	for _, p := range []netip.Prefix{all[300], all[7]} {
		if err := sa.Release(p); err != nil {
			t.Fatal(err)
		}
	}
	if got := next(t, sa); got != all[7].String() {
		t.Errorf("after release got %s, want %s", got, all[7])
	}
	if got := next(t, sa); got != all[300].String() {
		t.Errorf("after release got %s, want %s", got, all[300])
	}
	if sa.InUse() != 512 {
		t.Errorf("InUse = %d", sa.InUse())
	}
	if err := sa.Release(netip.MustParsePrefix("192.168.0.0/23")); !errors.Is(err, ErrNotInNetwork) {
		t.Errorf("release outside: %v", err)
	}
}

func TestCursorDoesNotReuseReleased(t *testing.T) {
	sa := mustAlloc(t, cn("10.128.0.0/14", 9))
	a := next(t, sa)
	b := next(t, sa)
	if err := sa.Release(netip.MustParsePrefix(a)); err != nil {
		t.Fatal(err)
	}
	if c := next(t, sa); c == a || c == b {
		t.Errorf("fresh allocation %s reused %s or %s before wrapping", c, a, b)
	}
}

func TestSeveralNetworksAndMarkUsed(t *testing.T) {
	sa := mustAlloc(t, cn("10.128.0.0/23", 8), cn("10.200.0.0/16", 14))
	want := []string{"10.128.0.0/24", "10.128.1.0/24", "10.200.0.0/18", "10.200.64.0/18"}
	for i, w := range want {
		if got := next(t, sa); got != w {
			t.Errorf("allocation %d = %s, want %s", i, got, w)
		}
	}
	// Rebuild: mark used, then allocate continues past them.
	sb := mustAlloc(t, cn("10.1.0.0/16", 6))
	for _, s := range []string{"10.1.0.0/26", "10.1.1.0/26", "10.1.0.64/26"} {
		if fresh, err := sb.MarkUsed(netip.MustParsePrefix(s)); err != nil || !fresh {
			t.Fatalf("MarkUsed(%s) = %v, %v", s, fresh, err)
		}
	}
	if fresh, _ := sb.MarkUsed(netip.MustParsePrefix("10.1.1.0/26")); fresh {
		t.Error("MarkUsed twice reported fresh")
	}
	if _, err := sb.MarkUsed(netip.MustParsePrefix("10.1.0.32/27")); !errors.Is(err, ErrNotInNetwork) {
		t.Errorf("misaligned MarkUsed: %v", err)
	}
	if got := next(t, sb); got != "10.1.2.0/26" {
		t.Errorf("after rebuild got %s", got)
	}
	if _, err := NewSubnetAllocator([]ClusterNetwork{cn("10.0.0.0/8", 8), cn("10.1.0.0/16", 8)}); err == nil {
		t.Error("overlapping networks accepted")
	}
	if _, err := NewSubnetAllocator([]ClusterNetwork{cn("10.0.0.0/24", 9)}); err == nil {
		t.Error("H larger than the network accepted")
	}
}

func TestIndexRoundTrip(t *testing.T) {
	for _, c := range []ClusterNetwork{cn("10.1.0.0/16", 6), cn("10.0.0.0/14", 10), cn("10.128.0.0/14", 9), cn("172.16.0.0/12", 13)} {
		na, err := newNetworkAllocator(c)
		if err != nil {
			t.Fatal(err)
		}
		for i := uint32(0); i < na.size(); i++ {
			p := na.subnetOf(i)
			if !c.CIDR.Contains(p.Addr()) {
				t.Fatalf("%v: index %d → %v outside", c, i, p)
			}
			if j, ok := na.indexOf(p); !ok || j != i {
				t.Fatalf("%v: index %d → %v → %d %v", c, i, p, j, ok)
			}
		}
	}
}

func TestVNIDs(t *testing.T) {
	v := NewVNIDs([]string{"openshift-infra"})
	must := func(n uint32, err error) uint32 {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := must(v.Create("default")); n != 0 {
		t.Errorf("default = %d", n)
	}
	if n := must(v.Create("openshift-infra")); n != 0 {
		t.Errorf("global project = %d", n)
	}
	a := must(v.Create("a"))
	b := must(v.Create("b"))
	c := must(v.Create("c"))
	if a != 10 || b != 11 || c != 12 {
		t.Errorf("VNIDs %d %d %d, want 10 11 12", a, b, c)
	}
	if _, err := v.Create("a"); !errors.Is(err, ErrProjectExists) {
		t.Errorf("duplicate: %v", err)
	}
	if _, err := v.Create("Bad_Name"); !errors.Is(err, ErrInvalidProjName) {
		t.Errorf("bad name: %v", err)
	}
	// join b, c to a: 11 and 12 are released.
	if err := v.Join("a", "b", "c"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"b", "c"} {
		if n, _ := v.Get(p); n != a {
			t.Errorf("%s = %d after join, want %d", p, n, a)
		}
	}
	if v.InUse(11) || v.InUse(12) || !v.InUse(10) {
		t.Error("join did not release 11 and 12")
	}
	// isolate b: fresh VNID from the cursor (13), not a reused one.
	if err := v.Isolate("b"); err != nil {
		t.Fatal(err)
	}
	if n, _ := v.Get("b"); n != 13 {
		t.Errorf("isolated b = %d, want 13", n)
	}
	// isolating a project already alone keeps its VNID.
	if err := v.Isolate("b"); err != nil {
		t.Fatal(err)
	}
	if n, _ := v.Get("b"); n != 13 {
		t.Errorf("re-isolated b = %d", n)
	}
	if err := v.Isolate("default"); !errors.Is(err, ErrIsolateDefault) {
		t.Errorf("isolate default: %v", err)
	}
	if err := v.MakeGlobal("c"); err != nil {
		t.Fatal(err)
	}
	if n, _ := v.Get("c"); n != 0 {
		t.Errorf("global c = %d", n)
	}
	// Isolating a global project gives it a fresh VNID.
	if err := v.Isolate("c"); err != nil {
		t.Fatal(err)
	}
	if n, _ := v.Get("c"); n != 14 {
		t.Errorf("isolated c = %d, want 14", n)
	}
	if err := v.Delete("a"); err != nil {
		t.Fatal(err)
	}
	if v.InUse(10) {
		t.Error("10 not released after deleting its only project")
	}
	if err := v.Join("nope", "b"); !errors.Is(err, ErrNoSuchProject) {
		t.Errorf("join unknown: %v", err)
	}
	// Wrap: cursor at the top comes back to 10.
	v.SetCursor(MaxVNID)
	if n := must(v.Create("top")); n != MaxVNID {
		t.Errorf("top = %d", n)
	}
	if n := must(v.Create("wrapped")); n != 10 {
		t.Errorf("wrapped = %d, want 10", n)
	}
}
