package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"sort"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/why"
	vswitch "github.com/gvswitch/gvs/vswitch"
	"github.com/gvswitch/gvs/vxlan"
)

// handle answers one control request.
func (d *Daemon) handle(_ context.Context, req control.Request) (any, error) {
	switch req.Command {
	case "show":
		return d.show(), nil
	case "dump-ports":
		return d.dumpPorts(), nil
	case "dump-flows":
		return d.dumpFlows(req.Args)
	case "add-flows":
		rules, err := flowtable.ParseRules(req.Args)
		if err != nil {
			return nil, err
		}
		if err := d.dp.table.Add(rules...); err != nil {
			return nil, err
		}
		return control.CountResult{Count: len(rules)}, nil
	case "del-flows":
		f, err := parseFilter(req.Args, req.Strict)
		if err != nil {
			return nil, err
		}
		return control.CountResult{Count: d.dp.table.Delete(f)}, nil
	case "trace":
		return d.trace(req.Args)
	case "stats":
		return d.stats(), nil
	case "pods":
		return d.node.podViews(), nil
	case "capture":
		return d.startCapture(req.Capture)
	case "dump-conntrack":
		return d.dp.dumpConntrack(req.Args)
	case "flush-conntrack":
		return d.dp.flushConntrack(req.Args)
	case "conntrack-stats":
		return d.dp.conntrackStats(), nil
	}
	return nil, fmt.Errorf("%w %q", control.ErrUnknownCommand, req.Command)
}

func (d *Daemon) show() control.ShowResult {
	var remotes []control.Remote
	for _, r := range d.node.prog.Remotes() {
		rm := control.Remote{Name: r.Name, IP: r.IP.String(), Subnet: r.Subnet.String()}
		if r.HasFixedVNID {
			v := r.FixedVNID
			rm.FixedVNID = &v
		}
		remotes = append(remotes, rm)
	}
	npods := d.node.pods.Len()
	node := d.node.prog.Node()
	d.node.mu.Lock()
	sh := d.node.subnet
	d.node.mu.Unlock()
	snap := d.dp.table.Snapshot()
	return control.ShowResult{
		Node: node.NodeName, NodeIP: node.NodeIP.String(), Subnet: subnetString(node.Subnet),
		SubnetChanges: sh.changes, PreviousSubnet: sh.previousString(),
		Mode: string(node.Mode), Version: Version(), Ports: len(d.dp.sw.Ports()), Pods: npods,
		Rules: d.dp.table.Len(), Generation: snap.Generation(), Remotes: remotes, Registry: d.cp.registryInfo(),
		IOEngine: d.dp.ioEngineName(), SchedSlice: d.dp.sliceState(),
		BusyPoll: d.dp.busyState(), RxBuffers: d.dp.rxBudgetState(), Rings: d.dp.ringsState(),
		Tunnel: d.dp.tunnelState(),
	}
}

func (d *Daemon) dumpPorts() []control.Port {
	ports := d.dp.sw.Ports()
	sort.Slice(ports, func(i, j int) bool { return ports[i].No < ports[j].No })
	out := make([]control.Port, len(ports))
	for i, p := range ports {
		kind := "tap"
		if p.Tunnel {
			kind = "vxlan"
		}
		out[i] = control.Port{No: p.No, Name: p.Name, Kind: kind,
			RxPackets: p.Stats.RxPackets, RxBytes: p.Stats.RxBytes, RxDrops: p.Stats.RxDrops,
			TxPackets: p.Stats.TxPackets, TxBytes: p.Stats.TxBytes, TxDrops: p.Stats.TxDrops}
	}
	return out
}

func (d *Daemon) dumpFlows(filter string) ([]control.Flow, error) {
	var f flowtable.Filter
	if filter != "" {
		var err error
		if f, err = parseFilter(filter, false); err != nil {
			return nil, err
		}
	}
	var out []control.Flow
	for _, r := range d.dp.table.Rules() {
		if filter != "" && !f.Selects(r) {
			continue
		}
		pk, by := r.Stats()
		out = append(out, control.Flow{Table: r.Table, Priority: r.Priority, Cookie: r.Cookie,
			Packets: pk, Bytes: by, Rule: r.String()})
	}
	return out, nil
}

func parseFilter(text string, strict bool) (flowtable.Filter, error) {
	f, err := flowtable.ParseFilter(text)
	if err != nil {
		return f, err
	}
	f.Strict = strict
	return f, nil
}

func (d *Daemon) stats() control.Stats {
	st := d.dp.sw.Stats()
	out := control.Stats{Drops: map[string]uint64{}, TableDrops: map[int]uint64{},
		Lookups: st.Lookups, CacheHits: st.CacheHits}
	for r := vswitch.DropReason(0); r < vswitch.NumDropReasons; r++ {
		out.Drops[r.String()] = st.Drops[r]
	}
	for t, n := range st.TableDrops {
		if n > 0 {
			out.TableDrops[t] = n
		}
	}
	if d.dp.vx != nil {
		vs := d.dp.vx.Stats()
		out.TunnelDrops = map[string]uint64{}
		for r := vxlan.DropReason(0); r < vxlan.NumDropReasons; r++ {
			out.TunnelDrops[r.String()] = vs.Drops[r]
		}
	}
	return out
}

// trace runs a described packet through the current snapshot. When it
// leaves through the tunnel towards a known node, the result says how to
// continue the trace there.
func (d *Daemon) trace(desc string) (control.TraceResult, error) {
	f, opts, err := flowtable.ParseTrace(desc)
	if err != nil {
		return control.TraceResult{}, err
	}
	// ct actions: what the tracker holds for the packet, unless the
	// operator gave the states (gvsctl trace --ct-next).
	opts.Conntrack = d.dp.sw.Conntrack()
	tr := d.dp.table.Snapshot().TraceWith(f, opts)
	node := d.node.nodeConfig()
	res := control.TraceResult{Node: node.NodeName, Trace: tr, Text: tr.String()}
	// Outputs into the tunnel, of every pass (a ct action's recirculation
	// may be the pass that outputs).
	res.Next = why.NextHops(tr, f, node.NodeIP, func(ip netip.Addr) (string, bool) {
		rn, ok := d.node.prog.Remote(ip)
		return rn.Name, ok
	})
	res.Policies = tracePolicies(tr, d.node.prog.PoliciesOf)
	return res, nil
}

// tracePolicies names the NetworkPolicies behind the NetworkPolicy rules
// (ingress and egress cookies) a trace met.
func tracePolicies(tr flowtable.Trace, policiesOf func(netip.Addr) (ingress, egress []string)) []control.PolicyRules {
	passes := []flowtable.TracePass{tr.TracePass}
	for _, r := range tr.Recirc {
		passes = append(passes, r.TracePass)
	}
	var out []control.PolicyRules
	seen := map[uint64]bool{}
	for _, p := range passes {
		for _, st := range p.Steps {
			class := sdn.CookieClass(st.Cookie)
			if seen[st.Cookie] || (class != "ingress" && class != "egress") {
				continue
			}
			seen[st.Cookie] = true
			ip, _ := sdn.CookiePod(st.Cookie)
			in, eg := policiesOf(ip)
			pols := in
			if class == "egress" {
				pols = eg
			}
			out = append(out, control.PolicyRules{Cookie: st.Cookie, Pod: ip.String(), Direction: class, Policies: pols})
		}
	}
	return out
}
