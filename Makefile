# gvs — a Go-native replacement for Open vSwitch in an OpenShift-SDN-style pod network.
# `make help` lists the targets.

GO      ?= go
BIN     := bin
GOBIN   := $(shell $(GO) env GOPATH)/bin
PKGS    := ./...
# The packages tests run in: all but the prototypes in experiments/, which
# are kept building and vetted but are not part of gvs (README, "Layout").
TESTPKGS = $(shell $(GO) list ./... | grep -v '/experiments/')
# Debian packages the tests and the demo use (installed by `make deps` when root).
DEB_PKGS := iproute2 iputils-ping procps iperf3 tcpdump tshark ethtool openvswitch-switch etcd-server etcd-client containernetworking-plugins iptables nftables skopeo \
  containerd runc busybox-static curl netcat-openbsd bind9-dnsutils nfdump chromium libnss3-tools openssl
# Fuzzing budgets are counts of executions, not durations: with a duration, Go
# before 1.27 can fail a target with a bare "context deadline exceeded" when
# the deadline races a busy worker (golang/go#75804). A count also bounds the
# minimisation of each new input, which with a duration may take up to 60 s.
FUZZTIME ?= 50000x
# staticcheck is pinned: 2026.2.2 (module version v0.8.2) is the release built
# for go 1.26. `make staticcheck` reinstalls it when the one in GOPATH/bin is
# another version, and the lint targets run that one, whatever else is on PATH.
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK = $(GOBIN)/staticcheck
CNITOOL_VERSION ?= v1.3.1
# The image make image names (deploy/kustomization.yaml sets the same).
IMAGE ?= gvs:devel

export PATH := $(PATH):$(GOBIN):/usr/local/go/bin

.PHONY: help build image deps tools staticcheck kube-tools kube-images e2e-test check docs vet lint test test-slow test-upgrade test-race test-scale fuzz fuzz-long bench bench-compare demo demo-down clean e2e-upstream console-screenshots

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build every binary into bin/
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...
	@mkdir -p $(BIN)/cni && ln -sf ../gvs-cni $(BIN)/cni/gvs # a CNI_PATH dir: the plugin's file name is its type

image: ## build the container image deploy/ runs (static binaries, one layer) as an OCI archive: bin/gvs-image.tar
	$(GO) run ./deploy/image -o $(BIN)/gvs-image.tar -tag $(IMAGE)

