package flagargs

import (
	"errors"
	"flag"
	"io"
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args []string
		pos  []string
		out  string
		json bool
	}{
		{[]string{"a", "b"}, []string{"a", "b"}, "", false},
		{[]string{"-out", "d", "a", "b"}, []string{"a", "b"}, "d", false},
		{[]string{"a", "-json", "b", "-out", "d"}, []string{"a", "b"}, "d", true},
		{[]string{"a", "b", "-out=d", "-json"}, []string{"a", "b"}, "d", true},
		{[]string{"a", "--", "-json", "b"}, []string{"a", "-json", "b"}, "", false},
		{nil, nil, "", false},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		out := fs.String("out", "", "")
		asJSON := fs.Bool("json", false, "")
		pos, err := Parse(fs, tc.args)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if !slices.Equal(pos, tc.pos) || *out != tc.out || *asJSON != tc.json {
			t.Errorf("%q: positional %q -out %q -json %v, want %q %q %v", tc.args, pos, *out, *asJSON, tc.pos, tc.out, tc.json)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, args := range [][]string{{"a", "-nope"}, {"a", "-out"}} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.String("out", "", "")
		if pos, err := Parse(fs, args); err == nil {
			t.Errorf("%q: positional %q and no error", args, pos)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if _, err := Parse(fs, []string{"a", "-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
}
