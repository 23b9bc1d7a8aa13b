// Package why answers "why can't pod A reach pod B?" by running the first
// packet of a connection through the real compiled tables of the nodes
// involved, as gvs-switchd's trace does (flowtable.Snapshot.TraceWith, the
// control protocol's "trace"): the source pod's node first and, when the
// packet leaves there through the tunnel, the node it reaches. It never
// models the rules itself: every Step of an Answer is a step of one of
// those traces, and the verdict is what they did with the packet.
//
//  1. Question.Packet describes the packet pod From sends: its port,
//     addresses, protocol and port, and ct_state=trk|new for every
//     recirculation (the first packet of a new connection; what the
//     tracker holds for an older one does not change the answer).
//  2. A Tracer runs it on From's node; the trace's NextHop says where the
//     tunnel takes it and how the packet looks there.
//  3. That packet is traced on To's node (skipped when both pods share a
//     node).
//  4. The packet is allowed when a trace outputs it to To's port; else the
//     step that dropped it (or sent it elsewhere) decides, and Reason says
//     why in one line.
//
// gvsctl why and gvs-master's console both use Ask and Matrix, so they say
// the same thing. Remote is the Tracer of the etcd-registry mode: every
// gvs-switchd serves its traces read-only on a mutual-TLS endpoint that
// admits only administrators and gvs-master (remote.go,
// docs/security.md); in Kubernetes mode too, where the nodes get their
// certificates of the gvs cluster CA as files.
package why

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/sdn"
)

// Tracer runs one packet trace on one node.
type Tracer interface {
	// Trace runs packet (a flowtable.ParseTrace description, the argument
	// of gvsctl trace) through node's current compiled tables and returns
	// the daemon's result, NextHop included. It changes nothing on the
	// node.
	Trace(ctx context.Context, node, packet string) (control.TraceResult, error)
}

// PodLister lists the pods attached to one node, as that node's gvs-switchd
// reports them (gvsctl pods).
type PodLister interface {
	Pods(ctx context.Context, node string) ([]Pod, error)
}

// Pod is a pod as its node reports it: where it is attached and what the
// rules know of it.
type Pod struct {
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	Node      string     `json:"node"`
	IP        netip.Addr `json:"ip"`
	MAC       string     `json:"mac,omitempty"`
	// Port is the pod's switch port on Node.
	Port uint32 `json:"port"`
	// VNID is the pod's project's VNID (0 in the subnet mode).
	VNID uint32 `json:"vnid"`
}

// String returns "namespace/name".
func (p Pod) String() string { return p.Namespace + "/" + p.Name }

// Target is what the packet is sent to: a protocol and, for TCP and UDP,
// a destination port.
type Target struct {
	// Proto is "tcp", "udp" or "icmp" (an echo request).
	Proto string `json:"proto"`
	Port  uint16 `json:"port,omitempty"`
}

// ErrBadTarget is returned for a target that is not PROTO/PORT or icmp.
var ErrBadTarget = errors.New("why: a target is tcp/PORT, udp/PORT or icmp")

// ParseTarget reads "tcp/8080", "udp/53" or "icmp"; "" is icmp.
func ParseTarget(s string) (Target, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" || s == "icmp" {
		return Target{Proto: "icmp"}, nil
	}
	proto, port, ok := strings.Cut(s, "/")
	if !ok || (proto != "tcp" && proto != "udp") {
		return Target{}, fmt.Errorf("%w: %q", ErrBadTarget, s)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return Target{}, fmt.Errorf("%w: %q: port 1 to 65535", ErrBadTarget, s)
	}
	return Target{Proto: proto, Port: uint16(n)}, nil
}

// String returns the target as ParseTarget reads it.
func (t Target) String() string {
	if t.Proto == "icmp" || t.Proto == "" {
		return "icmp"
	}
	return t.Proto + "/" + strconv.Itoa(int(t.Port))
}

func (t Target) validate() error {
	_, err := ParseTarget(t.String())
	if err == nil && t.Proto != "icmp" && t.Proto != "" && t.Port == 0 {
		err = fmt.Errorf("%w: %s needs a port", ErrBadTarget, t.Proto)
	}
	return err
}

// Question asks whether pod From can open a connection to pod To.
type Question struct {
	From   Pod    `json:"from"`
	To     Pod    `json:"to"`
	Target Target `json:"target"`
}

// ErrBadQuestion is returned for a question that names no usable pods.
var ErrBadQuestion = errors.New("why: bad question")

// SourcePort is the source port of the traced TCP or UDP packet.
const SourcePort = 40000

