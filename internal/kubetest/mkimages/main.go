// Command mkimages builds the container images the real-node lab imports
// into its nodes' containerd, from source and without a registry, as OCI
// archives in one directory (make kube-images):
//
//   - pause.tar: registry.k8s.io/pause, the sandbox image (internal/kubetest/pause);
//   - agnhost.tar: registry.k8s.io/e2e-test-images/agnhost, upstream's test
//     server (k8s.io/kubernetes/test/images/agnhost, built in tools/kube),
//     with Debian's static busybox for /bin/sh and the usual tools, and
//     Debian's dash, curl, OpenBSD netcat, dig (bind9-dnsutils) and getent
//     (with their shared libraries), /coredns (tools/coredns), which the
//     e2e suites run in it as they do in upstream's image (upstream's getent
//     is Alpine's, musl's; this one is glibc's), and /bin/wget from
//     internal/kubetest/wget (busybox 1.35's wget crashes on -T);
//   - busybox.tar: registry.k8s.io/e2e-test-images/busybox, that busybox;
//   - glibc-dns-testing.tar: registry.k8s.io/e2e-test-images/glibc-dns-testing,
//     the DNS suite's glibc prober: that busybox with Debian's dig and getent;
//   - coredns.tar: registry.k8s.io/coredns/coredns, the cluster DNS
//     (CoreDNS built from its Go module in tools/coredns), the binary alone.
//
// The names and tags are the ones the Kubernetes release in tools/kube
// names (test/utils/image/manifest.go, cmd/kubeadm's pause), so e2e.test
// and the kubelet find them already present; change them with it.
//
//	go run ./internal/kubetest/mkimages -o bin/images
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"

	"github.com/gvswitch/gvs/internal/ociimage"
)

// The images' references (Kubernetes v1.37).
const (
	PauseRef    = "registry.k8s.io/pause:3.10.2"
	AgnhostRef  = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
	BusyboxRef  = "registry.k8s.io/e2e-test-images/busybox:1.37.0-2"
	GlibcDNSRef = "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1"
	// CoreDNSRef is kubetest.CoreDNSRef (internal/kubetest/coredns.yaml).
	CoreDNSRef = "registry.k8s.io/coredns/coredns:v1.15.0"
)