deps: ## install the Debian packages the tests and the demo need (as root)
	@if [ "$$(id -u)" = 0 ]; then \
	  missing=""; for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	  if [ -n "$$missing" ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing >/dev/null; \
	  fi; \
	else echo "not root: skipping Debian packages ($(DEB_PKGS))"; fi

tools: staticcheck ## install Go tools (staticcheck, cnitool)
	@command -v cnitool >/dev/null 2>&1 || GOFLAGS= $(GO) install github.com/containernetworking/cni/cnitool@$(CNITOOL_VERSION)

staticcheck: ## install the pinned staticcheck (STATICCHECK_VERSION) into GOPATH/bin unless it is there already
	@$(STATICCHECK) -version 2>/dev/null | grep -qF '($(STATICCHECK_VERSION:v%=%))' || \
	  GOFLAGS= GOBIN=$(GOBIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# The Kubernetes programs the tests run (the control plane, and the kubelet,
# kube-proxy and kubectl of the real-node lab), built from the k8s.io/kubernetes
# module in the separate module tools/kube (so the product's go.mod never requires
# it), in one `go build` (15-20 minutes cold on 2 cores, then cached:
# docs/kubernetes.md). They are rebuilt only when tools/kube/go.mod or go.sum is
# newer than them.
KUBE_CMDS    := kube-apiserver kube-proxy kube-controller-manager kube-scheduler kubelet kubectl
KUBE_TOOLS   := $(addprefix $(BIN)/,$(KUBE_CMDS))
KUBE_VERSION := $(shell sed -n 's|^require k8s.io/kubernetes \(v[0-9.]*\).*|\1|p' tools/kube/go.mod)
KUBE_LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
  -X k8s.io/component-base/version.gitMajor=$(word 2,$(subst ., ,$(KUBE_VERSION:v%=x.%))) \
  -X k8s.io/component-base/version.gitMinor=$(word 3,$(subst ., ,$(KUBE_VERSION:v%=x.%)))

kube-tools: $(KUBE_TOOLS) ## build the Kubernetes programs into bin/ (API server, controllers, kubelet, kube-proxy, kubectl)

$(KUBE_TOOLS) &: tools/kube/go.mod tools/kube/go.sum
	@mkdir -p $(BIN)
	cd tools/kube && GOFLAGS=-buildvcs=false $(GO) build -o ../../$(BIN)/ -ldflags "$(KUBE_LDFLAGS)" \
	  $(addprefix k8s.io/kubernetes/cmd/,$(KUBE_CMDS))
	@touch $(KUBE_TOOLS)

# Upstream's end-to-end tests (the network suites; tools/kube/e2e).
E2E_TEST := $(BIN)/e2e.test
e2e-test: $(E2E_TEST) ## build upstream's e2e.test (the [sig-network] suites) into bin/

$(E2E_TEST): tools/kube/go.mod tools/kube/go.sum tools/kube/e2e/e2e_test.go
	@mkdir -p $(BIN)
	cd tools/kube && GOFLAGS=-buildvcs=false $(GO) test -c -o ../../$(E2E_TEST) -ldflags "$(KUBE_LDFLAGS)" ./e2e

# The images the real-node lab's containerd imports: pause, agnhost, busybox,
# glibc-dns-testing (the DNS suite's prober) and the cluster DNS, CoreDNS, built from source (internal/kubetest/mkimages).
# CoreDNS comes from its Go module in the separate module tools/coredns, so its
# dependency versions never meet k8s.io/kubernetes's (a few minutes cold, then
# cached).
KUBE_IMAGES := $(addprefix $(BIN)/images/,pause.tar agnhost.tar busybox.tar glibc-dns-testing.tar coredns.tar)
kube-images: $(KUBE_IMAGES) ## build the lab's pause, agnhost, busybox, glibc-dns-testing and CoreDNS images (OCI archives in bin/images)

$(KUBE_IMAGES) &: tools/kube/go.mod tools/kube/go.sum tools/coredns/go.mod tools/coredns/go.sum tools/coredns/main.go internal/kubetest/pause/main.go internal/kubetest/wget/main.go $(wildcard internal/kubetest/mkimages/*.go internal/ociimage/*.go)
	$(GO) run ./internal/kubetest/mkimages -o $(BIN)/images

# The dataplane packages that must build on any OS (Linux-only code lives in _linux.go files).
PORTABLE := ./packet/ ./port/ ./port/busypoll/ ./flowtable/ ./vswitch/ ./tap/ ./vxlan/

vet: staticcheck ## gofmt, go vet, staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(STATICCHECK) $(PKGS)

lint: tools vet ## vet, and the portable dataplane built for darwin
	GOOS=darwin GOARCH=arm64 $(GO) build $(PORTABLE)

# The contributor's check before a commit: no root, no Debian packages, no
# Kubernetes build; a few minutes on a warm build cache. Tests that need root
# skip when not root and slow ones skip under -short; `make test` runs them all.
# go test's own vet pass is off: make vet ran all of go vet just before.
check: vet docs ## the quick check for contributors, no root needed: gofmt, go vet, staticcheck, docs, go test -short
	$(GO) test -short -vet=off -timeout 10m $(TESTPKGS)
	@echo "make check: all passed"

docs: ## check that the links and repository paths in every committed *.md (README.md, docs/, bench/results/) exist
	$(GO) test -count=1 ./internal/docscheck/

# make test runs its tests in two lanes at once. The real-node lane
# (TestRealNodes*: kubelets, containerd, upstream's e2e.test) mostly waits on
# the lab's programs; it needs the lab's images and e2e.test, which it builds
# first while the other lane's tests run. The other lane is every other test
# of every package, except the benchmark harness's (make test-slow). A lane's
# output is kept in $(TESTLOG)/ and the real-node lane's is printed at its end.
TESTLOG       ?= $(BIN)/test-logs
REALNODE_TESTS := ^TestRealNodes
HARNESS_TESTS  := ^(TestCompare|TestTrials)$$
test: deps lint build kube-tools image ## everything but test-slow: lint, unit tests, namespace and real-node tests (as root), brief fuzzing
	@mkdir -p $(TESTLOG)
	@( $(MAKE) --no-print-directory kube-images e2e-test && \
	   $(GO) test -count=1 -timeout 45m -run '$(REALNODE_TESTS)' ./internal/e2e/ ) >$(TESTLOG)/realnodes.log 2>&1 & lane=$$!; \
	$(GO) test -count=1 -timeout 45m -skip '$(REALNODE_TESTS)|$(HARNESS_TESTS)' $(TESTPKGS); rc=$$?; \
	wait $$lane; lrc=$$?; \
	echo "--- real-node lane (make kube-images e2e-test; go test -run '$(REALNODE_TESTS)' ./internal/e2e/): exit $$lrc"; \
	cat $(TESTLOG)/realnodes.log; \
	[ $$rc = 0 ] && [ $$lrc = 0 ]
	@$(MAKE) --no-print-directory fuzz
	@echo "make test: all passed"

# The live upgrade through the DaemonSet on real nodes, five times
# (docs/operations.md); make test runs it once.
test-upgrade: deps build kube-tools image kube-images ## the DaemonSet live-upgrade test on real nodes, 5 runs
	$(GO) test -count=5 -timeout 60m -run '^TestRealNodesUpgrade$$' -v ./internal/e2e/

test-slow: deps build kube-tools ## the benchmark harness's tests (gvs-bench compare and trials) and the control-plane scale test
	$(GO) test -count=1 -timeout 20m -run '$(HARNESS_TESTS)' ./internal/e2e/
	@$(MAKE) --no-print-directory test-scale

# Upstream's full focuses on one real-node cluster (an hour or more): the
# NetworkPolicy suite, the Networking Granular Checks, Services, HostPort and
# DNS (E2E_DNS_FOCUS/E2E_DNS_SKIP replace DNS's). Each spec's result goes into
# $(E2E_RESULTS)/results.md (docs/kubernetes.md quotes it); E2E_ONLY picks
# some focuses (netpol,granular,services,hostport,dns); E2E_NODES the number of
# nodes (2; a few specs need 3); E2E_FOCUS (and E2E_SKIP) runs one focus of
# your own instead.
E2E_RESULTS   ?= $(BIN)/e2e-upstream
E2E_DNS_FOCUS ?=
E2E_DNS_SKIP  ?=
E2E_ONLY      ?=
E2E_NODES     ?= 2
E2E_FOCUS     ?=
E2E_SKIP      ?=
e2e-upstream: deps build kube-tools image kube-images e2e-test ## upstream's full [sig-network] focuses on the real-node lab; results in bin/e2e-upstream/results.md
	GVS_E2E_UPSTREAM=1 GVS_E2E_RESULTS='$(abspath $(E2E_RESULTS))' GVS_E2E_ONLY='$(E2E_ONLY)' GVS_E2E_NODES='$(E2E_NODES)' \
	GVS_E2E_FOCUS='$(E2E_FOCUS)' GVS_E2E_SKIP='$(E2E_SKIP)' \
	GVS_E2E_DNS_FOCUS='$(E2E_DNS_FOCUS)' GVS_E2E_DNS_SKIP='$(E2E_DNS_SKIP)' \
	$(GO) test -count=1 -v -timeout 6h -run '^TestRealNodesUpstreamFull$$' ./internal/e2e/

console-screenshots: deps build ## rewrite docs/console/*.png from TestConsoleBrowser (headless Chromium in the lab)
	GVS_UPDATE_SCREENSHOTS=1 $(GO) test -count=1 -v -run '^TestConsoleBrowser$$' ./internal/e2e/

test-race: deps kube-tools image kube-images ## unit and namespace tests under the race detector
	$(GO) test -race -count=1 -timeout 30m $(TESTPKGS)

# The scale test runs gvs-master (embedded etcd) on loopback; as root it runs
# in a throwaway network namespace, so nothing listens in the machine's own.
SCALE_TEST = env GVS_SCALE=1 $(GO) test -count=1 -timeout 15m -run '^TestControlPlaneScale$$' -v ./internal/daemon/etcdsource/
test-scale: ## control-plane scale test: gvs-master, 500 simulated nodes, 2000 projects (GVS_SCALE_NODES, GVS_SCALE_PROJECTS)
	@if [ "$$(id -u)" = 0 ]; then \
	  ns=gvs-scale-$$$$; ip netns add $$ns || exit 1; ip -n $$ns link set lo up; \
	  ip netns exec $$ns $(SCALE_TEST); rc=$$?; ip netns del $$ns; exit $$rc; \
	else $(SCALE_TEST); fi

fuzz: ## run every fuzz target briefly (FUZZTIME executions each, default 50000x)
	@set -e; for pkg in $(TESTPKGS); do \
	  for t in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$t"; \
	    $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg >/tmp/gvs-fuzz.log 2>&1 || { cat /tmp/gvs-fuzz.log; exit 1; }; \
	  done; \
	done

fuzz-long: ## fuzz every target for longer (5 million executions each)
	@$(MAKE) --no-print-directory fuzz FUZZTIME=5000000x

bench: ## Go benchmarks of the data path (allocs included)
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./flowtable/ ./vxlan/ ./tap/ ./packet/ ./vswitch/ ./conntrack/

bench-compare: deps build ## gvs vs the floor, the kernel and Open vSwitch on the same lab topology (as root; writes bench-compare.json/.svg; docs/benchmarks.md)
	$(BIN)/gvs-bench compare -runs 3 -o bench-compare.json -plot bench-compare.svg

demo: deps build $(if $(filter kube netpol cluster,$(MODE)),kube-tools) $(if $(filter cluster,$(MODE)),kube-images image) ## bring up a 2-node demo cluster in network namespaces (as root); MODE=kube: with a Kubernetes API server; MODE=netpol: that in networkpolicy mode; MODE=cluster: real Kubernetes nodes (containerd, kubelet), gvs installed with kubectl
	$(BIN)/gvs-demo up -mode $(or $(MODE),etcd)

demo-down: ## remove everything the demo created (both kinds)
	@if [ -x $(BIN)/gvs-demo ]; then $(BIN)/gvs-demo down; else $(GO) run ./cmd/gvs-demo down; fi

clean: ## remove build output
	rm -rf $(BIN)
