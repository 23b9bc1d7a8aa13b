package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gvswitch/gvs/conntrack"
	"github.com/gvswitch/gvs/internal/daemon/kubesource"
	"github.com/gvswitch/gvs/internal/daemon/pods"
	"github.com/gvswitch/gvs/ipfix"
	"github.com/gvswitch/gvs/sdn"
)

// Flow export (Config.IPFIX; docs/operations.md, "Flow export"): the
// tracker counts each connection and hands the ones that end to the
// exporter (package ipfix), which also walks it for idle and long-lived
// ones and sends IPFIX records to the collectors from the node's
// namespace. The pods' names and VNIDs come from this node's pods.

// IPFIXConfig is Config.IPFIX: where and how gvs-switchd exports flow
// records. Durations are Go durations; "" takes the default.
type IPFIXConfig struct {
	// Collectors are the collectors' "IPv4:port" (UDP; IANA's IPFIX port
	// is 4739). At least one, unless ConfigMap names them.
	Collectors []string `json:"collectors"`
	// ActiveTimeout: a connection that lasts is reported every
	// ActiveTimeout (default 60s; "0" never while it lasts).
	ActiveTimeout string `json:"activeTimeout,omitempty"`
	// IdleTimeout: a connection without packets for IdleTimeout is
	// reported then (default 15s; "0" only when it ends).
	IdleTimeout string `json:"idleTimeout,omitempty"`
	// TemplateRefresh is how often the templates are sent again (default
	// 60s, at least 1s).
	TemplateRefresh string `json:"templateRefresh,omitempty"`
	// ObservationDomain is the messages' observation domain ID (0: none
	// in particular; give each node its own to tell them apart).
	ObservationDomain uint32 `json:"observationDomain,omitempty"`
	// Enterprise is the Private Enterprise Number of gvs's own elements
	// (0: 32473, IANA's documentation number, a placeholder).
	Enterprise uint32 `json:"enterprise,omitempty"`
	// QueueLength bounds the ended connections waiting to be sent
	// (default 4096; more are dropped and counted).
	QueueLength int `json:"queueLength,omitempty"`
	// MaxRecordsPerSecond bounds the records sent a second (default
	// 20000).
	MaxRecordsPerSecond int `json:"maxRecordsPerSecond,omitempty"`
	// ConfigMap, "namespace/name" (Kubernetes mode only), is a ConfigMap
	// whose key "ipfix.json" holds this object without configMap and
	// queueLength; gvs-switchd follows it and applies each change while
	// it runs (ipfixLive). While it is absent the fields here apply.
	ConfigMap string `json:"configMap,omitempty"`
}

// IPFIXConfigMapKey is the key of an IPFIX ConfigMap (IPFIXConfig.ConfigMap)
// that holds its configuration, a JSON IPFIXConfig.
const IPFIXConfigMapKey = "ipfix.json"

// maxCollectors bounds the collectors: every message goes to each.
const maxCollectors = 16

// maxFlowTimeout bounds the active and idle timeouts: a day.
const maxFlowTimeout = 24 * time.Hour

// flowTimeout parses one of IPFIXConfig's timeouts: "" is 0 (the
// default), "0" is -1 (off).
func flowTimeout(name, s string, min time.Duration) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err == nil && d == 0 && name != "templateRefresh" {
		return -1, nil
	}
	if err != nil || d < min || d > maxFlowTimeout {
		return 0, fmt.Errorf("ipfix.%s %q: want a duration from %v to %v, such as 30s", name, s, min, maxFlowTimeout)
	}
	return d, nil
}

// ipfixConfig is Config.IPFIX as the exporter's configuration (nil: no
// export); it checks every field, without side effects.
func (c *Config) ipfixConfig() (*ipfix.Config, error) {
	x := c.IPFIX
	if x == nil {
		return nil, nil
	}
	if x.ConfigMap == "" && len(x.Collectors) == 0 {
		return nil, errors.New("ipfix: no collectors (name some, or a configMap that names them)")
	}
	if x.ConfigMap != "" {
		if !c.FromKubernetes() {
			return nil, errors.New("ipfix.configMap: only in Kubernetes mode (kubeconfig)")
		}
		if _, _, err := x.configMapName(); err != nil {
			return nil, err
		}
	}
	return x.exporterConfig()
}

// configMapName splits ConfigMap into its namespace and name.
func (x *IPFIXConfig) configMapName() (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(x.ConfigMap, "/")
	if !ok || validation.IsDNS1123Label(namespace) != nil || validation.IsDNS1123Subdomain(name) != nil {
		return "", "", fmt.Errorf("ipfix.configMap %q: want namespace/name, such as gvs/gvs-ipfix", x.ConfigMap)
	}
	return namespace, name, nil
}

