// Command pause is the sandbox ("pause") container of the real-node lab's
// pods, written for gvs in place of Kubernetes' C program: it holds the
// pod's namespaces, reaps the zombies of a pod that shares its process
// namespace (it is PID 1 there), and exits on SIGINT or SIGTERM.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
