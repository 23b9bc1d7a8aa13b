package why

import (
	"context"

	"github.com/gvswitch/gvs/internal/control"
)

// Ports reads node's switch ports and their counters through its trace
// endpoint (the daemon's "dump-ports", read-only): gvs-master's console
// shows them as the pods' live traffic.
func (r *Remote) Ports(ctx context.Context, node string) ([]control.Port, error) {
	var res []control.Port
	err := r.call(ctx, node, control.Request{Command: "dump-ports"}, &res)
	return res, err
}
