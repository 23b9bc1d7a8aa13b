// Command image builds gvs's container image as an OCI image archive,
// without a container engine or a base image: the binaries are static Go
// programs (gvs-switchd, gvs-cni, gvs-master, gvsctl in /usr/local/bin), one
// layer holds them. Load the archive with `docker load -i`, `podman load -i`
// or `ctr -n k8s.io images import`, or push it with `skopeo copy
// oci-archive:FILE docker://REGISTRY/gvs:TAG` (docs/kubernetes.md).
//
//	go run ./deploy/image -o bin/gvs-image.tar -tag gvs:devel
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/gvswitch/gvs/internal/ociimage"
)

// binaries are the commands the image holds.
var binaries = []string{"gvs-switchd", "gvs-cni", "gvs-master", "gvsctl"}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("o", "bin/gvs-image.tar", "the OCI image archive to write")
	tag := flag.String("tag", "gvs:devel", "the image's name and tag (what docker load and ctr import call it)")
	arch := flag.String("arch", runtime.GOARCH, "the image's architecture (GOARCH)")
	flag.Parse()
	dir, err := os.MkdirTemp("", "gvs-image")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	args := []string{"build", "-trimpath", "-ldflags", "-s -w", "-o", dir + "/"}
	for _, b := range binaries {
		args = append(args, "./cmd/"+b)
	}
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+*arch)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build: %w", err)
	}
	var files []ociimage.File
	for _, b := range binaries {
		files = append(files, ociimage.File{Path: "usr/local/bin/" + b, Source: filepath.Join(dir, b), Mode: 0o755})
	}
	// /var/run is /run, as on the hosts: container runtimes name pods'
	// network namespaces /var/run/netns/… (CNI_NETNS), and the DaemonSet
	// mounts the host's /run/netns.
	files = append(files, ociimage.File{Path: "var/run", Link: "../run"})
	img := ociimage.Image{Tag: *tag, Arch: *arch, Files: files,
		Entrypoint: []string{"/usr/local/bin/gvs-switchd"}}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	digest, err := img.WriteArchive(*out)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s (%s)\n", *out, *tag, digest)
	return nil
}
