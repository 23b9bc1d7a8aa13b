package projectname

import (
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	for _, ok := range []string{"a", "default", "kube-system", "p0", strings.Repeat("a", 63)} {
		if !Valid(ok) {
			t.Errorf("Valid(%q) = false", ok)
		}
	}
	for _, bad := range []string{"", "-a", "a-", "A", "a_b", "a.b", "a/b", strings.Repeat("a", 64), "ä"} {
		if Valid(bad) {
			t.Errorf("Valid(%q) = true", bad)
		}
	}
}

func FuzzValid(f *testing.F) {
	f.Add("kube-system")
	f.Fuzz(func(t *testing.T, s string) {
		if Valid(s) && (len(s) > 63 || strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" || s[0] == '-' || s[len(s)-1] == '-') {
			t.Fatalf("Valid(%q) = true", s)
		}
	})
}
