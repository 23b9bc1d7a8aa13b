package networkv1_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// TestConsistentList: an informer's first list ("0", from the watch cache)
// becomes a consistent one; watches and lists of a named version do not
// change.
func TestConsistentList(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in, want metav1.ListOptions
	}{
		{"first list", metav1.ListOptions{ResourceVersion: "0"}, metav1.ListOptions{}},
		{"first list with a match", metav1.ListOptions{ResourceVersion: "0", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan},
			metav1.ListOptions{}},
		{"consistent already", metav1.ListOptions{}, metav1.ListOptions{}},
		{"a named version", metav1.ListOptions{ResourceVersion: "42"}, metav1.ListOptions{ResourceVersion: "42"}},
		{"a watch", metav1.ListOptions{ResourceVersion: "0", Watch: true}, metav1.ListOptions{ResourceVersion: "0", Watch: true}},
		{"a selector is kept", metav1.ListOptions{ResourceVersion: "0", FieldSelector: "spec.nodeName=n1"},
			metav1.ListOptions{FieldSelector: "spec.nodeName=n1"}},
	} {
		got := tc.in
		networkv1.ConsistentList(&got)
		if got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
