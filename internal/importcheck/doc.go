// Package importcheck has no code: its test checks that the dataplane core
// packages import no Prometheus, CNI, etcd, netlink or nftables code.
package importcheck
