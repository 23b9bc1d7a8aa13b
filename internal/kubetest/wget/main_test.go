package main

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		args []string
		want options
	}{
		{[]string{"-q", "-O", "-", "-T", "1", "10.0.0.1:80"}, options{quiet: true, output: "-", timeout: time.Second, url: "http://10.0.0.1:80"}},
		{[]string{"-T", "5", "-qO-", "http://a/b"}, options{quiet: true, output: "-", timeout: 5 * time.Second, url: "http://a/b"}},
		{[]string{"-qO", "-", "http://a/"}, options{quiet: true, output: "-", url: "http://a/"}},
		{[]string{"-T0.5", "http://a/x.txt"}, options{output: "x.txt", timeout: 500 * time.Millisecond, url: "http://a/x.txt"}},
		{[]string{"--spider", "--timeout=2", "--output-document=f", "http://a"}, options{spider: true, output: "f", timeout: 2 * time.Second, url: "http://a"}},
		{[]string{"-s", "http://a"}, options{spider: true, output: "index.html", url: "http://a"}},
	} {
		got, err := parse(c.args)
		if err != nil || got != c.want {
			t.Errorf("parse(%q) = %+v, %v; want %+v", c.args, got, err, c.want)
		}
	}
	for _, bad := range [][]string{nil, {"-T"}, {"-T", "x", "http://a"}, {"-T", "-1", "http://a"}, {"-x", "http://a"},
		{"--bogus", "http://a"}, {"http://a", "http://b"}, {"https://a"}, {"-O"}} {
		if o, err := parse(bad); err == nil {
			t.Errorf("parse(%q) = %+v, want an error", bad, o)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("-q -O - -T 1 10.0.0.1:80")
	f.Add("-T 5 -qO- http://a/b")
	f.Add("--timeout=2 --spider http://a")
	f.Fuzz(func(t *testing.T, line string) {
		o, err := parse(strings.Fields(line))
		if err == nil && (o.url == "" || !strings.HasPrefix(o.url, "http://") || o.output == "" || o.timeout < 0) {
			t.Fatalf("parse(%q) = %+v without an error", line, o)
		}
	})
}
