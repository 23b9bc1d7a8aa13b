package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/internal/sched"
	"github.com/gvswitch/gvs/ipfix"
	"github.com/gvswitch/gvs/port"
	"github.com/gvswitch/gvs/port/busypoll"
	"github.com/gvswitch/gvs/tap"
	"github.com/gvswitch/gvs/tap/uring"
	vswitch "github.com/gvswitch/gvs/vswitch"
	"github.com/gvswitch/gvs/vxlan"
)

// dataplane is the node's forwarding side: the flow table, the switch and
// its fixed ports (vxlan0, tun0), the I/O engine of the TAPs and the
// tuning from the configuration. It knows nothing of the control plane.
// Its methods are in this file, offload.go (offloads, queues) and
// conntrack.go (the connection table across restarts, its control
// commands).
type dataplane struct {
	cfg   *Config
	log   *slog.Logger
	table *flowtable.Table
	sw    *vswitch.Switch
	peers *vxlan.Peers
	// vx and tun0 are vxlan0 and tun0's queue, set in Daemon.setup (nil
	// before).
	vx   *vxlan.Port
	tun0 *tap.Device
	// engine is Config.IOEngine resolved on this kernel: IOEngineUring,
	// IOEngineUringAlways or IOEngineTAP.
	engine string
	// slice and sliceAlways are Config.SchedSlice and SchedSliceWhen
	// (slice 0: the threads keep the kernel's); keeper gives it (nil
	// without), sliceErr says why not (both set in Run before the control
	// socket opens).
	slice       time.Duration
	sliceAlways bool
	keeper      *sched.Keeper
	sliceErr    error
	// busy is the readers' busy polling (Config.BusyPoll; nil: off).
	busy *busypoll.Poller
	// rxBudget bounds the pod queues' receive buffers
	// (Config.RxBufferBudgetMiB; nil: no bound).
	rxBudget *port.Budget
	// exporter sends flow records (Config.IPFIX; nil: off); podNames names
	// its addresses (ipfix.go).
	exporter  *ipfix.Exporter
	ipfixLive ipfixLive // the IPFIX ConfigMap's changes (ipfix.go)
	podNames  podIndex
}

// newDataplane builds the flow table and the switch, with the I/O engine
// and tuning cfg asks for; it creates no devices.
func newDataplane(cfg *Config, log *slog.Logger) (_ *dataplane, err error) {
	dp := &dataplane{cfg: cfg, log: log, table: flowtable.New(flowtable.Config{Logger: log}), peers: new(vxlan.Peers)}
	// The rule program tracks connections in every mode (services: the
	// replies of requests the host DNATed go back through tun0).
	if err := dp.newExporter(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && dp.exporter != nil {
			dp.exporter.Close()
		}
	}()
	ct, err := cfg.newTracker(dp.exporter)
	if err != nil {
		return nil, err
	}
	trim, err := cfg.trimIdle()
	if err != nil {
		return nil, err
	}
	if dp.slice, dp.sliceAlways, err = cfg.schedSlice(); err != nil {
		return nil, err
	}
	bc, err := cfg.busyPoll()
	if err != nil {
		return nil, err
	}
	if dp.busy, err = busypoll.New(bc); err != nil {
		return nil, err
	}
	if n := cfg.rxBufferBudget(runtime.NumCPU()); n > 0 {
		if dp.rxBudget, err = port.NewBudget(n); err != nil {
			return nil, err
		}
	}
	engine, why, err := cfg.ioEngine()
	if err != nil {
		return nil, err
	}
	dp.engine = engine
	if why != nil {
		log.Info("pod TAPs use read(2) and write(2) per frame: io_uring is not usable here", "err", why)
	} else {
		log.Info("pod TAPs use the I/O engine " + engine)
	}
	dp.sw, err = vswitch.New(vswitch.Config{Table: dp.table, Logger: log,
		MaxFrame: dp.maxFrame(), NoOffload: !dp.offload(), Conntrack: ct, SweepInterval: time.Second, TrimIdle: trim,
		Budget: dp.rxBudget})
	if err != nil {
		return nil, err
	}
	return dp, nil
}

// usesUring reports whether the daemon drives pod TAPs through io_uring.
func (dp *dataplane) usesUring() bool {
	return dp.engine == IOEngineUring || dp.engine == IOEngineUringAlways
}