// ctNew gives every recirculation of a trace ct_state=trk|new, so that the
// first packet of a new connection is traced, whatever the tracker holds.
var ctNew = strings.Repeat(",ct_next=trk|new", flowtable.MaxRecirc+1)

// Packet returns the description of the packet From sends, as Tracer.Trace
// takes it on From's node.
func (q Question) Packet() (string, error) {
	if err := q.validate(); err != nil {
		return "", err
	}
	src := q.From.MAC
	if src == "" {
		src = sdn.FormatMAC(sdn.PodMAC(q.From.IP))
	}
	d := fmt.Sprintf("in_port=%d,dl_src=%s,dl_dst=%s,", q.From.Port, src, sdn.FormatMAC(sdn.PodMAC(q.To.IP)))
	switch q.Target.Proto {
	case "tcp", "udp":
		d += fmt.Sprintf("%s,nw_src=%s,nw_dst=%s,tp_src=%d,tp_dst=%d", q.Target.Proto, q.From.IP, q.To.IP, SourcePort, q.Target.Port)
	default:
		d += fmt.Sprintf("icmp,nw_src=%s,nw_dst=%s,icmp_type=8,icmp_code=0", q.From.IP, q.To.IP)
	}
	return d + ctNew, nil
}

func (q Question) validate() error {
	for _, p := range []Pod{q.From, q.To} {
		if p.Node == "" || !p.IP.Is4() || p.Port == 0 {
			return fmt.Errorf("%w: pod %s needs a node, an IPv4 address and a port (as its node lists it)", ErrBadQuestion, p)
		}
	}
	return q.Target.validate()
}

// Step is one table a trace visited: the rule it matched (none for a
// miss) and what the rule's actions did.
type Step struct {
	Node string `json:"node"`
	// Pass is 0 for the first run of the pipeline, else the ID of the
	// recirculation (after a ct action) the step belongs to.
	Pass int `json:"pass"`
	// Depth counts the enclosing resubmits.
	Depth    int    `json:"depth"`
	Table    uint8  `json:"table"`
	Priority uint16 `json:"priority"`
	Cookie   uint64 `json:"cookie,omitempty"`
	// Rule is the rule's text in ovs-ofctl syntax, "" for a miss.
	Rule string `json:"rule,omitempty"`
	// Did says what the actions did: "goto_table:30; output to port 4", or
	// "drop" for a rule without actions and "no match: drop" for a miss.
	Did string `json:"did"`
}

// String renders the step on one line: "node b table 80: RULE → DID".
func (s Step) String() string {
	r := s.Rule
	if r == "" {
		r = "(no rule)"
	}
	return fmt.Sprintf("node %s table %d: %s → %s", s.Node, s.Table, r, s.Did)
}

// Answer is what the traces did with a Question's packet.
type Answer struct {
	Question Question `json:"question"`
	// Allowed reports whether the packet reaches To's port.
	Allowed bool `json:"allowed"`
	// Reason is one line for a human: "dropped by the NetworkPolicy
	// ingress rules of p2/server (table 80, node b)", "VNID 12 may not
	// reach VNID 13 (table 80, node b)", "allowed: …".
	Reason string `json:"reason"`
	// Steps are the traces' steps in order: From's node, then To's.
	Steps []Step `json:"steps"`
	// Decided is the index in Steps of the step that decided: the one that
	// output the packet to To, dropped it or sent it elsewhere; -1 when no
	// step did (an error).
	Decided int `json:"decided"`
	// Policies names the NetworkPolicies ("namespace/name") whose rules
	// the deciding step belongs to, when it is a pod's NetworkPolicy rule
	// and its node named them (control.TraceResult.Policies).
	Policies []string `json:"policies,omitempty"`
	// Traces are the nodes' results as they came, From's node first.
	Traces []control.TraceResult `json:"traces"`
	// Error is set, with Allowed false, when Matrix could not trace the
	// pair (Ask returns the error instead).
	Error string `json:"error,omitempty"`
}

// DecidingStep returns the step that decided, if one did.
func (a Answer) DecidingStep() (Step, bool) {
	if a.Decided < 0 || a.Decided >= len(a.Steps) {
		return Step{}, false
	}
	return a.Steps[a.Decided], true
}

