// Package deploy holds gvs's Kubernetes manifests (docs/kubernetes.md); its
// tests read them as the API server and the programs they start would.
package deploy

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/gvswitch/gvs/internal/daemon"
)

// docs splits a manifest file into its documents.
func docs(t *testing.T, file string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, d := range bytes.Split(b, []byte("\n---\n")) {
		if len(bytes.TrimSpace(d)) > 0 {
			out = append(out, d)
		}
	}
	return out
}

// strict decodes a document into v, refusing unknown and duplicate fields
// (a misspelt field would otherwise be dropped silently).
func strict(t *testing.T, doc []byte, v any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == name })
	if i < 0 {
		t.Fatalf("no container %s", name)
	}
	return spec.Containers[i]
}

// expand resolves $(VAR) in args from the container's env, as the kubelet
// does, and fails on a reference to a variable that is not defined.
func expand(t *testing.T, c corev1.Container, values map[string]string) []string {
	t.Helper()
	var out []string
	for _, a := range c.Args {
		for {
			i := strings.Index(a, "$(")
			if i < 0 {
				break
			}
			j := strings.Index(a[i:], ")")
			name := a[i+2 : i+j]
			if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name }) {
				t.Fatalf("%s: $(%s) is not in env", c.Name, name)
			}
			a = a[:i] + values[name] + a[i+j+1:]
		}
		out = append(out, a)
	}
	return out
}

// mounted reports whether path is inside one of the container's mounts.
func mounted(c corev1.Container, path string) bool {
	return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return path == m.MountPath || strings.HasPrefix(path, m.MountPath+"/")
	})
}

func TestNodeDaemonSet(t *testing.T) {
	d := docs(t, "gvs-node.yaml")
	if len(d) != 2 {
		t.Fatalf("gvs-node.yaml: %d documents, want a ConfigMap and a DaemonSet", len(d))
	}
	var cm corev1.ConfigMap
	strict(t, d[0], &cm)
	var ds appsv1.DaemonSet
	strict(t, d[1], &ds)
	spec := ds.Spec.Template.Spec
	if spec.ServiceAccountName != "gvs-node" || !spec.HostNetwork || !spec.HostPID {
		t.Errorf("gvs-node runs as %q, hostNetwork %v, hostPID %v: want gvs-node (rbac.yaml), the host's network namespace and PIDs",
			spec.ServiceAccountName, spec.HostNetwork, spec.HostPID)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(tl corev1.Toleration) bool { return tl.Operator == corev1.TolerationOpExists && tl.Key == "" }) {
		t.Error("gvs-node must tolerate every taint: the network runs before the node is Ready")
	}
	c := container(t, spec, "gvs-switchd")
	if c.Image != "gvs:devel" {
		t.Errorf("image %q, want gvs:devel (make image, kustomization.yaml)", c.Image)
	}
	args := expand(t, c, map[string]string{"NODE_NAME": "node-1", "NODE_IP": "192.0.2.10"})
	var cfgPath string
	for _, a := range args {
		if p, ok := strings.CutPrefix(a, "--config="); ok {
			cfgPath = p
		}
	}
	if !mounted(c, cfgPath) {
		t.Fatalf("--config=%s is not in a mount", cfgPath)
	}
	js, ok := cm.Data[filepath.Base(cfgPath)]
	if !ok || cm.Name != spec.Volumes[slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.ConfigMap != nil })].ConfigMap.Name {
		t.Fatalf("the ConfigMap does not hold %s", filepath.Base(cfgPath))
	}
	// The configuration is what gvs-switchd accepts, once the flags have
	// given it the node.
	cfg, err := daemon.DecodeConfig([]byte(js))
	if err != nil {
		t.Fatalf("switchd.json: %v", err)
	}
	if err := cfg.Validate(); err == nil {
		t.Error("the configuration validates without a node name: the flags would not be needed")
	}
	cfg.NodeName, cfg.NodeIP = "node-1", "192.0.2.10"
	if !slices.Contains(args, "--node-name=node-1") || !slices.Contains(args, "--node-ip=192.0.2.10") {
		t.Errorf("args %v do not pass the node's name and address", args)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("switchd.json with the node: %v", err)
	}
	if !cfg.FromKubernetes() || cfg.Kubeconfig != daemon.InCluster {
		t.Errorf("kubeconfig %q, want in-cluster", cfg.Kubeconfig)
	}
	// A live upgrade: the new pod starts beside the old one, whose daemon
	// hands over through the handoff socket and then idles until deleted.
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil ||
		ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 1 || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Errorf("updateStrategy %+v: want RollingUpdate with maxSurge 1, maxUnavailable 0 (a live upgrade needs the new pod beside the old)", ds.Spec.UpdateStrategy)
	}
	if ds.Spec.MinReadySeconds < 5 {
		t.Errorf("minReadySeconds %d: want a few seconds, so that the old pod is deleted after the handoff", ds.Spec.MinReadySeconds)
	}
	if cfg.AfterHandoff != "wait" || cfg.HandoffSocket == "" || !mounted(c, cfg.HandoffSocket) {
		t.Errorf("afterHandoff %q, handoffSocket %q: want wait (the kubelet would restart an exited old daemon) and a socket in a host mount",
			cfg.AfterHandoff, cfg.HandoffSocket)
	}
	for key, path := range map[string]string{"cniSocket": cfg.CNISocket, "controlSocket": cfg.ControlSocket, "stateDir": cfg.StateDir,
		"cniBinDir": cfg.CNIBinDir, "cniConfDir": cfg.CNIConfDir} {
		if path == "" || !mounted(c, path) {
			t.Errorf("%s %q is not on a host path mount", key, path)
		}
	}
	// The socket the plugin on the host dials is the daemon's: the
	// directory is mounted at the same path it has on the host.
	i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return strings.HasPrefix(cfg.CNISocket, m.MountPath+"/") })
	v := spec.Volumes[slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == c.VolumeMounts[i].Name })]
	if v.HostPath == nil || v.HostPath.Path != c.VolumeMounts[i].MountPath {
		t.Errorf("the CNI socket's directory %s is not the host's %s", c.VolumeMounts[i].MountPath, c.VolumeMounts[i].MountPath)
	}
	if !strings.HasPrefix(cfg.CNIPlugin, "/usr/local/bin/") {
		t.Errorf("cniPlugin %q is not the image's", cfg.CNIPlugin)
	}
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Error("gvs-switchd needs privilege (TAPs, pods' namespaces, nftables)")
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.IntValue() != 9101 || cfg.MetricsAddr != "127.0.0.1:9101" {
		t.Error("the liveness probe does not ask the daemon's /healthz on its metrics address")
	}
}

