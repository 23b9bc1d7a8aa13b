package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// readArchive returns the archive's files by name.
func readArchive(t *testing.T, file string) map[string][]byte {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return readTar(t, f)
}

func readTar(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out[h.Name] = b
		if h.Typeflag == tar.TypeReg && h.Mode&0o111 != 0 {
			out[h.Name+"#exec"] = nil
		}
	}
}

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// TestImageArchive reads the archive as an image consumer does: index →
// manifest → config and layer, every digest and size checked.
func TestImageArchive(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	if err := os.WriteFile(bin, []byte("\x7fELF tool"), 0o700); err != nil {
		t.Fatal(err)
	}
	img := Image{Tag: "gvs:test", Arch: "amd64", Entrypoint: []string{"/usr/local/bin/tool"},
		Files: []File{{Path: "usr/local/bin/tool", Source: bin, Mode: 0o755}}}
	out := filepath.Join(dir, "img.tar")
	digest, err := img.WriteArchive(out)
	if err != nil {
		t.Fatal(err)
	}
	files := readArchive(t, out)
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Fatalf("oci-layout %q", files["oci-layout"])
	}
	blob := func(d descriptor) []byte {
		t.Helper()
		b, ok := files[blobPath(d.Digest)]
		if !ok {
			t.Fatalf("blob %s missing", d.Digest)
		}
		if digestOf(b) != d.Digest || int64(len(b)) != d.Size {
			t.Fatalf("blob %s: digest %s size %d, descriptor says size %d", d.Digest, digestOf(b), len(b), d.Size)
		}
		return b
	}
	var index struct{ Manifests []descriptor }
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json %s: %v", files["index.json"], err)
	}
	md := index.Manifests[0]
	if md.Digest != digest || md.MediaType != mediaManifest || md.Annotations["io.containerd.image.name"] != "docker.io/library/gvs:test" ||
		md.Annotations["org.opencontainers.image.ref.name"] != "test" {
		t.Fatalf("index entry %+v (returned digest %s)", md, digest)
	}
	var manifest struct {
		Config descriptor
		Layers []descriptor
	}
	if err := json.Unmarshal(blob(md), &manifest); err != nil || len(manifest.Layers) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	var config struct {
		Architecture, OS string
		Config           struct{ Entrypoint []string }
		Rootfs           struct {
			DiffIDs []string `json:"diff_ids"`
		}
	}
	if err := json.Unmarshal(blob(manifest.Config), &config); err != nil {
		t.Fatal(err)
	}
	if config.Architecture != "amd64" || config.OS != "linux" || len(config.Config.Entrypoint) != 1 || config.Config.Entrypoint[0] != "/usr/local/bin/tool" {
		t.Fatalf("config %+v", config)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(manifest.Layers[0])))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(zr)
	if len(config.Rootfs.DiffIDs) != 1 || config.Rootfs.DiffIDs[0] != digestOf(raw) {
		t.Fatalf("diff_ids %v, layer's uncompressed digest %s", config.Rootfs.DiffIDs, digestOf(raw))
	}
	layer := readTar(t, bytes.NewReader(raw))
	for _, d := range []string{"usr/", "usr/local/", "usr/local/bin/"} {
		if _, ok := layer[d]; !ok {
			t.Errorf("layer lacks directory %s", d)
		}
	}
	if string(layer["usr/local/bin/tool"]) != "\x7fELF tool" {
		t.Errorf("layer's tool %q", layer["usr/local/bin/tool"])
	}
	if _, ok := layer["usr/local/bin/tool#exec"]; !ok {
		t.Error("the tool is not executable in the layer")
	}

	// A real consumer, containers/image (skopeo), copies it: every
	// digest verified on the way.
	if sk, err := exec.LookPath("skopeo"); err == nil {
		if b, err := exec.Command(sk, "copy", "-q", "oci-archive:"+out, "dir:"+filepath.Join(dir, "copied")).CombinedOutput(); err != nil {
			t.Errorf("skopeo copy: %v\n%s", err, b)
		}
		b, err := exec.Command(sk, "inspect", "oci-archive:"+out).Output()
		var inspected struct{ Digest, Architecture, Os string }
		if err != nil || json.Unmarshal(b, &inspected) != nil || inspected.Digest != digest || inspected.Os != "linux" {
			t.Errorf("skopeo inspect: %v: %s", err, b)
		}
	} else if os.Getenv("CI") != "" {
		t.Error("skopeo is not installed (make deps installs it)")
	} else {
		t.Log("skopeo not installed: the archive was checked by this test's reader only")
	}

	// The same files make the same image.
	again, err := img.WriteArchive(filepath.Join(dir, "again.tar"))
	if err != nil || again != digest {
		t.Errorf("second build: %s %v, first %s", again, err, digest)
	}
}

