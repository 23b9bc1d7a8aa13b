package nat

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/gvswitch/gvs/internal/nstest"
)

// listRules returns the rules of our chain, or nil and false when the table
// does not exist. It runs inside nstest.Do, off the test goroutine, so it
// reports problems with t.Errorf only.
func listRules(t *testing.T) ([]*nftables.Rule, bool) {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Error(err)
		return nil, false
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		t.Error(err)
		return nil, false
	}
	var table *nftables.Table
	for _, tb := range tables {
		if tb.Name == TableName {
			table = tb
		}
	}
	if table == nil {
		return nil, false
	}
	ch, err := c.ListChain(table, ChainName)
	if err != nil {
		t.Errorf("list chain: %v", err)
		return nil, true
	}
	if ch.Type != nftables.ChainTypeNAT || ch.Hooknum == nil || *ch.Hooknum != *nftables.ChainHookPostrouting ||
		ch.Priority == nil || *ch.Priority != *nftables.ChainPriorityNATSource {
		t.Errorf("chain is not a srcnat postrouting nat chain: %+v", ch)
	}
	rules, err := c.GetRules(table, ch)
	if err != nil {
		t.Error(err)
	}
	return rules, true
}

func hasMasq(r *nftables.Rule) bool {
	for _, e := range r.Exprs {
		if _, ok := e.(*expr.Masq); ok {
			return true
		}
	}
	return false
}

// cmps returns the rule's comparisons, in order.
func cmps(r *nftables.Rule) []*expr.Cmp {
	var d []*expr.Cmp
	for _, e := range r.Exprs {
		if c, ok := e.(*expr.Cmp); ok {
			d = append(d, c)
		}
	}
	return d
}

func TestMasqueradeInNetns(t *testing.T) {
	nstest.RequireRoot(t)
	ns := nstest.New(t, "nat", "a")
	one := []netip.Prefix{netip.MustParsePrefix("10.128.0.0/14")}
	two := []netip.Prefix{netip.MustParsePrefix("10.128.0.0/14"), netip.MustParsePrefix("10.200.0.0/16")}
	err := nstest.Do(ns, func() error {
		if _, ok := listRules(t); ok {
			return errors.New("table exists in a fresh namespace")
		}
		if err := Remove(); err != nil {
			t.Errorf("Remove without table: %v", err)
		}
		for i := 0; i < 2; i++ {
			if err := EnsureMasquerade(one); err != nil {
				return err
			}
			rules, ok := listRules(t)
			if !ok || len(rules) != 1 {
				return fmt.Errorf("call %d: want 1 rule, got %d (table %v)", i+1, len(rules), ok)
			}
			if !hasMasq(rules[0]) {
				t.Errorf("rule has no masquerade: %+v", rules[0].Exprs)
			}
			d := cmps(rules[0])
			cn := string([]byte{10, 128, 0, 0})
			if len(d) != 2 || string(d[0].Data) != cn || d[0].Op != expr.CmpOpEq ||
				string(d[1].Data) != cn || d[1].Op != expr.CmpOpNeq {
				t.Errorf("comparisons = %+v, want saddr == 10.128.0.0/14, daddr != 10.128.0.0/14", d)
			}
		}
		if err := EnsureMasquerade(two); err != nil {
			return err
		}
		rules, _ := listRules(t)
		if len(rules) != 2 {
			return fmt.Errorf("two cluster networks: want 2 rules, got %d", len(rules))
		}
		for _, r := range rules {
			if n := len(cmps(r)); n != 3 {
				t.Errorf("rule has %d comparisons, want 3 (saddr, 2 × daddr)", n)
			}
		}
		if err := Remove(); err != nil {
			return err
		}
		if _, ok := listRules(t); ok {
			t.Error("table still there after Remove")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestEnsureMasqueradeRejects(t *testing.T) {
	for _, nets := range [][]netip.Prefix{
		nil,
		{netip.Prefix{}},
		{netip.MustParsePrefix("fd00::/64")},
		{netip.MustParsePrefix("0.0.0.0/0")},
	} {
		if err := EnsureMasquerade(nets); err == nil {
			t.Errorf("EnsureMasquerade(%v) accepted", nets)
		}
	}
}
