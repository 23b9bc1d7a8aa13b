package daemon

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gvswitch/gvs/conntrack"
	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/ipfix"
)

// The daemon's connection tracker: the switch's ct actions use it (the
// OpenShift program tracks what goes to the node's pods, for services;
// rules added with gvsctl may use it for anything). Its table survives a
// restart: Run saves it when it ends and New loads it (conntrackFile),
// so established connections carry on through a restart or an upgrade.

// newTracker makes the tracker of the configuration's limits; with an
// exporter (Config.IPFIX) it counts connections and hands the ones that
// end to it.
func (c *Config) newTracker(exp *ipfix.Exporter) (*conntrack.Tracker, error) {
	if c.ConntrackMax < 0 || c.ConntrackZoneLimit < 0 {
		return nil, fmt.Errorf("conntrackMax %d, conntrackZoneLimit %d: want 0 (the default) or more", c.ConntrackMax, c.ConntrackZoneLimit)
	}
	cc := conntrack.Config{MaxEntries: c.ConntrackMax, DefaultZoneLimit: c.ConntrackZoneLimit}
	if exp != nil {
		cc.Accounting, cc.OnEnd = true, exp.OnEnd
	}
	return conntrack.New(cc)
}

// stateDir is the daemon's state directory: Config.StateDir, or with CNI
// /var/lib/gvs/NODENAME; "" when it keeps no state.
func (dp *dataplane) stateDir() string {
	if dp.cfg.StateDir != "" {
		return dp.cfg.StateDir
	}
	if dp.cfg.CNISocket == "" || dp.cfg.CNISocket == "off" || dp.cfg.NodeName == "" {
		return ""
	}
	return filepath.Join("/var/lib/gvs", dp.cfg.NodeName)
}

// conntrackFile is where the tracker's table is saved between runs ("":
// nowhere).
func (dp *dataplane) conntrackFile() string {
	if dir := dp.stateDir(); dir != "" {
		return filepath.Join(dir, "conntrack.table")
	}
	return ""
}

// loadConntrack loads the table the last daemon saved, once, before the
// switch forwards anything, and removes the file (a table is good for one
// start: an older one would bring back connections that ended since). A
// file that fails its checks is refused whole and the daemon starts with
// an empty table.
func (dp *dataplane) loadConntrack() {
	name := dp.conntrackFile()
	if name == "" {
		return
	}
	f, err := os.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		dp.log.Warn("conntrack: saved table not read; starting empty", "file", name, "err", err)
		return
	}
	defer func() {
		f.Close()
		if err := os.Remove(name); err != nil {
			dp.log.Warn("conntrack: saved table not removed", "file", name, "err", err)
		}
	}()
	res, err := dp.sw.Conntrack().Load(f)
	if err != nil {
		dp.log.Warn("conntrack: saved table refused; starting empty", "file", name, "err", err)
		return
	}
	dp.log.Info("conntrack: connections taken over from the last run", "loaded", res.Loaded, "skipped", res.Skipped)
}

// saveConntrack writes the tracker's table for the next daemon (atomically:
// a temporary file renamed into place).
func (dp *dataplane) saveConntrack() {
	name := dp.conntrackFile()
	if name == "" {
		return
	}
	if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		dp.log.Warn("conntrack: table not saved", "err", err)
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(name), ".conntrack-*")
	if err != nil {
		dp.log.Warn("conntrack: table not saved", "err", err)
		return
	}
	n, err := dp.sw.Conntrack().Save(tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), name)
	}
	if err != nil {
		os.Remove(tmp.Name())
		dp.log.Warn("conntrack: table not saved", "err", err)
		return
	}
	dp.log.Info("conntrack: table saved for the next run", "connections", n, "file", name)
}

// dumpConntrack answers dump-conntrack: the connections, in
// ovs-appctl dpctl/dump-conntrack's format, of every zone or of "zone=N".
func (dp *dataplane) dumpConntrack(args string) (control.ConntrackDump, error) {
	var out control.ConntrackDump
	zone, all, err := parseZoneArg(args)
	if err != nil {
		return out, err
	}
	t := dp.sw.Conntrack()
	for e := range t.All(t.Now()) {
		if all || e.Zone == zone {
			out.Entries = append(out.Entries, string(e.AppendText(nil, true)))
		}
	}
	return out, nil
}

// parseZoneArg reads "" (all zones) or "zone=N".
func parseZoneArg(args string) (zone uint16, all bool, err error) {
	args = strings.TrimSpace(args)
	if args == "" {
		return 0, true, nil
	}
	v, ok := strings.CutPrefix(args, "zone=")
	n, perr := strconv.ParseUint(v, 0, 16)
	if !ok || perr != nil {
		return 0, false, fmt.Errorf("want zone=N (0..65535), not %q", args)
	}
	return uint16(n), false, nil
}