// Ask traces q's packet on From's node and, when it leaves through the
// tunnel towards To's node, there too, and says whether it reaches To and
// why. An error means a trace could not be run (a node unreachable,
// refused or unknown), not that the packet is dropped.
func Ask(ctx context.Context, t Tracer, q Question) (Answer, error) {
	a := Answer{Question: q, Decided: -1}
	pkt, err := q.Packet()
	if err != nil {
		return a, err
	}
	src, err := t.Trace(ctx, q.From.Node, pkt)
	if err != nil {
		return a, fmt.Errorf("why: trace on node %s: %w", q.From.Node, err)
	}
	srcPasses := a.add(q.From.Node, src)
	if q.From.Node == q.To.Node {
		a.finish(q.To.Node, src, srcPasses)
		return a, nil
	}
	var hop *control.NextHop
	for i := range src.Next {
		if src.Next[i].Node == q.To.Node {
			hop = &src.Next[i]
			break
		}
	}
	if hop == nil {
		a.leftSource(src, srcPasses)
		return a, nil
	}
	dst, err := t.Trace(ctx, q.To.Node, hop.Packet+ctNew)
	if err != nil {
		return a, fmt.Errorf("why: trace on node %s: %w", q.To.Node, err)
	}
	a.finish(q.To.Node, dst, a.add(q.To.Node, dst))
	return a, nil
}

// pass is one run of the pipeline in a trace, with where its steps start
// in Answer.Steps.
type pass struct {
	flowtable.TracePass
	id, first int
}

// add appends the steps of one node's trace and returns its passes.
func (a *Answer) add(node string, r control.TraceResult) []pass {
	a.Traces = append(a.Traces, r)
	ps := []pass{{TracePass: r.Trace.TracePass}}
	for _, rc := range r.Trace.Recirc {
		ps = append(ps, pass{TracePass: rc.TracePass, id: rc.ID})
	}
	for i := range ps {
		ps[i].first = len(a.Steps)
		for _, st := range ps[i].Steps {
			a.Steps = append(a.Steps, Step{Node: node, Pass: ps[i].id, Depth: st.Depth, Table: st.Table,
				Priority: st.Priority, Cookie: st.Cookie, Rule: st.Rule, Did: did(st)})
		}
	}
	return ps
}

