package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/trace"

	"github.com/gvswitch/gvs/bench/floor"
)

// floorCmd is `gvs-bench floor`: the floor dataplane of one node (package
// bench/floor), run inside the node's network namespace until interrupted.
func floorCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("floor", flag.ContinueOnError)
	path := fs.String("config", "", "the node's floor.Config, JSON")
	ready := fs.String("ready", "", "file to create once the pods are attached")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" {
		return errors.New("floor needs -config FILE")
	}
	b, err := os.ReadFile(*path)
	if err != nil {
		return err
	}
	var cfg floor.Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		return err
	}
	if _, set := os.LookupEnv("GOMAXPROCS"); !set { // as gvs-switchd's goMaxProcs default
		n := runtime.GOMAXPROCS(0)
		runtime.GOMAXPROCS(n + min(n, 8))
	}
	if path := os.Getenv("GVS_TRACE"); path != "" {
		// As gvs-switchd's -trace: an execution trace to FILE.PID, so that
		// the two dataplanes' scheduling can be compared.
		stop, err := startTrace(fmt.Sprintf("%s.%d", path, os.Getpid()))
		if err != nil {
			return err
		}
		defer stop()
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	f, err := floor.Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer f.Close()
	if *ready != "" {
		if err := os.WriteFile(*ready, nil, 0o644); err != nil {
			return err
		}
	}
	log.Info("floor: forwarding", "pods", len(cfg.Pods), "peers", len(cfg.Peers))
	<-ctx.Done()
	return nil
}

// startTrace starts a Go execution trace written to path; the returned
// function stops it and closes the file.
func startTrace(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("trace: %w", err)
	}
	return func() {
		trace.Stop()
		f.Close()
	}, nil
}