// flushConntrack answers flush-conntrack: every connection, those of
// "zone=N", or the one with a tuple in ovs-appctl dpctl/flush-conntrack's
// syntax ("[zone=N,]ct_nw_src=A,ct_nw_dst=B,ct_nw_proto=P[,ct_tp_src=S,ct_tp_dst=D]",
// for ICMP icmp_type, icmp_code and icmp_id).
func (dp *dataplane) flushConntrack(args string) (control.CountResult, error) {
	t := dp.sw.Conntrack()
	items := strings.FieldsFunc(args, func(r rune) bool { return r == ',' || r == ' ' })
	if len(items) == 0 {
		return control.CountResult{Count: t.Flush()}, nil
	}
	var zone uint16
	var tup conntrack.Tuple
	var haveTuple, haveProto bool
	for _, it := range items {
		k, v, ok := strings.Cut(it, "=")
		if !ok {
			return control.CountResult{}, fmt.Errorf("flush-conntrack: %q: want key=value", it)
		}
		switch k {
		case "zone":
			n, err := strconv.ParseUint(v, 0, 16)
			if err != nil {
				return control.CountResult{}, fmt.Errorf("flush-conntrack: zone %q", v)
			}
			zone = uint16(n)
			continue
		case "ct_nw_src", "ct_nw_dst":
			a, err := netip.ParseAddr(v)
			if err != nil || !a.Is4() {
				return control.CountResult{}, fmt.Errorf("flush-conntrack: %s=%q: want an IPv4 address", k, v)
			}
			if k == "ct_nw_src" {
				tup.Src = a.As4()
			} else {
				tup.Dst = a.As4()
			}
		case "ct_nw_proto", "ct_tp_src", "ct_tp_dst", "icmp_type", "icmp_code", "icmp_id":
			max := uint64(65535)
			if k == "ct_nw_proto" || k == "icmp_type" || k == "icmp_code" {
				max = 255
			}
			n, err := strconv.ParseUint(v, 0, 16)
			if err != nil || n > max {
				return control.CountResult{}, fmt.Errorf("flush-conntrack: %s=%q: want 0..%d", k, v, max)
			}
			switch k {
			case "ct_nw_proto":
				tup.Proto, haveProto = uint8(n), true
			case "ct_tp_src", "icmp_type":
				tup.SrcPort = uint16(n)
			case "ct_tp_dst", "icmp_code":
				tup.DstPort = uint16(n)
			case "icmp_id":
				tup.ID = uint16(n)
			}
		default:
			return control.CountResult{}, fmt.Errorf("flush-conntrack: unknown field %q", k)
		}
		haveTuple = true
	}
	if !haveTuple {
		return control.CountResult{Count: t.FlushZone(zone)}, nil
	}
	if !haveProto || tup.Src == ([4]byte{}) || tup.Dst == ([4]byte{}) {
		return control.CountResult{}, errors.New("flush-conntrack: a tuple needs ct_nw_src, ct_nw_dst and ct_nw_proto")
	}
	if err := t.FlushTuple(zone, tup); err != nil {
		return control.CountResult{}, fmt.Errorf("flush-conntrack: %w", err)
	}
	return control.CountResult{Count: 1}, nil
}

// conntrackStats answers conntrack-stats.
func (dp *dataplane) conntrackStats() control.ConntrackStats {
	s := dp.sw.Conntrack().Stats()
	out := control.ConntrackStats{Entries: s.Entries, Max: s.Max, Created: s.Created, Expired: s.Expired,
		Evicted: s.Evicted, Flushed: s.Flushed, Invalid: s.Invalid(), ByClass: map[string]int64{}, Reasons: map[string]uint64{}}
	for c := conntrack.Class(0); c < conntrack.NumClasses; c++ {
		if n := s.ByClass[c]; n != 0 {
			out.ByClass[c.String()] = n
		}
	}
	for r := conntrack.ReasonNone + 1; r < conntrack.NumReasons; r++ {
		if n := s.Reasons[r]; n != 0 {
			out.Reasons[r.String()] = n
		}
	}
	return out
}

// ctCollector exports the tracker's counters at scrape time.
type ctCollector struct {
	d                                                *dataplane
	entries, max, created, expired, evicted, flushed *prometheus.Desc
	invalid                                          *prometheus.Desc
}

func newCTCollector(d *dataplane) *ctCollector {
	return &ctCollector{
		d: d,
		entries: prometheus.NewDesc("gvs_conntrack_entries", "Tracked connections by protocol and state.",
			[]string{"protocol", "state"}, nil),
		max:     prometheus.NewDesc("gvs_conntrack_entries_limit", "The tracker's entry limit.", nil, nil),
		created: prometheus.NewDesc("gvs_conntrack_created_total", "Connections committed.", nil, nil),
		expired: prometheus.NewDesc("gvs_conntrack_expired_total", "Connections removed because they timed out.", nil, nil),
		evicted: prometheus.NewDesc("gvs_conntrack_evicted_total",
			"Connections dropped early to make room (unreplied or closing ones, as Linux's early drop).", nil, nil),
		flushed: prometheus.NewDesc("gvs_conntrack_flushed_total", "Connections removed by flush-conntrack.", nil, nil),
		invalid: prometheus.NewDesc("gvs_conntrack_invalid_total",
			"Packets the tracker marked invalid (+inv) or whose commit it refused, by reason.", []string{"reason"}, nil),
	}
}

func (c *ctCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.entries, c.max, c.created, c.expired, c.evicted, c.flushed, c.invalid} {
		ch <- d
	}
}

func (c *ctCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.d.sw.Conntrack()
	if t == nil {
		return
	}
	s := t.Stats()
	for cl := conntrack.Class(0); cl < conntrack.NumClasses; cl++ {
		proto, state, _ := strings.Cut(cl.String(), "_")
		ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(s.ByClass[cl]), proto, state)
	}
	ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, float64(s.Max))
	ch <- prometheus.MustNewConstMetric(c.created, prometheus.CounterValue, float64(s.Created))
	ch <- prometheus.MustNewConstMetric(c.expired, prometheus.CounterValue, float64(s.Expired))
	ch <- prometheus.MustNewConstMetric(c.evicted, prometheus.CounterValue, float64(s.Evicted))
	ch <- prometheus.MustNewConstMetric(c.flushed, prometheus.CounterValue, float64(s.Flushed))
	for r := conntrack.ReasonNone + 1; r < conntrack.NumReasons; r++ {
		ch <- prometheus.MustNewConstMetric(c.invalid, prometheus.CounterValue, float64(s.Reasons[r]), r.String())
	}
}
