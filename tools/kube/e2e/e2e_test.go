// Package e2e builds upstream Kubernetes' end-to-end test binary with the
// suites gvs is judged by: `go test -c -o e2e.test ./e2e` in tools/kube
// (make e2e-test). It is upstream's test/e2e/e2e_test.go cut down to the
// network suites ([sig-network]: NetworkPolicy, Networking, Services,
// HostPort, DNS) and the common tests package e2e registers itself (the
// Networking Granular Checks are there); the tests themselves are
// upstream's, unchanged.
package e2e

import (
	"flag"
	"os"
	"testing"

	"k8s.io/kubernetes/test/e2e"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"
	testfixtures "k8s.io/kubernetes/test/fixtures"

	// Define and freeze the feature constants, as upstream's binary does.
	_ "k8s.io/kubernetes/test/e2e/feature"
	// The suites.
	_ "k8s.io/kubernetes/test/e2e/network"
	// Reconfigure the framework, as upstream's binary does.
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/utils/ktesting/format"
)

func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	testfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
	testfiles.AddFileSource(testfixtures.GetTestFixturesFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

func TestE2E(t *testing.T) { e2e.RunE2ETests(t) }
