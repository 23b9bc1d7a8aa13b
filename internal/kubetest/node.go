package kubetest

// A real Kubernetes node in a lab namespace: Debian's containerd (with
// runc) and the kubelet built from the k8s.io/kubernetes module, each node
// with its own root, state directories, sockets, cgroups and CNI
// directories, so that several nodes share one machine without touching
// its own namespace or files.
//
// The way a node is made, and why:
//
//  1. A holder process (`sleep infinity`) is started with `ip netns exec`
//     in the node's network namespace, which gives it a mount namespace of
//     its own (a slave of the machine's: nothing mounted there propagates
//     back). `ip netns exec` mounts a fresh sysfs for the network
//     namespace, which hides the machine's cgroup mounts, so the holder
//     mounts the cgroup v1 hierarchies again under /sys/fs/cgroup (this
//     machine's kernel has the controllers on v1; its cgroup2 mount has
//     none that runc needs) and makes the node's cgroup root in each.
//  2. The paths the kubelet, containerd and a network plug-in use on a
//     host (/run, /var/lib/kubelet, /var/lib/containerd, /var/log,
//     /etc/cni/net.d, /opt/cni/bin, /var/lib/gvs, /var/lib/cni,
//     /etc/kubernetes) are bind mounts of the node's own directories; the
//     six machine-wide sysctls the kubelet wants set are bind mounts of
//     files holding the values it expects, and the kubelet runs with
//     protectKernelDefaults, so it only reads them. The root mount is made
//     shared inside the holder's namespace (as systemd makes it on a real
//     host), so that the network namespaces containerd makes reach the
//     DaemonSet's HostToContainer mounts.
//  3. containerd, the kubelet and everything else of the node are started
//     with `ip netns exec NS nsenter -t HOLDER -m`: the node's network
//     namespace and the holder's mount namespace. A small shell wrapper
//     first puts the process into the node's "system" cgroup, so
//     containerd's shims land there too; the kubelet puts pods under the
//     node's cgroup root. Stopping the node ends every process in that
//     cgroup tree by process id, then the holder.
//
// The kubelet runs with cgroupDriver cgroupfs on cgroup v1 (failCgroupV1
// false), authenticates to the API server with a node certificate
// (system:node:NAME, so the Node authorizer and NodeRestriction apply) and
// serves its API with a certificate of the cluster CA; containerd's CRI
// plug-in has restrict_oom_score_adj (root here lacks CAP_SYS_RESOURCE)
// and no registry: images are imported from OCI archives.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gvswitch/gvs/lab"
)

// Binaries a node runs (besides Debian's containerd, runc and ctr).
const (
	KubeletBinary           = "kubelet"
	ControllerManagerBinary = "kube-controller-manager"
	SchedulerBinary         = "kube-scheduler"
	KubectlBinary           = "kubectl"
	ContainerdBinary        = "/usr/bin/containerd"
	CtrBinary               = "/usr/bin/ctr"
)

// DebianCNIDir is where Debian's containernetworking-plugins puts the
// reference plug-ins; a node's /opt/cni/bin starts with them, as a host
// with the package (or kubeadm's kubernetes-cni) has them.
const DebianCNIDir = "/usr/lib/cni"

// PauseImage is the sandbox image the nodes' containerd runs (the one this
// Kubernetes release names; the lab builds it from source).
const PauseImage = "registry.k8s.io/pause:3.10.2"

// cgroupControllers are the v1 hierarchies a node mounts and makes its
// cgroup root in.
var cgroupControllers = []string{"cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids"}

// privateDirs are the host paths each node has its own copy of.
var privateDirs = []string{"run", "var/lib/kubelet", "var/lib/containerd", "var/log", "etc/cni/net.d", "opt/cni/bin", "var/lib/gvs", "var/lib/cni", "etc/kubernetes"}

// kernelDefaults are the machine-wide sysctls the kubelet checks, with the
// values it wants (its protectKernelDefaults).
var kernelDefaults = []struct{ key, value string }{
	{"vm/overcommit_memory", "1"}, {"vm/panic_on_oom", "0"}, {"kernel/panic", "10"},
	{"kernel/panic_on_oops", "1"}, {"kernel/keys/root_maxkeys", "1000000"}, {"kernel/keys/root_maxbytes", "25000000"},
}

