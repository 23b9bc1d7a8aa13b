// Package conntrack is gvs's connection tracker: Open vSwitch's ct()
// model — zones, marks, labels, NAT — in userspace, for IPv4.
//
// Semantics follow ovs-actions(7) (ct, nat) and ovs-fields(7) (ct_state,
// ct_zone, ct_mark, ct_label, ct_nw_src/dst, ct_nw_proto, ct_tp_src/dst),
// and the behaviour of OVS's userspace tracker (lib/conntrack*.c), so that
// a rule set written for OVS means the same here; docs/conntrack.md lists
// where it differs.
//
// A Tracker holds a fixed number of entries (Config.MaxEntries), each one
// connection found from either direction by its zone and 5-tuple (an
// ICMP query by its identifier, other protocols by the address pair).
// The flow table calls Process once per ct action with the packet, the
// action's arguments (Action) and the packet's connection-tracking
// metadata (Meta), from any number of switch workers at once. A packet's
// way through Process:
//
//  1. Entering a zone other than the packet's last ct zone clears its
//     ct_state.
//  2. A later IPv4 fragment takes the verdict (and address translation)
//     its first fragment got; fragments are tracked with their first
//     fragment, not reassembled.
//  3. A packet whose previous ct action found a connection in the same
//     zone is not looked up again (as OVS caches the connection in the
//     packet).
//  4. Its headers are checked: lengths, checksums (unless the caller
//     vouches for them or they are partial), ports, ICMP types.
//  5. The connection is looked up, without locks: a seeded hash that is
//     the same for both directions picks a bucket; a sequence lock per
//     stripe of buckets lets readers walk chains while writers change
//     them. An ICMP error is looked up by the packet it quotes.
//  6. force ends a connection met in its reply direction.
//  7. Found: TCP window checks and states (OVS's conntrack-tcp), UDP,
//     ICMP and other replies, the idle timeout by class; with nat, the
//     recorded translation, checksums updated incrementally.
//  8. Not found: with commit, a new entry within the global and zone
//     limits (early-dropping an unreplied or closing connection when
//     full), with a translation unique in the zone for nat(src|dst=…).
//  9. The metadata takes ct_state, zone, mark, label and the original
//     tuple; exec's set_field values go to the connection.
//
// A switch worker with a batch of packets may hand them to Prefetch
// first, so that a large table's cache misses overlap.
//
// Nothing runs in the background: entries expire when a packet finds them
// so, and Sweep, called by the embedder, frees idle ones incrementally.
// Time is the caller's: Process and Sweep take it as an argument, the
// rest reads Config.Clock. Save and Load carry the table across a restart.
//
// Per-packet calls allocate nothing and return a Reason rather than an
// error; an established connection's packet takes one entry lock and
// touches no shared counter.
package conntrack
