package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"time"

	"github.com/gvswitch/gvs/bench/gen"
)

// connTool runs conn-server or conn-rate (bench/gen's short-connection
// generator).
func connTool(ctx context.Context, cmd string, args []string) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	listen := fs.String("l", ":5301", "listen address (conn-server)")
	addr := fs.String("c", "", "server host:port (conn-rate)")
	dur := fs.Duration("t", 5*time.Second, "how long to open connections (conn-rate)")
	workers := fs.Int("workers", 4, "connections opened at a time (conn-rate)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cmd == "conn-server" {
		l, err := net.Listen("tcp", *listen)
		if err != nil {
			return err
		}
		return gen.ConnServe(ctx, l)
	}
	if *addr == "" {
		return errors.New("conn-rate needs -c host:port")
	}
	r, err := gen.ConnRate(ctx, *addr, *dur, *workers)
	if err != nil {
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}
