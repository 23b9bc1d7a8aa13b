package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"strings"
	"time"
)

// registryProbe is what a tenant pod can try against the registry without
// credentials: etcd's HTTP API in plain text, and TLS without a client
// certificate. It prints one line per attempt and fails if either got an
// answer from etcd (the demo's "tenant pod → registry" line).
func registryProbe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("registry-probe", flag.ContinueOnError)
	addr := fs.String("c", "", "etcd client address host:port")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *addr == "" {
		return errors.New("registry-probe needs -c host:port")
	}
	// The request that listed every key on an open registry.
	const req = "POST /v3/kv/range HTTP/1.1\r\nHost: etcd\r\nContent-Type: application/json\r\nContent-Length: 33\r\n\r\n" +
		`{"key":"L2d2cy8=","range_end":"AA=="}`
	attempts := []struct {
		what string
		dial func() (net.Conn, error)
	}{
		{"plain HTTP", func() (net.Conn, error) {
			d := net.Dialer{Timeout: 3 * time.Second}
			return d.DialContext(ctx, "tcp", *addr)
		}},
		{"TLS without a client certificate", func() (net.Conn, error) {
			d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 3 * time.Second},
				Config: &tls.Config{InsecureSkipVerify: true}} // a stranger trusts anything; the server must not
			return d.DialContext(ctx, "tcp", *addr)
		}},
	}
	var leaked []string
	for _, a := range attempts {
		answer, ok := tryRegistry(a.dial, req)
		verdict := "refused"
		if ok {
			verdict = "ANSWERED"
			leaked = append(leaked, a.what)
		}
		fmt.Printf("%s: %s (%s)\n", a.what, verdict, answer)
	}
	if len(leaked) > 0 {
		return fmt.Errorf("the registry answered a request without credentials: %s", strings.Join(leaked, ", "))
	}
	return nil
}

// tryRegistry sends req and reports the first line of the answer, and
// whether etcd answered it (HTTP 200).
func tryRegistry(dial func() (net.Conn, error), req string) (string, bool) {
	c, err := dial()
	if err != nil {
		return err.Error(), false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		return err.Error(), false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err.Error(), false
	}
	line = strings.TrimSpace(line)
	return line, strings.HasPrefix(line, "HTTP/1.1 200")
}