func TestMasterDeployment(t *testing.T) {
	d := docs(t, "gvs-master.yaml")
	if len(d) != 1 {
		t.Fatalf("gvs-master.yaml: %d documents", len(d))
	}
	var dep appsv1.Deployment
	strict(t, d[0], &dep)
	spec := dep.Spec.Template.Spec
	if spec.ServiceAccountName != "gvs-master" || !spec.HostNetwork {
		t.Errorf("gvs-master runs as %q, hostNetwork %v", spec.ServiceAccountName, spec.HostNetwork)
	}
	c := container(t, spec, "gvs-master")
	args := expand(t, c, map[string]string{"POD_NAME": "gvs-master-abc", "POD_NAMESPACE": "gvs"})
	for _, want := range []string{"--in-cluster", "--identity=gvs-master-abc"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %v lack %s", args, want)
		}
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace"
	}) {
		t.Error("POD_NAMESPACE (the Lease's namespace) is not the pod's")
	}
	sc := c.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Error("gvs-master needs no privilege: non-root, read-only, no capabilities")
	}
	if c.Image != "gvs:devel" {
		t.Errorf("image %q", c.Image)
	}
}

// TestKustomization: kubectl apply -k deploy/ installs every manifest here.
func TestKustomization(t *testing.T) {
	var k struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Resources  []string
		Images     []struct{ Name, NewTag string }
	}
	strict(t, docs(t, "kustomization.yaml")[0], &k)
	files, _ := filepath.Glob("*.yaml")
	crds, _ := filepath.Glob("crds/*.yaml")
	for _, f := range append(files, crds...) {
		if f != "kustomization.yaml" && !slices.Contains(k.Resources, f) {
			t.Errorf("kustomization.yaml does not list %s", f)
		}
	}
	for _, r := range k.Resources {
		if _, err := os.Stat(r); err != nil {
			t.Errorf("kustomization.yaml lists %s: %v", r, err)
		}
	}
	if len(k.Images) != 1 || k.Images[0].Name != "gvs" || k.Images[0].NewTag != "devel" {
		t.Errorf("images %+v, want gvs → devel", k.Images)
	}
}
