// Package flowtable is gvs's OpenFlow-1.3-style flow table: rules written in
// ovs-ofctl text syntax (ParseRule) or built in Go (NewRule, Builder),
// compiled into immutable lookup structures published through
// atomic.Pointer, looked up without locks or allocations, with per-rule
// counters and a trace facility. docs/flow-syntax.md describes both forms.
package flowtable
