// Package nat installs gvs's NAT egress rule with nftables (through netlink,
// google/nftables; no nft binary is needed): pods reach the outside world
// through tun0, and the host masquerades traffic from the cluster network to
// anything outside it (docs/openshift-rules.md "NAT egress, services and
// host access").
//
// The functions work in the network namespace of the calling thread. To
// use them for another namespace, lock the OS thread, enter the namespace,
// call them, and restore the thread's namespace.
//
// The rules live in a table of their own, "ip gvs", with one chain:
//
//	table ip gvs {
//		chain postrouting {
//			type nat hook postrouting priority srcnat; policy accept;
//			ip saddr C1 ip daddr != C1 ip daddr != C2 … masquerade
//			(one rule per cluster network C1, C2, …)
//		}
//	}
package nat

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// TableName and ChainName name the nftables objects this package owns.
const (
	TableName = "gvs"
	ChainName = "postrouting"
)

// ErrInvalidNetwork means a cluster network is not a usable IPv4 prefix.
var ErrInvalidNetwork = errors.New("nat: invalid cluster network")

// EnsureMasquerade makes the current network namespace masquerade IPv4
// traffic from any of clusterNets to anything outside all of them. It
// replaces the whole "ip gvs" table in one netlink transaction, so calling
// it again (with the same or other networks) leaves exactly the new rules.
func EnsureMasquerade(clusterNets []netip.Prefix) error {
	if len(clusterNets) == 0 {
		return fmt.Errorf("%w: none given", ErrInvalidNetwork)
	}
	for _, cn := range clusterNets {
		if !cn.IsValid() || !cn.Addr().Unmap().Is4() || cn.Bits() == 0 {
			return fmt.Errorf("%w: %v", ErrInvalidNetwork, cn)
		}
	}
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nat: netlink: %w", err)
	}
	table := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName}
	// Add-then-delete removes any previous version of our table (adding an
	// existing table is not an error); the rest of the batch recreates it.
	c.AddTable(table)
	c.DelTable(table)
	c.AddTable(table)
	chain := c.AddChain(&nftables.Chain{
		Name:     ChainName,
		Table:    table,
		Type:     nftables.ChainTypeNAT,
		Hooknum:  nftables.ChainHookPostrouting,
		Priority: nftables.ChainPriorityNATSource,
	})
	for _, cn := range clusterNets {
		c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: masqueradeExprs(cn, clusterNets)})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nat: install table ip %s: %w", TableName, err)
	}
	return nil
}

// Remove deletes the "ip gvs" table and its rules from the current network
// namespace. It succeeds when the table does not exist.
func Remove() error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nat: netlink: %w", err)
	}
	table := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName}
	c.AddTable(table)
	c.DelTable(table)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nat: remove table ip %s: %w", TableName, err)
	}
	return nil
}

// Offsets of the IPv4 source and destination addresses in the header.
const (
	offIPv4Src = 12
	offIPv4Dst = 16
)

// masqueradeExprs builds "ip saddr src ip daddr != each of all masquerade".
func masqueradeExprs(src netip.Prefix, all []netip.Prefix) []expr.Any {
	e := prefixMatch(offIPv4Src, src, expr.CmpOpEq)
	for _, cn := range all {
		e = append(e, prefixMatch(offIPv4Dst, cn, expr.CmpOpNeq)...)
	}
	return append(e, &expr.Counter{}, &expr.Masq{})
}

// prefixMatch loads the 4-byte address at offset of the network header into
// register 1, masks it with p's netmask and compares it with p's address.
func prefixMatch(offset uint32, p netip.Prefix, op expr.CmpOp) []expr.Any {
	p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()).Masked()
	addr := p.Addr().As4()
	e := []expr.Any{&expr.Payload{
		DestRegister: 1,
		Base:         expr.PayloadBaseNetworkHeader,
		Offset:       offset,
		Len:          4,
	}}
	if p.Bits() < 32 {
		m := netmask(p.Bits())
		e = append(e, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: m[:], Xor: []byte{0, 0, 0, 0}})
	}
	return append(e, &expr.Cmp{Op: op, Register: 1, Data: addr[:]})
}

func netmask(bits int) [4]byte {
	v := ^uint32(0) << (32 - bits)
	return [4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
}