// busybox is Debian's busybox-static.
const busybox = "/bin/busybox"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mkimages:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("o", "bin/images", "the directory to write the archives to")
	flag.Parse()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "gvs-mkimages")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := goBuild(".", filepath.Join(tmp, "pause"), "./internal/kubetest/pause"); err != nil {
		return err
	}
	if err := goBuild("tools/kube", filepath.Join(tmp, "agnhost"), "k8s.io/kubernetes/test/images/agnhost"); err != nil {
		return err
	}
	if err := goBuild("tools/coredns", filepath.Join(tmp, "coredns"), "."); err != nil {
		return err
	}
	if err := goBuild(".", filepath.Join(tmp, "wget"), "./internal/kubetest/wget"); err != nil {
		return err
	}
	shell, err := busyboxFiles("bin")
	if err != nil {
		return err
	}
	// Debian's busybox-static runs its own applets before PATH when it is
	// the shell, so agnhost's /bin/sh is dash: `sh -c "… | nc -u …"` then
	// finds OpenBSD's nc, as in upstream's image.
	dnsTools := map[string]string{"usr/bin/dig": "/usr/bin/dig", "usr/bin/getent": "/usr/bin/getent"}
	tools, err := dynamicFiles(map[string]string{"usr/bin/curl": "/usr/bin/curl", "usr/bin/nc": "/usr/bin/nc.openbsd", "usr/bin/dash": "/bin/dash",
		"usr/bin/dig": "/usr/bin/dig", "usr/bin/getent": "/usr/bin/getent"})
	if err != nil {
		return err
	}
	dig, err := dynamicFiles(dnsTools)
	if err != nil {
		return err
	}
	// busybox 1.35's wget crashes on -T, which upstream's Services specs
	// pass: agnhost's wget is internal/kubetest/wget.
	var agnShell []ociimage.File
	for _, f := range shell {
		if f.Path != "bin/sh" && f.Path != "bin/wget" {
			agnShell = append(agnShell, f)
		}
	}
	agnShell = append(agnShell, ociimage.File{Path: "bin/sh", Link: "/usr/bin/dash"},
		ociimage.File{Path: "bin/wget", Source: filepath.Join(tmp, "wget"), Mode: 0o755})
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	images := []struct {
		file string
		img  ociimage.Image
	}{
		{"pause.tar", ociimage.Image{Tag: PauseRef, Entrypoint: []string{"/pause"},
			Files: []ociimage.File{{Path: "pause", Source: filepath.Join(tmp, "pause"), Mode: 0o755}}}},
		{"agnhost.tar", ociimage.Image{Tag: AgnhostRef, Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}, Env: env,
			Files: append(append([]ociimage.File{{Path: "agnhost", Source: filepath.Join(tmp, "agnhost"), Mode: 0o755},
				{Path: "coredns", Source: filepath.Join(tmp, "coredns"), Mode: 0o755}}, agnShell...), tools...)}},
		{"busybox.tar", ociimage.Image{Tag: BusyboxRef, Cmd: []string{"sh"}, Env: env, Files: shell}},
		{"glibc-dns-testing.tar", ociimage.Image{Tag: GlibcDNSRef, Cmd: []string{"sh"}, Env: env, Files: append(slices.Clone(shell), dig...)}},
		{"coredns.tar", ociimage.Image{Tag: CoreDNSRef, Entrypoint: []string{"/coredns"},
			Files: []ociimage.File{{Path: "coredns", Source: filepath.Join(tmp, "coredns"), Mode: 0o755}}}},
	}
	for _, im := range images {
		im.img.Arch = runtime.GOARCH
		d, err := im.img.WriteArchive(filepath.Join(*out, im.file))
		if err != nil {
			return fmt.Errorf("%s: %w", im.file, err)
		}
		fmt.Printf("%s: %s (%s)\n", filepath.Join(*out, im.file), im.img.Tag, d)
	}
	return nil
}

// goBuild builds pkg, statically, in the module at dir.
func goBuild(dir, out, pkg string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	return nil
}

// busyboxFiles returns busybox in dir and a symbolic link to it for each
// of its applets (sh, nc, wget, nslookup, …).
func busyboxFiles(dir string) ([]ociimage.File, error) {
	var list bytes.Buffer
	cmd := exec.Command(busybox, "--list")
	cmd.Stdout = &list
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s --list (Debian's busybox-static; make deps): %w", busybox, err)
	}
	files := []ociimage.File{{Path: dir + "/busybox", Source: busybox, Mode: 0o755}}
	for _, a := range strings.Fields(list.String()) {
		if a != "busybox" && !strings.Contains(a, "/") {
			files = append(files, ociimage.File{Path: dir + "/" + a, Link: "busybox"})
		}
	}
	return files, nil
}

// dynamicFiles returns the programs (image path → host path) and the
// shared libraries and loader each needs (ldd), at the paths ldd names.
func dynamicFiles(progs map[string]string) ([]ociimage.File, error) {
	var files []ociimage.File
	seen := map[string]bool{}
	paths := make([]string, 0, len(progs))
	for p := range progs {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		src := progs[p]
		files = append(files, ociimage.File{Path: p, Source: src, Mode: 0o755})
		out, err := exec.Command("ldd", src).Output()
		if err != nil {
			return nil, fmt.Errorf("ldd %s (Debian's curl, netcat-openbsd and bind9-dnsutils; make deps): %w", src, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			var lib string
			switch {
			case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
				lib = f[2]
			case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
				lib = f[0]
			}
			if lib == "" || seen[lib] {
				continue
			}
			seen[lib] = true
			files = append(files, ociimage.File{Path: strings.TrimPrefix(lib, "/"), Source: lib, Mode: 0o755})
		}
	}
	return files, nil
}
