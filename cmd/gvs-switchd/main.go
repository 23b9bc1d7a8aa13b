// Command gvs-switchd is gvs's node daemon: the switch, the node agent that
// programs the OpenShift rules, the control socket for gvsctl and /metrics.
// Run it inside the node's network namespace.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/gvswitch/gvs/internal/daemon"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gvs-switchd:", err)
		os.Exit(1)
	}
}

func run() error {
	cfgPath := flag.String("config", "/etc/gvs/switchd.json", "configuration file (JSON)")
	debug := flag.Bool("debug", false, "log at debug level")
	cpuProfile := flag.String("cpuprofile", os.Getenv("GVS_CPUPROFILE"),
		"write a CPU profile to `FILE`.PID from start until exit (default $GVS_CPUPROFILE)")
	execTrace := flag.String("trace", os.Getenv("GVS_TRACE"),
		"write an execution trace (go tool trace) to `FILE`.PID from start until exit (default $GVS_TRACE)")
	nodeName := flag.String("node-name", "", "the node's name, replacing the configuration's nodeName (a DaemonSet passes its Node's)")
	nodeIP := flag.String("node-ip", "", "the node's underlay address, replacing the configuration's nodeIP")
	flag.Parse()
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if os.Geteuid() != 0 {
		return fmt.Errorf("must run as root (it creates TAP devices and moves them into pod namespaces)")
	}
	b, err := os.ReadFile(*cfgPath)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	cfg, err := daemon.DecodeConfig(b)
	if err != nil {
		return fmt.Errorf("config %s: %w", *cfgPath, err)
	}
	if *nodeName != "" {
		cfg.NodeName = *nodeName
	}
	if *nodeIP != "" {
		cfg.NodeIP = *nodeIP
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("config %s: %w", *cfgPath, err)
	}
	if n := cfg.GoProcs(runtime.GOMAXPROCS(0), os.Getenv("GOMAXPROCS") != ""); n > 0 {
		runtime.GOMAXPROCS(n)
	}
	log.Info("go processors", "gomaxprocs", runtime.GOMAXPROCS(0), "cpus", runtime.NumCPU())
	d, err := daemon.New(cfg, log)
	if err != nil {
		return err
	}
	if *cpuProfile != "" {
		stopProfile, err := startCPUProfile(fmt.Sprintf("%s.%d", *cpuProfile, os.Getpid()))
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	if *execTrace != "" {
		stopTrace, err := startTrace(fmt.Sprintf("%s.%d", *execTrace, os.Getpid()))
		if err != nil {
			return err
		}
		defer stopTrace()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = d.Run(ctx)
	if errors.Is(err, daemon.ErrHandoffFallback) {
		// The running daemon has stopped: start afresh, adopting what it
		// left, as after a restart, with the configuration this daemon
		// ran with: the control plane's subnet for it and what it filled
		// in.
		log.Warn("live upgrade failed; starting afresh", "err", err)
		if d, err = daemon.New(d.Config(), log); err != nil {
			return err
		}
		err = d.Run(ctx)
	}
	if err != nil {
		return err
	}
	if d.Superseded() && d.LingerAfterHandoff() {
		// A successor runs the node now; stay, holding nothing, until
		// told to stop (afterHandoff "wait").
		log.Info("handed over to a successor; waiting for SIGTERM")
		<-ctx.Done()
	}
	return nil
}
