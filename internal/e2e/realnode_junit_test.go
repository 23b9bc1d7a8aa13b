package e2e

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReadJUnit reads a JUnit report as e2e.test writes it: the specs
// ("[It] ..."), their ginkgo status, the label suffix removed, the suite's
// setup nodes left out.
func TestReadJUnit(t *testing.T) {
	dir := t.TempDir()
	report := `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="4">
  <testsuite name="Kubernetes e2e suite" tests="4">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed"></testcase>
    <testcase name="[It] [sig-network] Services should release NodePorts on delete" classname="Kubernetes e2e suite" status="passed"></testcase>
    <testcase name="[It] [sig-network] Services should serve multiport endpoints from pods [Conformance] [sig-network, Conformance]" classname="Kubernetes e2e suite" status="failed"><failure>x</failure></testcase>
    <testcase name="[It] [sig-network] HostPort validates that there is no conflict [LinuxOnly] [Conformance] [sig-network, Conformance]" classname="Kubernetes e2e suite" status="skipped"></testcase>
  </testsuite>
</testsuites>`
	if err := os.WriteFile(filepath.Join(dir, "junit_01.xml"), []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readJUnit(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []specResult{
		{"[sig-network] HostPort validates that there is no conflict [LinuxOnly] [Conformance]", "skipped"},
		{"[sig-network] Services should release NodePorts on delete", "passed"},
		{"[sig-network] Services should serve multiport endpoints from pods [Conformance]", "failed"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("spec %d: got %v, want %v", i, got[i], want[i])
		}
	}
	if _, err := readJUnit(t.TempDir()); err == nil {
		t.Error("a directory without a report read as an empty one")
	}
}
