package source

import (
	"slices"
	"testing"
)

// TestMirrorMulticast: the sink hears of a project's multicast opt-in only
// when it changes; a project never opted in is not opted out; a deleted
// project is opted out.
func TestMirrorMulticast(t *testing.T) {
	f := newFakeNode("10.1.9.0/24")
	m := newTestMirror(f)
	m.SetProjectVNID("alpha", 10)
	m.SetProjectMulticast("beta", false) // never on: nothing to say
	for range 2 {
		m.SetProjectMulticast("alpha", true)
	}
	m.SetProjectMulticast("alpha", false)
	m.SetProjectMulticast("alpha", true)
	m.ForgetProject("alpha")
	m.ForgetProject("alpha")
	want := []string{"vnid alpha 10", "multicast alpha true", "multicast alpha false", "multicast alpha true", "multicast alpha false"}
	if !slices.Equal(f.calls, want) {
		t.Errorf("calls\n%q\nwant\n%q", f.calls, want)
	}
}