func did(st flowtable.TraceStep) string {
	switch {
	case st.Miss:
		return "no match: drop"
	case st.Loop:
		return "too many tables visited: drop"
	case st.TooManyCT:
		return "too many ct actions: drop"
	case len(st.Actions) == 0 && !st.Continued:
		return "drop"
	}
	parts := make([]string, 0, len(st.Actions))
	for _, ac := range st.Actions {
		p := ac.Action
		if ac.Result != "" {
			p += " (" + ac.Result + ")"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

// outputStep returns the index in a.Steps of the step of passes ps whose
// action output the packet to port, or -1.
func (a *Answer) outputStep(ps []pass, port uint32) int {
	want := "output to port " + strconv.FormatUint(uint64(port), 10)
	for _, p := range ps {
		for i, st := range p.Steps {
			for _, ac := range st.Actions {
				if ac.Result == want || strings.HasPrefix(ac.Result, want+" ") {
					return p.first + i
				}
			}
		}
	}
	return -1
}

// dropStep returns the pass that dropped the packet and the index in
// a.Steps of the step that did (the last step of that pass in the drop's
// table), or -1.
func (a *Answer) dropStep(ps []pass) (pass, int) {
	for k := len(ps) - 1; k >= 0; k-- {
		p := ps[k]
		if p.Drop == "" {
			continue
		}
		for i := len(p.Steps) - 1; i >= 0; i-- {
			if p.Steps[i].Table == p.DropTable {
				return p, p.first + i
			}
		}
		if len(p.Steps) > 0 {
			return p, p.first + len(p.Steps) - 1
		}
		return p, -1
	}
	return pass{}, -1
}

// finish decides on To's node: delivered to To's port, dropped, or sent
// elsewhere.
func (a *Answer) finish(node string, r control.TraceResult, ps []pass) {
	q := a.Question
	if i := a.outputStep(ps, q.To.Port); i >= 0 {
		a.Allowed, a.Decided = true, i
		st := a.Steps[i]
		a.Reason = fmt.Sprintf("allowed: table %d on node %s outputs it to %s (port %d)", st.Table, node, q.To, q.To.Port)
		if q.From.Node != q.To.Node {
			a.Reason += fmt.Sprintf(", through the tunnel from node %s", q.From.Node)
		}
		return
	}
	if _, i := a.dropStep(ps); i >= 0 {
		a.Decided = i
		a.Reason = a.dropReason(a.Steps[i], r)
		return
	}
	a.Decided = a.lastOutput(ps)
	a.Reason = fmt.Sprintf("node %s does not deliver it to %s (port %d): %s", node, q.To, q.To.Port, datapath(r))
}

// leftSource explains a packet that did not leave From's node towards
// To's node.
func (a *Answer) leftSource(r control.TraceResult, ps []pass) {
	q := a.Question
	if _, i := a.dropStep(ps); i >= 0 && len(r.Next) == 0 {
		a.Decided = i
		a.Reason = a.dropReason(a.Steps[i], r)
		return
	}
	a.Decided = a.lastOutput(ps)
	if len(r.Next) > 0 {
		a.Reason = fmt.Sprintf("node %s sends it through the tunnel to node %s, but %s is on node %s", q.From.Node, r.Next[0].Node, q.To, q.To.Node)
		return
	}
	a.Reason = fmt.Sprintf("node %s does not send it through the tunnel to node %s: %s", q.From.Node, q.To.Node, datapath(r))
}

// lastOutput returns the index of the last step with an output, or the
// last step, or -1.
func (a *Answer) lastOutput(ps []pass) int {
	last, out := -1, -1
	for _, p := range ps {
		for i, st := range p.Steps {
			last = p.first + i
			for _, ac := range st.Actions {
				if strings.HasPrefix(ac.Result, "output to port") {
					out = p.first + i
				}
			}
		}
	}
	if out >= 0 {
		return out
	}
	return last
}

// datapath returns what the switch does with the packet after every pass:
// "datapath actions: 2" or "datapath actions: drop".
func datapath(r control.TraceResult) string {
	acts := []string{r.Trace.Datapath}
	for _, rc := range r.Trace.Recirc {
		acts = append(acts, rc.Datapath)
	}
	return "datapath actions: " + strings.Join(acts, " then ")
}

// dropReason says in one line why st (a step of r) dropped the packet,
// from the table, the kind of object the rule belongs to (its cookie's
// class) and, for a NetworkPolicy rule, the policies r names for it.
func (a *Answer) dropReason(st Step, r control.TraceResult) string {
	q := a.Question
	where := fmt.Sprintf("table %d, node %s", st.Table, st.Node)
	if st.Rule == "" {
		return fmt.Sprintf("no rule in table %d on node %s matches it: dropped", st.Table, st.Node)
	}
	for _, pr := range r.Policies {
		if pr.Cookie == st.Cookie && st.Cookie != 0 {
			a.Policies = pr.Policies
		}
	}
	switch class := sdn.CookieClass(st.Cookie); {
	case st.Table == sdn.TableIsolation && class == "ingress":
		if len(a.Policies) > 0 {
			return fmt.Sprintf("dropped by %s in table 80 on node %s: %s %s and %s no %s from %s",
				policyNames(a.Policies), st.Node, selects(a.Policies), q.To, allows(a.Policies), q.Target, q.From)
		}
		return fmt.Sprintf("dropped by the NetworkPolicy ingress rules of %s (%s): the policies that select it allow no %s from %s",
			q.To, where, q.Target, q.From)
	case st.Table == sdn.TablePolicyEgress && class == "egress":
		if len(a.Policies) > 0 {
			return fmt.Sprintf("dropped by %s in table 27 on node %s: %s %s and %s no %s to %s",
				policyNames(a.Policies), st.Node, selects(a.Policies), q.From, allows(a.Policies), q.Target, q.To)
		}
		return fmt.Sprintf("dropped by the NetworkPolicy egress rules of %s (%s): the policies that select it allow no %s to %s",
			q.From, where, q.Target, q.To)
	case st.Table == sdn.TableIsolation:
		return fmt.Sprintf("VNID %d may not reach VNID %d (%s)", q.From.VNID, q.To.VNID, where)
	case st.Table == sdn.TableVXLANIn:
		return fmt.Sprintf("node %s accepts no VXLAN from node %s with this VNI (%s)", st.Node, q.From.Node, where)
	case st.Table == sdn.TablePodIn:
		return fmt.Sprintf("anti-spoofing: %s's port does not send from %s (%s)", q.From, q.From.IP, where)
	case st.Table == sdn.TableEgressFW || class == "egress-firewall":
		return fmt.Sprintf("dropped by %s's egress firewall (%s)", q.From.Namespace, where)
	case st.Table == sdn.TableService:
		return fmt.Sprintf("dropped by the service rules (%s)", where)
	}
	return fmt.Sprintf("dropped in table %d on node %s by %s", st.Table, st.Node, st.Rule)
}

// policyNames: "NetworkPolicy a/b" or "NetworkPolicies a/b, a/c".
func policyNames(p []string) string {
	if len(p) == 1 {
		return "NetworkPolicy " + p[0]
	}
	return "NetworkPolicies " + strings.Join(p, ", ")
}

func selects(p []string) string {
	if len(p) == 1 {
		return "it selects"
	}
	return "they select"
}

func allows(p []string) string {
	if len(p) == 1 {
		return "allows"
	}
	return "none allows"
}
