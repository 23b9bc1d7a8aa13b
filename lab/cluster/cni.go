package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/gvswitch/gvs/netconf"
)

// DebianCNIDir is where Debian's containernetworking-plugins puts the
// reference plugins (portmap, tuning, ...).
const DebianCNIDir = "/usr/lib/cni"

// CNISocket is node i's CNI socket (Spec.CNI).
func (c *Cluster) CNISocket(i int) string {
	return filepath.Join(c.Lab.StateDir(), c.Nodes[i].Name+"-cni.sock")
}

// CNIStateDir is node i's daemon state directory (leases under ipam/).
func (c *Cluster) CNIStateDir(i int) string {
	return filepath.Join(c.Lab.StateDir(), c.Nodes[i].Name+"-state")
}

// CNIConfList returns a network configuration list for node i: "gvs"
// followed by the given plugin configurations (e.g. portmap, tuning).
func (c *Cluster) CNIConfList(i int, version string, chained ...map[string]any) (*libcni.NetworkConfigList, error) {
	plugins := []map[string]any{{"type": "gvs", "socket": c.CNISocket(i)}}
	plugins = append(plugins, chained...)
	b, err := json.Marshal(map[string]any{"cniVersion": version, "name": "gvs-pods", "plugins": plugins})
	if err != nil {
		return nil, err
	}
	return libcni.ConfListFromBytes(b)
}

// CNIBinDir is the cluster's CNI plugin directory: it holds "gvs", a
// link to BinDir/gvs-cni (a plugin's file name is its network type).
func (c *Cluster) CNIBinDir() string { return filepath.Join(c.Lab.StateDir(), "cni-bin") }

func (c *Cluster) prepareCNI() error {
	dir := c.CNIBinDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	exe, err := filepath.Abs(filepath.Join(c.Spec.BinDir, "gvs-cni"))
	if err != nil {
		return err
	}
	if _, err := os.Stat(exe); err != nil {
		return fmt.Errorf("cluster: %w (run make build)", err)
	}
	_ = os.Remove(filepath.Join(dir, "gvs"))
	return os.Symlink(exe, filepath.Join(dir, "gvs"))
}

// CNI returns a libcni runtime whose CNI_PATH is CNIBinDir then Debian's
// plugin directory, caching results under the lab's state directory. It is
// safe for concurrent use: its plugin executor is set here, not lazily by
// the first call (libcni's ensureExec, a data race when two goroutines
// start plugins through one CNIConfig).
func (c *Cluster) CNI() *libcni.CNIConfig {
	exec := &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}
	return libcni.NewCNIConfigWithCacheDir([]string{c.CNIBinDir(), DebianCNIDir}, filepath.Join(c.Lab.StateDir(), "cni-cache"), exec)
}

// InNode runs fn in node i's network namespace, as a runtime on the node
// does: plugins that fn executes (libcni) start there too.
func (c *Cluster) InNode(i int, fn func() error) error {
	return netconf.Do(netconf.NsPath(c.Nodes[i].NS), fn)
}

// RuntimeConf is the runtime configuration of a pod's attachment.
func RuntimeConf(containerID, nsPath, ifName, project, pod string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: containerID, NetNS: nsPath, IfName: ifName,
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", project}, {"K8S_POD_NAME", pod}}}
}

// ContainerID is the container ID the cluster gives a pod.
func ContainerID(p Pod) string { return "ctr-" + p.Name }

// NodeCNIDir is where node i's daemon installs the CNI plugin (bin/) and
// its network configuration (net.d/) in Kubernetes mode, as the DaemonSet
// does on a host's /opt/cni/bin and /etc/cni/net.d.
func (c *Cluster) NodeCNIDir(i int) string {
	return filepath.Join(c.Lab.StateDir(), c.Nodes[i].Name+"-cni")
}

// nodeCNI is what a container runtime on node i uses: in Kubernetes mode
// the plugin and configuration the daemon installed (deploy/gvs-node.yaml's
// cniBinDir and cniConfDir); otherwise the cluster's plugin directory and a
// plain "gvs" list.
func (c *Cluster) nodeCNI(i int) (*libcni.NetworkConfigList, *libcni.CNIConfig, error) {
	if c.Spec.ControlPlane != ControlPlaneKube {
		list, err := c.CNIConfList(i, "1.1.0")
		return list, c.CNI(), err
	}
	dir := c.NodeCNIDir(i)
	list, err := libcni.LoadConfList(filepath.Join(dir, "net.d"), "gvs")
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: the configuration %s installed: %w", c.Nodes[i].Name, err)
	}
	exec := &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}
	return list, libcni.NewCNIConfigWithCacheDir([]string{filepath.Join(dir, "bin"), DebianCNIDir}, filepath.Join(c.Lab.StateDir(), "cni-cache"), exec), nil
}

// attachPodsCNI attaches every pod with a CNI ADD on its node (nodeCNI),
// and records the address the daemon leased.
func (c *Cluster) attachPodsCNI(ctx context.Context) error {
	if err := c.prepareCNI(); err != nil {
		return err
	}
	for i := range c.Nodes {
		if c.Spec.dataplane(i) != DataplaneGVS {
			continue
		}
		n := &c.Nodes[i]
		list, cni, err := c.nodeCNI(i)
		if err != nil {
			return err
		}
		for j := range n.Pods {
			p := &n.Pods[j]
			var res types.Result
			err := c.InNode(i, func() error {
				var err error
				res, err = cni.AddNetworkList(ctx, list, RuntimeConf(ContainerID(*p), p.NSPath, "eth0", p.Project, p.Name))
				return err
			})
			if err != nil {
				return fmt.Errorf("cluster: CNI ADD of %s on %s: %w", p.Name, n.Name, err)
			}
			r, err := types100.GetResult(res)
			if err != nil || len(r.IPs) == 0 {
				return fmt.Errorf("cluster: CNI ADD of %s: result without an address (%v)", p.Name, err)
			}
			ip, _ := netipFromIP(r.IPs[0].Address.IP)
			p.IP = ip
		}
	}
	return nil
}

func netipFromIP(b []byte) (netip.Addr, bool) {
	a, ok := netip.AddrFromSlice(b)
	return a.Unmap(), ok
}

// RestartDaemon stops node i's gvs-switchd (StopDaemon: the CNI pods'
// persistent TAPs stay, static pods' TAPs go with it) and starts it again
// with the same configuration (StartDaemon), waiting until it answers.
func (c *Cluster) RestartDaemon(ctx context.Context, i int) error {
	if err := c.StopDaemon(i); err != nil {
		return err
	}
	return c.StartDaemon(ctx, i)
}
