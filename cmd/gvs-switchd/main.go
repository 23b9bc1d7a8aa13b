// Command gvs-switchd is gvs's node daemon: the switch, the node agent that
// programs the OpenShift rules, the control socket for gvsctl and /metrics.
// Run it inside the node's network namespace.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
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
	flag.Parse()
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if os.Geteuid() != 0 {
		return fmt.Errorf("must run as root (it creates TAP devices and moves them into pod namespaces)")
	}
	cfg, err := daemon.LoadConfig(*cfgPath)
	if err != nil {
		return err
	}
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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return d.Run(ctx)
}
