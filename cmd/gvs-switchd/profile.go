package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// startCPUProfile starts a CPU profile written to path; the returned
// function stops it and closes the file. gvs-bench compare passes the
// environment on to the daemons it starts, so GVS_CPUPROFILE=/tmp/gvs.prof
// profiles both nodes of a run (one file per PID).
func startCPUProfile(path string) (func(), error) {
	return record("cpuprofile", path, pprof.StartCPUProfile, pprof.StopCPUProfile)
}

// startTrace starts an execution trace written to path (go tool trace;
// -pprof=sched shows where goroutines waited for a CPU); the returned
// function stops it and closes the file. Like the CPU profile it passes
// through gvs-bench's environment (GVS_TRACE). A trace costs a few per
// cent of the daemon's CPU and grows by megabytes a second under load.
func startTrace(path string) (func(), error) {
	return record("trace", path, trace.Start, trace.Stop)
}

// record creates path and starts a recorder writing to it; the returned
// function stops the recorder and closes the file.
func record(what, path string, start func(io.Writer) error, stop func()) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := start(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return func() {
		stop()
		f.Close()
	}, nil
}