// exporterConfig is x as the exporter's configuration; it checks every
// field, without side effects.
func (x *IPFIXConfig) exporterConfig() (*ipfix.Config, error) {
	if len(x.Collectors) > maxCollectors {
		return nil, fmt.Errorf("ipfix: %d collectors, at most %d", len(x.Collectors), maxCollectors)
	}
	ic := &ipfix.Config{Collectors: slices.Clone(x.Collectors), Domain: x.ObservationDomain, Enterprise: x.Enterprise,
		QueueLen: x.QueueLength, MaxRate: x.MaxRecordsPerSecond}
	var err error
	if ic.ActiveTimeout, err = flowTimeout("activeTimeout", x.ActiveTimeout, time.Second); err != nil {
		return nil, err
	}
	if ic.IdleTimeout, err = flowTimeout("idleTimeout", x.IdleTimeout, time.Second); err != nil {
		return nil, err
	}
	if ic.TemplateRefresh, err = flowTimeout("templateRefresh", x.TemplateRefresh, time.Second); err != nil {
		return nil, err
	}
	if err := ic.Validate(); err != nil {
		return nil, fmt.Errorf("ipfix: %w", err)
	}
	return ic, nil
}

// ipfixFromConfigMap reads the data of the IPFIX ConfigMap (nil: there is
// none) into the exporter's configuration: base's (the file's) without
// it, else its key IPFIXConfigMapKey, a JSON IPFIXConfig with no
// configMap or queueLength (the queue is made once) and no other key.
// A collector in reserved (the cluster and service networks) is refused:
// a pod's address goes to another project's pod once the pod is gone, and
// that pod would then receive every connection of the node.
func ipfixFromConfigMap(base *IPFIXConfig, data map[string]string, reserved []netip.Prefix) (*ipfix.Config, error) {
	if data == nil {
		ic, err := base.exporterConfig()
		if err != nil {
			return nil, err
		}
		return ic, checkCollectors(ic.Collectors, reserved)
	}
	for k := range data {
		if k != IPFIXConfigMapKey {
			return nil, fmt.Errorf("key %q: the only key is %q", k, IPFIXConfigMapKey)
		}
	}
	raw, ok := data[IPFIXConfigMapKey]
	if !ok {
		return nil, fmt.Errorf("no key %q", IPFIXConfigMapKey)
	}
	var x IPFIXConfig
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&x); err != nil {
		return nil, fmt.Errorf("%s: %w", IPFIXConfigMapKey, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: more than one JSON object", IPFIXConfigMapKey)
	}
	if x.ConfigMap != "" || x.QueueLength != 0 {
		return nil, fmt.Errorf("%s: configMap and queueLength are set in the daemon's file only", IPFIXConfigMapKey)
	}
	ic, err := x.exporterConfig()
	if err != nil {
		return nil, err
	}
	return ic, checkCollectors(ic.Collectors, reserved)
}

// checkCollectors refuses a collector in reserved (the cluster and service
// networks): a pod's address goes to another project's pod once the pod
// is gone, and that pod would then receive every connection of the node.
// The collectors passed Validate.
func checkCollectors(collectors []string, reserved []netip.Prefix) error {
	for _, c := range collectors {
		a := netip.MustParseAddrPort(c).Addr()
		for _, p := range reserved {
			if p.Contains(a) {
				return fmt.Errorf("ipfix: collector %s is in the pods' or services' network %v: a collector must not be a pod", c, p)
			}
		}
	}
	return nil
}

// reservedNetworks are the node's cluster and service networks, where no
// collector may be (checkCollectors).
func reservedNetworks(n sdn.NodeConfig) []netip.Prefix {
	return append(slices.Clone(n.ClusterNetworks), n.ServiceNetwork)
}

// checkIPFIXCollectors refuses the file's collectors if one is a pod's or
// a service's address on node n (Run's, after setup: the networks are
// known then in every mode).
func (dp *dataplane) checkIPFIXCollectors(n sdn.NodeConfig) error {
	if dp.cfg.IPFIX == nil {
		return nil
	}
	return checkCollectors(dp.cfg.IPFIX.Collectors, reservedNetworks(n))
}

// ipfixLive counts the IPFIX ConfigMap's changes (metrics).
type ipfixLive struct {
	updates, errors atomic.Uint64
}

// followIPFIXConfigMap applies the IPFIX ConfigMap (IPFIXConfig.ConfigMap)
// to the running exporter each time it changes; a ConfigMap it refuses
// leaves the configuration as it was, is logged and counted. It returns
// once the watch is started (Run's, after setup: node n's networks are
// known).
func (dp *dataplane) followIPFIXConfigMap(ctx context.Context, n sdn.NodeConfig) error {
	x := dp.cfg.IPFIX
	if dp.exporter == nil || x == nil || x.ConfigMap == "" {
		return nil
	}
	ns, name, err := x.configMapName()
	if err != nil {
		return err
	}
	rc, err := dp.cfg.restConfig()
	if err != nil {
		return err
	}
	reserved := reservedNetworks(n)
	log, live := dp.log.With("configMap", x.ConfigMap), &dp.ipfixLive
	return kubesource.FollowConfigMap(ctx, rc, ns, name, func(data map[string]string) {
		ic, err := ipfixFromConfigMap(x, data, reserved)
		if err == nil {
			err = dp.exporter.Update(*ic)
		}
		if err != nil {
			live.errors.Add(1)
			log.Error("ipfix: ConfigMap refused; the previous configuration stays", "err", err)
			return
		}
		live.updates.Add(1)
		log.Info("ipfix: configuration applied", "fromConfigMap", data != nil, "collectors", ic.Collectors)
	})
}