func TestImageRefused(t *testing.T) {
	dir := t.TempDir()
	for _, img := range []Image{
		{Tag: "gvs", Arch: "amd64"},
		{Tag: "gvs:x", Arch: "amd64", Files: []File{{Path: "/abs", Source: "/dev/null"}}},
		{Tag: "gvs:x", Arch: "amd64", Files: []File{{Path: "../up", Source: "/dev/null"}}},
		{Tag: "gvs:x", Arch: "amd64", Files: []File{{Path: "usr/missing", Source: filepath.Join(dir, "missing")}}},
	} {
		if _, err := img.WriteArchive(filepath.Join(dir, "img.tar")); err == nil {
			t.Errorf("%+v: written", img)
		}
	}
}

func TestReference(t *testing.T) {
	for in, want := range map[string]string{
		"gvs:devel":                  "docker.io/library/gvs:devel",
		"me/gvs:1":                   "docker.io/me/gvs:1",
		"registry.k8s.io/pause:3.10": "registry.k8s.io/pause:3.10",
		"localhost/gvs:1":            "localhost/gvs:1",
		"reg:5000/gvs:1":             "reg:5000/gvs:1",
		"registry.k8s.io/e2e-test-images/agnhost:2.56": "registry.k8s.io/e2e-test-images/agnhost:2.56",
	} {
		if got := Reference(in); got != want {
			t.Errorf("Reference(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestImageSymlink(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "busybox")
	if err := os.WriteFile(bin, []byte("\x7fELF bb"), 0o700); err != nil {
		t.Fatal(err)
	}
	img := Image{Tag: "bb:1", Arch: "amd64", Cmd: []string{"sh"}, Env: []string{"PATH=/bin"},
		Files: []File{{Path: "bin/busybox", Source: bin, Mode: 0o755}, {Path: "bin/sh", Link: "busybox"}}}
	out := filepath.Join(dir, "img.tar")
	if _, err := img.WriteArchive(out); err != nil {
		t.Fatal(err)
	}
	files := readArchive(t, out)
	var index struct{ Manifests []descriptor }
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		Config descriptor
		Layers []descriptor
	}
	if err := json.Unmarshal(files[blobPath(index.Manifests[0].Digest)], &manifest); err != nil {
		t.Fatal(err)
	}
	var config struct{ Config struct{ Cmd, Env []string } }
	if err := json.Unmarshal(files[blobPath(manifest.Config.Digest)], &config); err != nil {
		t.Fatal(err)
	}
	if len(config.Config.Cmd) != 1 || config.Config.Cmd[0] != "sh" || len(config.Config.Env) != 1 || config.Config.Env[0] != "PATH=/bin" {
		t.Fatalf("config %+v", config)
	}
	zr, err := gzip.NewReader(bytes.NewReader(files[blobPath(manifest.Layers[0].Digest)]))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	found := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "bin/sh" {
			found = h.Typeflag == tar.TypeSymlink && h.Linkname == "busybox"
		}
	}
	if !found {
		t.Error("bin/sh is not a symbolic link to busybox in the layer")
	}
}
