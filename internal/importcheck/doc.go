// Package importcheck has no code: its tests hold the module's import
// graph to the layout docs/architecture.md describes. The dataplane core
// imports no Prometheus, CNI, etcd, netlink or nftables code; the ports
// stand without the switch; product packages import neither the lab and
// benchmark harness nor the experiments, and no package imports one of a
// higher layer (layers in importcheck_test.go); nothing outside
// experiments/ imports it, not even a test, so the experiments can go
// without touching anything else. Two more rules of the tree sit here too:
// every time.Sleep in a test carries a comment saying what it paces or
// waits out (sleeps_test.go), and internal/daemon.Daemon keeps to at most 25
// methods (daemon_test.go).
package importcheck
