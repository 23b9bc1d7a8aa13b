// Package cniplugin is the CNI side of gvs: the wire format between the
// gvs-cni shim and gvs-switchd, the network configuration parser, the
// daemon-side Server that answers ADD, DEL, CHECK, STATUS and GC, the IPAM
// with one file per lease, and the pool of pre-created TAPs.
//
// The shim (cmd/gvs-cni) is stateless: it sends one Request per call over a
// unix socket and prints the Response's result or error. Everything with
// state lives in the daemon.
package cniplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// DefaultSocket is where gvs-switchd listens for CNI requests when the
// network configuration has no "socket" key.
const DefaultSocket = "/run/gvs/cni.sock"

// Plugin-specific error codes (the CNI spec reserves 100 and up for plugins).
const (
	// ErrCodeSubnetExhausted: the node subnet has no free address.
	ErrCodeSubnetExhausted = 100
	// ErrCodeInterfaceExists: the container already has this interface.
	ErrCodeInterfaceExists = 101
	// ErrCodeCheckFailed: CHECK found the attachment incomplete.
	ErrCodeCheckFailed = 102
)

// Request is one CNI call as gvs-cni forwards it: the CNI_* environment
// and the network configuration bytes from stdin.
type Request struct {
	Command     string `json:"command"`
	ContainerID string `json:"containerID,omitempty"`
	Netns       string `json:"netns,omitempty"`
	IfName      string `json:"ifName,omitempty"`
	Args        string `json:"args,omitempty"`
	Path        string `json:"path,omitempty"`
	// Config is the network configuration as the runtime gave it.
	Config json.RawMessage `json:"config"`
}

// Response is the daemon's answer: Result (a 1.1.0 result, ADD only) or
// Error.
type Response struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *types.Error    `json:"error,omitempty"`
}

// ErrUnreachable means the daemon's socket could not be reached; the shim
// answers code 11 (try again later), or 50 for STATUS.
var ErrUnreachable = errors.New("cniplugin: gvs-switchd not reachable")

// Call sends req to the daemon at socket and returns its response. A
// failure to connect wraps ErrUnreachable.
func Call(ctx context.Context, socket string, req *Request) (*Response, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %w", ErrUnreachable, socket, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return nil, fmt.Errorf("cniplugin: send to %s: %w", socket, err)
	}
	var resp Response
	if err := json.NewDecoder(c).Decode(&resp); err != nil {
		return nil, fmt.Errorf("cniplugin: read answer from %s: %w", socket, err)
	}
	return &resp, nil
}

// DefaultTimeout is how long the shim waits for the daemon's answer.
const DefaultTimeout = 60 * time.Second

// Refuse answers a connection the daemon will not serve (its process may
// not use the socket) with err as a CNI error (code 999: the caller's
// environment is the problem, not the pod).
func Refuse(c net.Conn, err error) {
	_ = json.NewEncoder(c).Encode(&Response{Error: types.NewError(types.ErrUnknown, "gvs-switchd refused the connection", err.Error())})
}
