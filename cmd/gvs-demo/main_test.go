package main

import (
	"io"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args string
		want command
		err  string // "" no error, else a part of it
	}{
		{"up", command{Verb: "up", Mode: "etcd"}, ""},
		{"up -mode kube", command{Verb: "up", Mode: "kube"}, ""},
		{"up -mode netpol -prefix gvsn-x", command{Verb: "up", Mode: "netpol", Prefix: "gvsn-x"}, ""},
		{"up -mode cluster", command{Verb: "up", Mode: "cluster"}, ""},
		{"up -mode=cluster -prefix gvsdemo-t", command{Verb: "up", Mode: "cluster", Prefix: "gvsdemo-t"}, ""},
		{"down", command{Verb: "down"}, ""},
		{"down -prefix gvsn-x", command{Verb: "down", Prefix: "gvsn-x"}, ""},
		{"", command{}, "usage: gvs-demo up"},
		{"sideways", command{}, `unknown subcommand "sideways"`},
		{"up -mode ovs", command{}, `-mode "ovs": etcd, kube, netpol (or cluster)`},
		{"up -prefix Bad_Prefix", command{}, `-prefix "Bad_Prefix"`},
		{"up extra", command{}, `unexpected arguments ["extra"]`},
		{"down -mode etcd", command{}, "flag provided but not defined: -mode"},
	} {
		got, err := parse(strings.Fields(tc.args), io.Discard)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: got error %v, want one with %q", tc.args, err, tc.err)
		case got != tc.want:
			t.Errorf("%q: got %+v, want %+v", tc.args, got, tc.want)
		}
	}
}