// NodeRoot holds the nodes' directories, one folder per lab prefix. It is
// not under /run (the lab's state directory), because a node has its own
// /run: what its processes read (certificates, configuration) and the
// private directories they bind must stay visible from inside.
const NodeRoot = "/var/lib/gvs-lab"

// DestroyCluster removes what a real-node cluster on the lab prefix left
// behind (a crashed run, or one kept for a look): every process in its
// nodes' cgroups, the lab (lab.DestroyPrefix: its recorded processes and
// namespaces), the nodes' cgroups and directories.
func DestroyCluster(prefix string) error {
	var errs []error
	cgs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/pids", "gvslab-"+prefix+"-*"))
	for _, cg := range cgs {
		errs = append(errs, killCgroup("/"+filepath.Base(cg)))
	}
	errs = append(errs, lab.DestroyPrefix(prefix))
	for _, cg := range cgs {
		errs = append(errs, removeCgroup("/"+filepath.Base(cg)))
	}
	errs = append(errs, os.RemoveAll(filepath.Join(NodeRoot, prefix)))
	return errors.Join(errs...)
}

// NodeOptions says how to make a node.
type NodeOptions struct {
	// Images are OCI image archives imported into the node's containerd
	// (namespace k8s.io) before the kubelet starts.
	Images []string
	// ClusterDNS is the kubelet's clusterDNS (the DNS Service's ClusterIP);
	// unset, pods get no name server.
	ClusterDNS netip.Addr
	// Labels are added to the Node (--node-labels).
	Labels map[string]string
}

// Node is a Kubernetes node of the lab. Its methods are not safe for
// concurrent use.
type Node struct {
	// Name is the Node's name (the lab node's name), IP its InternalIP.
	Name string
	IP   netip.Addr
	// NS is the lab namespace; Dir holds the node's files (its private
	// directories under root/, certificates, configuration, logs).
	NS, Dir string
	// CgroupRoot is the node's cgroup (in every hierarchy), "/gvslab-NS".
	CgroupRoot string

	srv        *Server
	opts       NodeOptions
	holder     *lab.Proc
	containerd *lab.Proc
	kubelet    *lab.Proc
}

// StartNode makes lab node n a Kubernetes node of this API server:
// holder, containerd, images, kubelet. It returns once the kubelet runs;
// the Node registers itself shortly after (WaitNodes). The API server must
// have been started with Options.Kubelets.
func (s *Server) StartNode(ctx context.Context, n lab.Node, o NodeOptions) (_ *Node, err error) {
	if !s.opts.Kubelets {
		return nil, errors.New("kubetest: StartNode needs an API server started with Options.Kubelets")
	}
	nd := &Node{Name: n.Name, IP: n.IP, NS: n.NS, Dir: filepath.Join(NodeRoot, s.Lab.Prefix, n.Name),
		CgroupRoot: "/gvslab-" + n.NS, srv: s, opts: o}
	defer func() {
		if err != nil {
			err = errors.Join(err, nd.Stop())
		}
	}()
	if err := os.MkdirAll(filepath.Join(nd.Dir, "root"), 0o755); err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	if err := nd.startHolder(ctx); err != nil {
		return nil, err
	}
	// The node's /opt/cni/bin starts with the reference plug-ins.
	if err := copyDir(DebianCNIDir, filepath.Join(nd.Dir, "root/opt/cni/bin")); err != nil {
		return nil, fmt.Errorf("kubetest: node %s: CNI plug-ins: %w", n.Name, err)
	}
	if err := nd.startContainerd(ctx); err != nil {
		return nil, err
	}
	for _, img := range o.Images {
		if out, err := nd.Exec(ctx, CtrBinary, "-a", "/run/containerd/containerd.sock", "-n", "k8s.io", "images", "import", "--no-unpack=false", img); err != nil {
			return nil, fmt.Errorf("kubetest: node %s: import %s: %w\n%s", n.Name, img, err, out)
		}
	}
	if err := nd.StartKubelet(ctx); err != nil {
		return nil, err
	}
	return nd, nil
}