// podIndex names the addresses of this node's pods for the exporter,
// from a copy of the pod list at most a second old.
type podIndex struct {
	mu   sync.Mutex
	list func() []pods.Pod // setList
	at   time.Time
	byIP map[[4]byte]ipfix.Endpoint
}

// setList gives the index its source of pods.
func (x *podIndex) setList(list func() []pods.Pod) {
	x.mu.Lock()
	x.list, x.byIP = list, nil
	x.mu.Unlock()
}

// resolve is the exporter's ipfix.Resolver.
func (x *podIndex) resolve(a [4]byte) (ipfix.Endpoint, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.list == nil {
		return ipfix.Endpoint{}, false
	}
	now := time.Now()
	if x.byIP == nil || now.Sub(x.at) >= time.Second {
		m := make(map[[4]byte]ipfix.Endpoint, len(x.byIP))
		for _, p := range x.list() {
			if p.IP.Is4() {
				m[p.IP.As4()] = ipfix.Endpoint{Pod: p.Project + "/" + p.Name, VNID: p.VNID}
			}
		}
		x.byIP, x.at = m, now
	}
	ep, ok := x.byIP[a]
	return ep, ok
}

// newExporter makes the exporter of Config.IPFIX (nil without).
func (dp *dataplane) newExporter() error {
	ic, err := dp.cfg.ipfixConfig()
	if ic == nil || err != nil {
		return err
	}
	ic.Resolve = dp.podNames.resolve
	ic.Logger = dp.log
	dp.exporter, err = ipfix.New(*ic)
	return err
}

// runExporter exports until ctx is done (a goroutine of Run).
func (dp *dataplane) runExporter(ctx context.Context, t *conntrack.Tracker) {
	dp.exporter.Run(ctx, t)
	dp.exporter.Close()
}

// ipfixCollector exports the exporter's counters at scrape time.
type ipfixCollector struct {
	e                                  *ipfix.Exporter
	live                               *ipfixLive
	records, dropped, messages, errors *prometheus.Desc
	collectors, updates, configErrors  *prometheus.Desc
}

func newIPFIXCollector(e *ipfix.Exporter, live *ipfixLive) *ipfixCollector {
	return &ipfixCollector{
		e:            e,
		live:         live,
		collectors:   prometheus.NewDesc("gvs_ipfix_collectors", "Collectors the IPFIX exporter sends to now.", nil, nil),
		updates:      prometheus.NewDesc("gvs_ipfix_config_updates_total", "IPFIX configurations applied from the ConfigMap (or the file's, when it was deleted).", nil, nil),
		configErrors: prometheus.NewDesc("gvs_ipfix_config_errors_total", "IPFIX ConfigMaps refused (the previous configuration stayed).", nil, nil),
		records:      prometheus.NewDesc("gvs_ipfix_records_sent_total", "IPFIX data records sent (each to every collector).", nil, nil),
		dropped:      prometheus.NewDesc("gvs_ipfix_records_dropped_total", "IPFIX records of ended connections dropped because the export queue was full.", nil, nil),
		messages:     prometheus.NewDesc("gvs_ipfix_messages_sent_total", "IPFIX messages sent, counted once per collector.", nil, nil),
		errors:       prometheus.NewDesc("gvs_ipfix_send_errors_total", "IPFIX messages a collector's socket refused.", nil, nil),
	}
}

func (c *ipfixCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.records, c.dropped, c.messages, c.errors, c.collectors, c.updates, c.configErrors} {
		ch <- d
	}
}

func (c *ipfixCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.e.Stats()
	ch <- prometheus.MustNewConstMetric(c.records, prometheus.CounterValue, float64(s.Records))
	ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(s.Dropped))
	ch <- prometheus.MustNewConstMetric(c.messages, prometheus.CounterValue, float64(s.Messages))
	ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(s.SendErrors))
	ch <- prometheus.MustNewConstMetric(c.collectors, prometheus.GaugeValue, float64(s.Collectors))
	ch <- prometheus.MustNewConstMetric(c.updates, prometheus.CounterValue, float64(c.live.updates.Load()))
	ch <- prometheus.MustNewConstMetric(c.configErrors, prometheus.CounterValue, float64(c.live.errors.Load()))
}
