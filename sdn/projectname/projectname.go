// Package projectname holds what every part of gvs agrees a project is, below
// both the control plane (sdn/master, sdn/registry) and the API types
// (sdn/kube/networkv1), so that neither imports the other for it.
package projectname

// Valid reports whether s can name a project: a DNS label (RFC 1123),
// as a Kubernetes namespace's name and so an OpenShift NetNamespace's is —
// 1 to 63 lower-case letters, digits and inner hyphens.
func Valid(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}
