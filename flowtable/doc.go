// Package flowtable is gvs's OpenFlow-1.3-style flow table: rules written in
// ovs-ofctl text syntax (ParseRule) or built in Go (NewRule, Builder),
// compiled into immutable lookup structures published through
// atomic.Pointer, looked up without locks or allocations, with per-rule
// counters and a trace facility. docs/flow-syntax.md describes both forms.
//
// Connection tracking (ct, ct_clear, the ct_* fields) follows
// ovs-actions(7) and ovs-fields(7): the pipeline records each ct action a
// packet meets in its Verdict (CTStep) for the caller to carry out with a
// conntrack.Tracker, and a ct action with table=N is carried on by running
// the pipeline again from table N (RunFrom) with the ct_* fields the
// tracker gave (Fields.SetConntrack); package vswitch does both.
package flowtable
