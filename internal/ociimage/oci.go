// Package ociimage writes single-layer container images of local files as
// OCI image archives (the OCI image layout in a tar file), without a
// container engine or a base image: gvs's own image (deploy/image) and the
// images the real-node lab imports into each node's containerd (agnhost,
// the pause image) are made with it. An archive loads with `ctr images
// import`, `docker load -i` (Docker 25 and later), `podman load -i`, or
// `skopeo copy oci-archive:FILE …`. The same files make the same archive,
// byte for byte.
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"
)

// Image is a single-layer image of files.
type Image struct {
	// Tag is the image's reference, name:tag ("gvs:devel",
	// "registry.k8s.io/pause:3.10"). The archive records it fully
	// qualified (Reference), the name container runtimes look it up by.
	Tag  string
	Arch string // GOARCH
	// Files are the layer's files, in order; a directory is made for
	// each parent.
	Files []File
	// Entrypoint and Cmd are the image configuration's; Env defaults to
	// PATH=/usr/local/bin.
	Entrypoint, Cmd, Env []string
}

// File is a file of the layer: a regular file copied from Source, or a
// symbolic link to Link when Link is set.
type File struct {
	Path   string // inside the image, relative ("usr/local/bin/x")
	Source string // on this machine
	Mode   int64
	Link   string // the target of a symbolic link ("busybox", "/bin/busybox")
}

// Reference returns the fully qualified form of an image reference, as
// container runtimes name an image they pull ("gvs:devel" →
// "docker.io/library/gvs:devel", "quay.io/x/y:1" unchanged): the first
// component is a registry host when it has a dot or a colon or is
// "localhost", else the reference is Docker Hub's.
func Reference(ref string) string {
	first, _, hasSlash := strings.Cut(ref, "/")
	if hasSlash && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return ref
	}
	if !hasSlash {
		ref = "library/" + ref
	}
	return "docker.io/" + ref
}

// The media types of the OCI image specification.
const (
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// epoch stamps every file and the image, so that the same binaries make
// the same image.
var epoch = time.Unix(0, 0).UTC()

// WriteArchive writes the image as an OCI image layout in a tar archive and
// returns its manifest's digest.
func (img Image) WriteArchive(out string) (string, error) {
	name, tag, ok := strings.Cut(img.Tag, ":")
	if !ok || name == "" || tag == "" {
		return "", fmt.Errorf("tag %q: want name:tag", img.Tag)
	}
	layer, diffID, err := img.layer()
	if err != nil {
		return "", err
	}
	env := img.Env
	if env == nil {
		env = []string{"PATH=/usr/local/bin"}
	}
	cfg := map[string]any{"Entrypoint": img.Entrypoint, "Env": env}
	if img.Cmd != nil {
		cfg["Cmd"] = img.Cmd
	}
	config, err := json.Marshal(map[string]any{
		"created":      epoch.Format(time.RFC3339),
		"architecture": img.Arch,
		"os":           "linux",
		"config":       cfg,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{diffID}},
		"history":      []map[string]string{{"created": epoch.Format(time.RFC3339), "created_by": "gvs deploy/image"}},
	})
	if err != nil {
		return "", err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaManifest,
		"config":        describe(mediaConfig, config),
		"layers":        []descriptor{describe(mediaLayer, layer)},
	})
	if err != nil {
		return "", err
	}
	md := describe(mediaManifest, manifest)
	md.Annotations = map[string]string{
		"org.opencontainers.image.ref.name": tag,
		// docker load and ctr import name the image after it; qualified,
		// so that the CRI plug-in finds "gvs:devel" where a pod names it.
		"io.containerd.image.name": Reference(img.Tag),
	}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []descriptor{md}})
	if err != nil {
		return "", err
	}
	f, err := os.Create(out)
	if err != nil {
		return "", err
	}
	tw := tar.NewWriter(f)
	entries := []struct {
		name string
		b    []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(md.Digest), manifest},
		{blobPath(describe("", config).Digest), config},
		{blobPath(describe("", layer).Digest), layer},
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: epoch}); err != nil {
			f.Close()
			return "", err
		}
	}
	for _, e := range entries {
		if err := writeEntry(tw, e.name, 0o644, e.b); err != nil {
			f.Close()
			return "", err
		}
	}
	if err := errors.Join(tw.Close(), f.Close()); err != nil {
		return "", err
	}
	return md.Digest, nil
}

// layer returns the gzipped layer and the digest of its uncompressed tar.
func (img Image) layer() (gz []byte, diffID string, err error) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	dirs := map[string]bool{}
	for _, f := range img.Files {
		if path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || strings.HasPrefix(f.Path, "..") {
			return nil, "", fmt.Errorf("file path %q: want a clean relative path", f.Path)
		}
		// Parents first, once each.
		var parents []string
		for d := path.Dir(f.Path); d != "."; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if !dirs[d] {
				dirs[d] = true
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch}); err != nil {
					return nil, "", err
				}
			}
		}
		if f.Link != "" {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: f.Path, Linkname: f.Link, Mode: 0o777, ModTime: epoch}); err != nil {
				return nil, "", err
			}
			continue
		}
		b, err := os.ReadFile(f.Source)
		if err != nil {
			return nil, "", err
		}
		if err := writeEntry(tw, f.Path, f.Mode, b); err != nil {
			return nil, "", err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(raw.Bytes())
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	if _, err := io.Copy(zw, &raw); err != nil {
		return nil, "", err
	}
	if err := zw.Close(); err != nil {
		return nil, "", err
	}
	return out.Bytes(), "sha256:" + hex.EncodeToString(sum[:]), nil
}

func writeEntry(tw *tar.Writer, name string, mode int64, b []byte) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(b)), ModTime: epoch}); err != nil {
		return err
	}
	_, err := tw.Write(b)
	return err
}

func describe(media string, b []byte) descriptor {
	sum := sha256.Sum256(b)
	return descriptor{MediaType: media, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(b))}
}

func blobPath(digest string) string { return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:") }
