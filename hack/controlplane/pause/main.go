// Command pause is the infrastructure container of the real node's pods (hack/devcluster/node.py):
// it holds the pod's namespaces and does nothing else. The node cannot pull the usual pause image
// (no registry here), so this one is built with the control plane and imported into containerd.
// As process 1 of the pod it exits on SIGTERM or SIGINT (the kernel ignores signals that process 1
// has no handler for) and reaps any orphan re-parented to it.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
