package main

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/gvswitch/gvs/sdn/why"
)

// TestWhyArgs: gvsctl why refuses bad arguments, a missing certificate
// and the Kubernetes mode before it reaches any server.
func TestWhyArgs(t *testing.T) {
	etcd := []string{"-etcd", "https://192.0.2.1:2379", "-timeout", "1s"}
	for name, x := range map[string]struct {
		args []string
		want string
	}{
		"one pod":        {append(etcd, "why", "a/b"), "why needs two pods"},
		"four args":      {append(etcd, "why", "a/b", "c/d", "tcp/80", "x"), "why needs two pods"},
		"bad target":     {append(etcd, "why", "a/b", "c/d", "sctp/80"), "tcp/PORT"},
		"no certificate": {append(etcd, "why", "a/b", "c/d"), "administrator's certificate"},
		"kubernetes":     {[]string{"--kubeconfig", "/nonexistent", "why", "a/b", "c/d"}, "administrator's certificate of the gvs cluster CA"},
		"no etcd":        {[]string{"why", "a/b", "c/d"}, "--etcd"},
	} {
		err := run(x.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), x.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, x.want)
		}
	}
	if err := run(append(etcd, "why", "a/b", "c/d", "udp/0"), &bytes.Buffer{}); !errors.Is(err, why.ErrBadTarget) {
		t.Errorf("udp/0: %v, want ErrBadTarget", err)
	}
}

// TestPrintAnswer: the text names both pods, the verdict and the reason,
// groups the steps by node and marks the step that decided.
func TestPrintAnswer(t *testing.T) {
	from := why.Pod{Namespace: "alpha", Name: "web", Node: "n1", IP: netip.MustParseAddr("10.128.0.2"), Port: 3, VNID: 10}
	to := why.Pod{Namespace: "beta", Name: "db", Node: "n2", IP: netip.MustParseAddr("10.128.2.2"), Port: 3, VNID: 11}
	a := why.Answer{
		Question: why.Question{From: from, To: to, Target: why.Target{Proto: "tcp", Port: 5432}},
		Reason:   "VNID 10 may not reach VNID 11 (table 80, node n2)",
		Steps: []why.Step{
			{Node: "n1", Table: 20, Rule: "table=20, priority=100, in_port=3, ip, nw_src=10.128.0.2, actions=goto_table:27", Did: "goto_table:27"},
			{Node: "n2", Table: 10, Rule: "table=10, priority=100, tun_src=192.0.2.11, actions=goto_table:30", Did: "goto_table:30"},
			{Node: "n2", Table: 80, Rule: "table=80, priority=0, actions=drop", Did: "drop"},
		},
		Decided: 2,
	}
	var b bytes.Buffer
	printAnswer(&b, a)
	out := b.String()
	for _, want := range []string{
		"alpha/web (node n1, 10.128.0.2, VNID 10) → beta/db (node n2, 10.128.2.2, VNID 11) tcp/5432: REFUSED\n",
		"VNID 10 may not reach VNID 11 (table 80, node n2)\n",
		"on node n1:\n", "on node n2:\n",
		"=> table=80, priority=0, actions=drop\n",
		"decided by table 80 on node n2",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "=>") != 1 {
		t.Errorf("want one marked step:\n%s", out)
	}
}