// holderScript sets the node's mount namespace up (see the top of this
// file) and then holds it. Arguments: node dir, cgroup root.
const holderScript = `set -e
D=$1; CG=$2
mount -t tmpfs -o mode=755 gvslab-cgroup /sys/fs/cgroup
for c in %s; do
  mkdir -p /sys/fs/cgroup/$c; mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c
  mkdir -p /sys/fs/cgroup/$c$CG/system
done
for f in cpuset.cpus cpuset.mems; do
  cat /sys/fs/cgroup/cpuset/$f > /sys/fs/cgroup/cpuset$CG/$f
  cat /sys/fs/cgroup/cpuset/$f > /sys/fs/cgroup/cpuset$CG/system/$f
done
for p in %s; do
  mkdir -p $D/root/$p /$p; mount --bind $D/root/$p /$p
done
mkdir -p $D/sysctl
for kv in %s; do
  k=${kv%%%%=*}; f=$D/sysctl/$(echo $k | tr / .); echo ${kv#*=} > $f; mount --bind $f /proc/sys/$k
done
mount --make-rshared /
touch $D/holder.ready
exec sleep infinity
`

func (nd *Node) startHolder(ctx context.Context) error {
	var kv []string
	for _, d := range kernelDefaults {
		kv = append(kv, d.key+"="+d.value)
	}
	script := fmt.Sprintf(holderScript, strings.Join(cgroupControllers, " "), strings.Join(privateDirs, " "), strings.Join(kv, " "))
	ready := filepath.Join(nd.Dir, "holder.ready")
	_ = os.Remove(ready)
	p, err := nd.srv.Lab.Start(ctx, nd.NS, filepath.Join(nd.Dir, "holder.log"), "sh", "-c", script, "holder", nd.Dir, nd.CgroupRoot)
	if err != nil {
		return fmt.Errorf("kubetest: node %s: holder: %w", nd.Name, err)
	}
	nd.holder = p
	for {
		if _, err := os.Stat(ready); err == nil {
			return nil
		}
		select {
		case <-p.Done():
			b, _ := os.ReadFile(p.LogFile)
			return fmt.Errorf("kubetest: node %s: holder exited: %v\n%s", nd.Name, p.Wait(), b)
		case <-ctx.Done():
			return fmt.Errorf("kubetest: node %s: holder: %w", nd.Name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// argv returns the command line that runs argv in the node (its network
// and mount namespaces), in its system cgroup.
func (nd *Node) argv(argv ...string) []string {
	enter := `for c in ` + strings.Join(cgroupControllers, " ") + `; do echo $$ > /sys/fs/cgroup/$c` + nd.CgroupRoot + `/system/cgroup.procs; done; exec "$@"`
	return append([]string{"nsenter", "-t", strconv.Itoa(nd.holder.PID), "-m", "--", "sh", "-c", enter, "node"}, argv...)
}

// Start runs argv as a daemon of the node (its namespaces and system
// cgroup), with its output in Dir/NAME.log.
func (nd *Node) Start(ctx context.Context, name string, argv ...string) (*lab.Proc, error) {
	return nd.srv.Lab.Start(ctx, nd.NS, filepath.Join(nd.Dir, name+".log"), nd.argv(argv...)...)
}

// Exec runs argv in the node and returns its combined output.
func (nd *Node) Exec(ctx context.Context, argv ...string) ([]byte, error) {
	return nd.srv.Lab.Exec(ctx, nd.NS, nd.argv(argv...)...)
}

const containerdConfig = `version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
`

func (nd *Node) startContainerd(ctx context.Context) error {
	cfg := filepath.Join(nd.Dir, "containerd.toml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, containerdConfig, PauseImage), 0o644); err != nil {
		return err
	}
	p, err := nd.Start(ctx, "containerd", ContainerdBinary, "--config", cfg)
	if err != nil {
		return fmt.Errorf("kubetest: node %s: containerd: %w", nd.Name, err)
	}
	nd.containerd = p
	sock := filepath.Join(nd.Dir, "root/run/containerd/containerd.sock")
	for {
		if _, err := os.Stat(sock); err == nil {
			if _, err := nd.Exec(ctx, CtrBinary, "-a", "/run/containerd/containerd.sock", "version"); err == nil {
				return nil
			}
		}
		select {
		case <-p.Done():
			return fmt.Errorf("kubetest: node %s: containerd exited: %v\n%s", nd.Name, p.Wait(), tail(p.LogFile, 30))
		case <-ctx.Done():
			return fmt.Errorf("kubetest: node %s: containerd: %w\n%s", nd.Name, ctx.Err(), tail(p.LogFile, 30))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// StartKubelet (re)starts the node's kubelet. It does nothing if it runs.
func (nd *Node) StartKubelet(ctx context.Context) error {
	if nd.kubelet != nil && !nd.kubelet.Exited() {
		return nil
	}
	pki := filepath.Join(nd.Dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return err
	}
	s := nd.srv
	ccert, ckey, err := s.ca.issue(pki, "kubelet-client", certSpec{cn: "system:node:" + nd.Name, orgs: []string{"system:nodes"}, client: true})
	if err != nil {
		return err
	}
	scert, skey, err := s.ca.issue(pki, "kubelet-server", certSpec{cn: "system:node:" + nd.Name, ips: []netip.Addr{nd.IP}, dns: []string{nd.Name}, server: true})
	if err != nil {
		return err
	}
	caFile := filepath.Join(pki, "ca.crt")
	if err := copyFile(s.CAFile, caFile, 0o644); err != nil {
		return err
	}
	kubeconfig := filepath.Join(nd.Dir, "kubelet.kubeconfig")
	if err := s.writeEmbeddedKubeconfig(kubeconfig, ccert, ckey); err != nil {
		return err
	}
	cfg := map[string]any{
		"kind": "KubeletConfiguration", "apiVersion": "kubelet.config.k8s.io/v1beta1",
		"address": nd.IP.String(), "port": 10250, "readOnlyPort": 0,
		"healthzBindAddress": "127.0.0.1", "healthzPort": 10248,
		"tlsCertFile": scert, "tlsPrivateKeyFile": skey,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": caFile},
		},
		"authorization":            map[string]any{"mode": "Webhook"},
		"cgroupDriver":             "cgroupfs",
		"cgroupRoot":               nd.CgroupRoot,
		"cgroupsPerQOS":            true,
		"failCgroupV1":             false,
		"failSwapOn":               false,
		"protectKernelDefaults":    true,
		"containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
		"clusterDomain":            ClusterDomain,
		// No name server of the machine's leaks into pods or hostNetwork
		// pods: their only name server is the cluster's.
		"resolvConf": "",
		// The images were imported and cannot be pulled again: never
		// collect them; evict nothing for a shared machine's disk.
		"imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
		"evictionHard":            map[string]string{"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
		"serializeImagePulls":     false,
		"volumePluginDir":         "/var/lib/kubelet/volumeplugins",
		"podPidsLimit":            -1,
		"runtimeRequestTimeout":   "2m",
		"hairpinMode":             "none",
		"rotateCertificates":      false,
		"kernelMemcgNotification": false,
	}
	if nd.opts.ClusterDNS.IsValid() {
		cfg["clusterDNS"] = []string{nd.opts.ClusterDNS.String()}
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	cfgFile := filepath.Join(nd.Dir, "kubelet.json")
	if err := os.WriteFile(cfgFile, b, 0o644); err != nil {
		return err
	}
	args := []string{filepath.Join(s.opts.BinDir, KubeletBinary), "--config", cfgFile, "--kubeconfig", kubeconfig,
		"--hostname-override", nd.Name, "--node-ip", nd.IP.String(), "--v", "2"}
	if len(nd.opts.Labels) > 0 {
		var l []string
		for k, v := range nd.opts.Labels {
			l = append(l, k+"="+v)
		}
		slices.Sort(l)
		args = append(args, "--node-labels", strings.Join(l, ","))
	}
	p, err := nd.Start(ctx, "kubelet", args...)
	if err != nil {
		return fmt.Errorf("kubetest: node %s: kubelet: %w", nd.Name, err)
	}
	nd.kubelet = p
	return nil
}

// StopKubelet stops the node's kubelet; pods keep running.
func (nd *Node) StopKubelet() error {
	if nd.kubelet == nil {
		return nil
	}
	return nd.kubelet.Stop()
}

// Stop stops the node: the kubelet, then every process in the node's
// cgroups (pods' containers, containerd's shims, containerd), the holder
// last (its mount namespace, with the containers' mounts, goes with it),
// and removes the node's cgroups. The files stay in Dir (they go with the
// lab's state directory).
func (nd *Node) Stop() error {
	var errs []error
	if nd.kubelet != nil {
		errs = append(errs, nd.kubelet.Stop())
	}
	errs = append(errs, killCgroup(nd.CgroupRoot))
	if nd.containerd != nil {
		errs = append(errs, nd.containerd.Stop())
	}
	if nd.holder != nil {
		errs = append(errs, nd.holder.Stop())
	}
	errs = append(errs, removeCgroup(nd.CgroupRoot))
	if nd.holder == nil || nd.holder.Exited() {
		errs = append(errs, os.RemoveAll(nd.Dir))
	}
	return errors.Join(errs...)
}

// cgroupPIDs returns the process ids in the cgroup tree root of the pids
// hierarchy.
func cgroupPIDs(root string) []int {
	var pids []int
	_ = filepath.WalkDir(filepath.Join("/sys/fs/cgroup/pids", root), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// killCgroup ends every process of the cgroup tree root (SIGKILL, by
// process id: they are the node's, started by the processes this harness
// started), until none is left or 10 s have passed.
func killCgroup(root string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := cgroupPIDs(root)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubetest: processes left in cgroup %s: %v", root, pids)
		}
		for _, pid := range pids {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Signal(os.Kill)
			}
		}
		time.Sleep(50 * time.Millisecond) // let the kernel reap them before looking again
	}
}

// removeCgroup removes the cgroup tree root from every hierarchy, deepest
// first.
func removeCgroup(root string) error {
	var errs []error
	for _, c := range cgroupControllers {
		top := filepath.Join("/sys/fs/cgroup", c, root)
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// copyDir copies the regular files of src into dst (made if needed),
// keeping their modes.
func copyDir(src, dst string) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		if err := copyFile(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()), info.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, mode)
}

// tail returns the last n lines of a file.
func tail(file string, n int) string {
	b, _ := os.ReadFile(file)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// StartKubeProxy runs the real kube-proxy on the node in mode (iptables or
// nftables), as its DaemonSet would on the host network: as the user
// system:kube-proxy, NodePorts on the node's address, and without touching the
// machine's conntrack sysctls. Stop ends it with the node.
func (nd *Node) StartKubeProxy(ctx context.Context, mode string) error {
	s := nd.srv
	pki := filepath.Join(nd.Dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return err
	}
	// The identity kube-proxy has in a cluster: system:node-proxier's
	// binding names the user system:kube-proxy.
	cert, key, err := s.ca.issue(pki, "kube-proxy", certSpec{cn: "system:kube-proxy", client: true})
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(nd.Dir, "kube-proxy.kubeconfig")
	if err := s.writeEmbeddedKubeconfig(kubeconfig, cert, key); err != nil {
		return err
	}
	_, err = nd.Start(ctx, "kube-proxy", filepath.Join(s.opts.BinDir, KubeProxyBinary),
		"--kubeconfig="+kubeconfig, "--proxy-mode="+mode, "--hostname-override="+nd.Name,
		"--bind-address="+nd.IP.String(), "--cluster-cidr="+ClusterCIDR.String(),
		"--nodeport-addresses="+netip.PrefixFrom(nd.IP, 32).String(),
		"--metrics-bind-address=127.0.0.1:10249", "--healthz-bind-address=127.0.0.1:10256",
		"--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0")
	if err != nil {
		return fmt.Errorf("kubetest: node %s: kube-proxy: %w", nd.Name, err)
	}
	return nil
}