// ringsState is the io_uring rings the TAP queues (pods' and tun0's)
// hold now, for gvsctl show ("" without io_uring).
func (dp *dataplane) ringsState() string {
	if !dp.usesUring() {
		return ""
	}
	rx, tx := uring.LiveRings()
	return fmt.Sprintf("%d receive (a thread each), %d transmit", rx, tx)
}

// tunnelState is how vxlan0 spreads flows over its receive sockets and
// send ports (vxlan's steer_linux.go), for gvsctl show ("" without it).
func (dp *dataplane) tunnelState() string {
	if dp.vx == nil {
		return ""
	}
	steered, consecutive := dp.vx.Steering()
	n := dp.vx.ReceiveSockets()
	s := "1 receive socket"
	if n > 1 {
		s = fmt.Sprintf("%d receive sockets", n)
		if steered {
			s += ", steered by outer source port"
		} else {
			s += ", placed by the kernel's hash (steering refused)"
		}
	}
	ports := dp.vx.SourcePorts()
	if consecutive {
		return s + fmt.Sprintf("; send ports %d-%d", ports[0], ports[len(ports)-1])
	}
	return s + fmt.Sprintf("; %d send ports the kernel picked (no free block)", len(ports))
}

// tapIO is how the switch drives a TAP queue: through io_uring
// (uring.Port) when the daemon uses it, else the device itself.
func (dp *dataplane) tapIO(dev *tap.Device) vswitch.Port {
	if dp.usesUring() {
		p, err := uring.NewPortConfig(dev, uring.PortConfig{Always: dp.engine == IOEngineUringAlways, BusyPoll: dp.busy, Budget: dp.rxBudget})
		if err == nil {
			return p
		}
		dp.log.Warn("TAP queue without io_uring", "name", dev.Name(), "err", err)
	}
	dev.SetBudget(dp.rxBudget)
	return dev
}

// startSched gives the daemon's threads Config.SchedSlice, while tasks
// wait for the CPUs or always, until ctx ends.
func (dp *dataplane) startSched(ctx context.Context) {
	if dp.slice == 0 {
		dp.sliceErr = errors.New("schedSlice 0")
		return
	}
	k, err := sched.Keep(ctx, sched.Config{Slice: dp.slice, Always: dp.sliceAlways, Log: dp.log})
	if err != nil {
		dp.sliceErr = err
		dp.log.Info("threads keep the kernel's default time slice", "err", err)
		return
	}
	dp.keeper = k
	dp.log.Info("threads' scheduler time slice: " + dp.sliceState())
}

// sliceState is the threads' scheduler time slice, for gvsctl show.
func (dp *dataplane) sliceState() string {
	k := dp.keeper
	switch {
	case k == nil && dp.sliceErr != nil:
		return "kernel default (" + dp.sliceErr.Error() + ")"
	case k == nil:
		return ""
	case dp.sliceAlways:
		return dp.slice.String() + " always"
	case k.Short():
		return fmt.Sprintf("%v while %s (now: %v; %d changes)", dp.slice, k.Follows(), dp.slice, k.Switches())
	}
	return fmt.Sprintf("%v while %s (now: kernel default; %d changes)", dp.slice, k.Follows(), k.Switches())
}

// busyState is the readers' busy polling, for gvsctl show ("" when off).
func (dp *dataplane) busyState() string {
	b := dp.busy
	if b == nil {
		return ""
	}
	st := b.Stats()
	found := ""
	if st.Polls > 0 {
		found = fmt.Sprintf(" (%.0f %%)", 100*float64(st.Found)/float64(st.Polls))
	}
	return fmt.Sprintf("up to %v per wait, at most %d polling at once: %d polls, %d found frames%s, %v polling, %d times no poller free",
		b.Max(), b.Pollers(), st.Polls, st.Found, found, st.Time.Round(time.Millisecond), st.Turned)
}

// rxBudgetState is the receive-buffer budget's use, for gvsctl show (""
// without a bound).
func (dp *dataplane) rxBudgetState() string {
	b := dp.rxBudget
	if b == nil {
		return ""
	}
	return fmt.Sprintf("%.1f of %d MiB in use, %d times a queue could not grow",
		float64(b.InUse())/(1<<20), b.Total()>>20, b.Denied())
}

// ioEngineName is the I/O engine of the daemon's TAPs (Config.IOEngine as
// resolved on this kernel).
func (dp *dataplane) ioEngineName() string { return dp.engine }
