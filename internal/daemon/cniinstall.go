package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"

	"github.com/gvswitch/gvs/cniplugin"
)

// DefaultCNINetwork is the name of the network configuration gvs-switchd
// installs (Config.CNINetwork).
const DefaultCNINetwork = "gvs"

// CNIPluginType is the plugin's network type, and so its file name in the
// CNI bin directory.
const CNIPluginType = "gvs"

// cniNetworkName is what a CNI network name may be (the spec's rule).
var cniNetworkName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

func (c *Config) validateCNIInstall() error {
	for _, d := range []struct{ key, path string }{{"cniBinDir", c.CNIBinDir}, {"cniConfDir", c.CNIConfDir}, {"cniPlugin", c.CNIPlugin}} {
		if d.path != "" && !filepath.IsAbs(d.path) {
			return fmt.Errorf("%s %q: want an absolute path", d.key, d.path)
		}
	}
	if c.CNINetwork != "" && !cniNetworkName.MatchString(c.CNINetwork) {
		return fmt.Errorf("cniNetwork %q: letters, digits, '_', '.' and '-', starting with a letter or digit", c.CNINetwork)
	}
	if (c.CNIBinDir != "" || c.CNIConfDir != "") && (c.CNISocket == "" || c.CNISocket == "off") {
		return errors.New("cniBinDir/cniConfDir install a plugin that cannot work without cniSocket")
	}
	return nil
}

// PortmapPluginType is the CNI reference plug-in that gives pods their
// hostPorts (containernetworking/plugins' portmap). gvs-switchd chains it
// after gvs when the node has it: the DaemonSet does not ship it, as
// OpenShift SDN and flannel do not, because every distribution's
// containernetworking-plugins (Debian's, kubeadm's kubernetes-cni) puts it
// in /opt/cni/bin.
const PortmapPluginType = "portmap"

// CNIConfList is the network configuration list gvs-switchd installs: gvs,
// for a socket path as the host sees it, with the bandwidth capability, and when portmap is true the
// portmap plug-in chained after it with the portMappings capability (the
// kubelet then passes each pod's hostPorts to it).
//
// A hostPort is like a NodePort, as in OpenShift SDN: anything that
// reaches the node's address reaches the port, whatever its project; the
// DNAT'ed frame enters the pod network from the node, which every project
// accepts. Only the one mapped port is opened; the pod's other ports stay
// behind the project's isolation.
func CNIConfList(network, socket string, portmap bool) []byte {
	type plugin struct {
		Type         string          `json:"type"`
		Socket       string          `json:"socket,omitempty"`
		Capabilities map[string]bool `json:"capabilities,omitempty"`
	}
	// gvs takes the bandwidth capability: the runtime passes each pod's
	// kubernetes.io/ingress-bandwidth and egress-bandwidth annotations as
	// runtimeConfig.bandwidth (cniplugin.Bandwidth).
	plugins := []plugin{{Type: CNIPluginType, Socket: socket, Capabilities: map[string]bool{"bandwidth": true}}}
	if portmap {
		plugins = append(plugins, plugin{Type: PortmapPluginType, Capabilities: map[string]bool{"portMappings": true}})
	}
	b, _ := json.MarshalIndent(struct {
		CNIVersion string   `json:"cniVersion"`
		Name       string   `json:"name"`
		Plugins    []plugin `json:"plugins"`
	}{"1.0.0", network, plugins}, "", "  ")
	return append(b, '\n')
}

// installCNI copies the plugin into Config.CNIBinDir and writes the network
// configuration into Config.CNIConfDir (what is set of the two). Each file
// is written beside its target and renamed over it: a runtime executing the
// plugin or reading the directory meanwhile sees the old file or the new
// one, never half of one. An unchanged file is left alone.
func (d *Daemon) installCNI(socket string) error {
	c := d.cfg
	if c.CNIBinDir != "" {
		src := c.CNIPlugin
		if src == "" {
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("cni install: %w", err)
			}
			src = filepath.Join(filepath.Dir(exe), "gvs-cni")
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return fmt.Errorf("cni install: the plugin: %w", err)
		}
		if err := replaceFile(filepath.Join(c.CNIBinDir, CNIPluginType), b, 0o755); err != nil {
			return fmt.Errorf("cni install: %w", err)
		}
	}
	if c.CNIConfDir != "" {
		name := c.CNINetwork
		if name == "" {
			name = DefaultCNINetwork
		}
		if socket == cniplugin.DefaultSocket {
			socket = "" // the plugin's default: keep the file short
		}
		// portmap is chained when the node has it beside gvs; without
		// it, pods still start and only their hostPorts go unmapped.
		portmap := false
		if c.CNIBinDir != "" {
			if st, err := os.Stat(filepath.Join(c.CNIBinDir, PortmapPluginType)); err == nil && st.Mode().IsRegular() {
				portmap = true
			} else {
				d.log.Warn("cni: no portmap plug-in beside gvs: hostPorts are not mapped", "binDir", c.CNIBinDir)
			}
		}
		path := filepath.Join(c.CNIConfDir, "80-"+name+".conflist")
		if err := replaceFile(path, CNIConfList(name, socket, portmap), 0o644); err != nil {
			return fmt.Errorf("cni install: %w", err)
		}
	}
	if c.CNIBinDir != "" || c.CNIConfDir != "" {
		d.log.Info("cni: plugin installed", "binDir", c.CNIBinDir, "confDir", c.CNIConfDir)
	}
	return nil
}

// replaceFile atomically gives path the content b and mode perm, unless it
// has them already.
func replaceFile(path string, b []byte, perm os.FileMode) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
		if st, err := os.Stat(path); err == nil && st.Mode().Perm() == perm {
			return nil
		}
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename: nothing there
	if _, err := io.Copy(f, bytes.NewReader(b)); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
