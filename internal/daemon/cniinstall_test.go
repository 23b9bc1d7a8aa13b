package daemon

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/gvswitch/gvs/cniplugin"
)

func TestInstallCNI(t *testing.T) {
	dir := t.TempDir()
	plugin := filepath.Join(dir, "gvs-cni")
	if err := os.WriteFile(plugin, []byte("#!plugin v1\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	host := filepath.Join(dir, "host")
	cfg := &Config{CNISocket: "/run/gvs/node1/cni.sock", CNIPlugin: plugin,
		CNIBinDir: filepath.Join(host, "opt/cni/bin"), CNIConfDir: filepath.Join(host, "etc/cni/net.d"), CNINetwork: "gvs-pods"}
	if err := cfg.validateCNIInstall(); err != nil {
		t.Fatal(err)
	}
	d := &Daemon{cfg: cfg, log: slog.New(slog.DiscardHandler)}
	if err := d.installCNI(cfg.CNISocket); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(cfg.CNIBinDir, "gvs")
	st, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o755 {
		t.Errorf("plugin mode %v, want 0755", st.Mode().Perm())
	}
	if b, _ := os.ReadFile(bin); string(b) != "#!plugin v1\n" {
		t.Errorf("plugin content %q", b)
	}
	conf := filepath.Join(cfg.CNIConfDir, "80-gvs-pods.conflist")
	list, err := libcni.ConfListFromFile(conf)
	if err != nil {
		t.Fatalf("the runtime's parser refuses the configuration: %v", err)
	}
	if list.Name != "gvs-pods" || len(list.Plugins) != 1 || list.Plugins[0].Network.Type != "gvs" {
		t.Fatalf("conflist %s: %+v", conf, list)
	}
	// The runtime gives each plugin the list's name and cniVersion.
	var one map[string]any
	if err := json.Unmarshal(list.Plugins[0].Bytes, &one); err != nil {
		t.Fatal(err)
	}
	one["name"], one["cniVersion"] = list.Name, list.CNIVersion
	b, _ := json.Marshal(one)
	nc, err := cniplugin.ParseNetConf(b)
	if err != nil {
		t.Fatalf("gvs-cni refuses its own configuration: %v", err)
	}
	if nc.Socket != cfg.CNISocket {
		t.Errorf("socket %q, want %q", nc.Socket, cfg.CNISocket)
	}

	// Nothing changed: the files are not rewritten (a runtime watching
	// the directory sees no event). The file's time is set an hour back
	// first, so that a rewrite would show in ModTime whatever the file
	// system's time granularity.
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(conf, old, old); err != nil {
		t.Fatal(err)
	}
	if err := d.installCNI(cfg.CNISocket); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(conf)
	if !after.ModTime().Equal(old) {
		t.Errorf("an unchanged configuration was rewritten (modified %v, set to %v)", after.ModTime(), old)
	}
	// An upgrade: the new plugin replaces the old, and no temporary file
	// is left behind.
	if err := os.WriteFile(plugin, []byte("#!plugin v2\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := d.installCNI(cfg.CNISocket); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(bin); string(b) != "#!plugin v2\n" {
		t.Errorf("after the upgrade the plugin is %q", b)
	}
	for _, dir := range []string{cfg.CNIBinDir, cfg.CNIConfDir} {
		ents, _ := os.ReadDir(dir)
		if len(ents) != 1 {
			t.Errorf("%s holds %d files, want 1", dir, len(ents))
		}
	}
	// The default socket is the plugin's default: not written.
	if !strings.Contains(string(CNIConfList("gvs", "", false)), `"type": "gvs"`) || strings.Contains(string(CNIConfList("gvs", "", false)), "socket") {
		t.Errorf("default configuration: %s", CNIConfList("gvs", "", false))
	}
	// No portmap beside gvs: not chained (a chained plug-in that is
	// missing would fail every pod's ADD).
	if b, _ := os.ReadFile(conf); strings.Contains(string(b), "portmap") {
		t.Errorf("portmap chained without the plug-in:\n%s", b)
	}
	// The node has portmap: chained after gvs, with the portMappings
	// capability the kubelet fills from the pod's hostPorts.
	if err := os.WriteFile(filepath.Join(cfg.CNIBinDir, PortmapPluginType), []byte("#!portmap\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := d.installCNI(cfg.CNISocket); err != nil {
		t.Fatal(err)
	}
	var chained struct {
		Plugins []struct {
			Type         string          `json:"type"`
			Capabilities map[string]bool `json:"capabilities"`
		} `json:"plugins"`
	}
	b, _ = os.ReadFile(conf)
	if err := json.Unmarshal(b, &chained); err != nil {
		t.Fatal(err)
	}
	if len(chained.Plugins) != 2 || chained.Plugins[0].Type != CNIPluginType || chained.Plugins[1].Type != PortmapPluginType || !chained.Plugins[1].Capabilities["portMappings"] {
		t.Errorf("with portmap on the node, the configuration is\n%s", b)
	}
	// A missing plugin is an error, not an empty file.
	cfg.CNIPlugin = filepath.Join(dir, "missing")
	if err := d.installCNI(cfg.CNISocket); err == nil {
		t.Error("a missing plugin installed")
	}
}

func TestCNIInstallConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"relative bin dir", Config{CNISocket: "/run/gvs/cni.sock", CNIBinDir: "opt/cni/bin"}, "cniBinDir"},
		{"relative conf dir", Config{CNISocket: "/run/gvs/cni.sock", CNIConfDir: "net.d"}, "cniConfDir"},
		{"relative plugin", Config{CNISocket: "/run/gvs/cni.sock", CNIPlugin: "gvs-cni"}, "cniPlugin"},
		{"bad network name", Config{CNISocket: "/run/gvs/cni.sock", CNINetwork: "../x"}, "cniNetwork"},
		{"no socket", Config{CNIConfDir: "/etc/cni/net.d"}, "cniSocket"},
		{"socket off", Config{CNISocket: "off", CNIBinDir: "/opt/cni/bin"}, "cniSocket"},
	} {
		err := tc.cfg.validateCNIInstall()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one naming %s", tc.name, err, tc.want)
		}
	}
}
