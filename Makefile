# shoal — see README.md. `make demo` runs the demo, `make test` runs all tests.
GO      ?= go
BIN     := bin
GOFLAGS ?=

.PHONY: all build static package dist deps test-deps test vet fuzz demo bench soak-ha proto clean docs man

all: build

# The version, commit and build date shoal version prints, stamped from git
# (a build with -buildvcs=false or from a tarball has no VCS information).
VERSION ?= $(shell scripts/version.sh)
COMMIT  ?= $(shell git describe --always --dirty --exclude='*' 2>/dev/null)
DATE    ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
STAMP   := -X github.com/shoal-lb/shoal/internal/cli.stampVersion=$(VERSION) -X github.com/shoal-lb/shoal/internal/cli.stampCommit=$(COMMIT) -X github.com/shoal-lb/shoal/internal/cli.stampDate=$(DATE)

build:
	$(GO) build $(GOFLAGS) -ldflags '$(STAMP)' -o $(BIN)/shoal ./cmd/shoal
	$(GO) build $(GOFLAGS) -o $(BIN)/demo-backend ./cmd/demo-backend
	$(GO) build $(GOFLAGS) -o $(BIN)/loadgen ./cmd/loadgen
	$(GO) build $(GOFLAGS) -o $(BIN)/shoal-bench ./cmd/shoal-bench

# deps installs what shoal needs at run time (HAProxy) when it is missing.
deps:
	@bash scripts/install-deps.sh haproxy

# test-deps adds what the monitoring tests run for real: promtool, amtool and
# Alertmanager (Debian's prometheus and prometheus-alertmanager packages), and
# the ssh tests' hosts: sshd in network namespaces (openssh-server, iproute2),
# moto, the AWS emulator the ec2 driver's tests run (in a virtualenv), and jq
# and flock, which the exec provider's test cloud (a shell script) uses;
# Chromium, in which the dashboard's test (and make bench) drive the page;
# keepalived, which the VIP tests run between network namespaces, and nft
# (nftables), with which a step-down holds new connections;
# and pebble, the ACME test CA, with pebble-challtestsrv as its DNS (the ACME
# tests also read the module's test/certs from the module cache);
# debootstrap, with which test/package makes the Debian root it installs the
# package into (cached in /var/cache/shoal-test, with the .debs apt fetches
# when the getting-started guide installs the package there), and file, which
# checks the package's binaries are static; podman (with buildah's and
# crun's dependencies) and docker-registry, with which the container
# tests build an image, push it to a registry on 127.0.0.1 and run it.
PEBBLE_VERSION := v2.10.1
test-deps:
	@bash scripts/install-deps.sh haproxy prometheus:promtool prometheus-alertmanager:amtool prometheus-alertmanager openssh-server:sshd openssh-client:ssh-keygen iproute2:ip jq util-linux:flock chromium etcd-server:etcd keepalived nftables:nft debootstrap file podman docker-registry
	@bash scripts/install-moto.sh
	$(GO) install github.com/letsencrypt/pebble/v2/cmd/pebble@$(PEBBLE_VERSION) github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv@$(PEBBLE_VERSION)

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...

# test runs every test: unit tests and the integration tests that start real
# HAProxy, real instance processes and real HTTP traffic on 127.0.0.1.
# scripts/test.sh runs the packages' tests beside the end-to-end suite's
# shared part, then the suite's steps alone, with the fuzz run niced beside
# them all. The
# packages' tests mostly wait (on HAProxy, sshd, keepalived, etcd, pebble,
# moto, child processes, apt), so more packages run at once than the
# machine has cores (go test's default -p): PKG_P of them.
E2E := ./test/e2e/
PKG_P ?= 4
test: test-deps vet
	GO=$(GO) PKG_P=$(PKG_P) E2E=$(E2E) bash scripts/test.sh

# docs regenerates the reference pages of docs/ from the code (internal/docgen):
# the config's keys, defaults and JSON Schema, the commands, the metrics
# (TestDocsUpToDate fails when one is stale).
docs:
	$(GO) run ./cmd/shoal-docs

# static builds the release binaries: no cgo (linked statically, checked by
# scripts/package.sh), no debug information, no build paths.
static:
	CGO_ENABLED=0 $(GO) build $(GOFLAGS) -trimpath -ldflags '-s -w $(STAMP)' -o build/static/shoal ./cmd/shoal
	CGO_ENABLED=0 $(GO) build $(GOFLAGS) -trimpath -ldflags '-s -w' -o build/static/demo-backend ./cmd/demo-backend

# package builds build/shoal_VERSION_amd64.deb with dpkg-deb: the binary, the
# systemd unit (examples/systemd/shoal.service), /etc/shoal/shoal.yaml, man pages,
# completions, and maintainer scripts (packaging/deb). test/package installs it
# into a throwaway Debian root.
package: static
	@bash scripts/package.sh deb build/static $(VERSION) build

# dist builds the release tarball build/shoal_VERSION_linux_amd64.tar.gz.
dist: static
	@bash scripts/package.sh dist build/static $(VERSION) build

# man writes a man page per command into build/man (man -l build/man/shoal.1).
man: build
	$(BIN)/shoal man build/man

# fuzz runs the config loader's fuzz target for longer.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 2m ./internal/config/

# demo: load rises and falls, the group scales out and in by its policy
# (bin/shoal-bench demo on examples/demo/shoal.yaml, about 3 minutes).
demo: deps build
	@$(BIN)/shoal-bench demo

# bench runs the benchmarks (cmd/shoal-bench) and writes bench/results/,
# which keeps the latest report of each (a run removes its older ones); all
# of them take about 65 minutes (hosts makes network namespaces, so it
# runs as root; clouds needs jq, flock and moto: make test-deps; dashboard
# saves its screenshots in bench/results/screenshots). BENCH picks
# some, BENCH_FLAGS passes flags on, e.g. make bench BENCH=overload BENCH_FLAGS='-minutes 2'.
BENCH       ?= throughput tls reaction collection overload iobound zero hosts hostdrain clouds dashboard gslb canary spike scale scalefaults
BENCH_FLAGS ?=
bench: build
	@bash scripts/install-deps.sh haproxy wrk nginx openssh-server:sshd openssh-client:ssh-keygen iproute2:ip chromium gdnsd
	@for b in $(BENCH); do $(BIN)/shoal-bench $$b $(BENCH_FLAGS) || exit 1; done

# soak-ha runs the HA pair's e2e test with 20 failovers under scale jobs
# instead of make test's 2 (the issue's "0 lost or repeated jobs across 20
# failovers") and 31 graceful step-downs under load instead of 3; network
# namespaces, so as root.
soak-ha: test-deps
	SHOAL_E2E_HA_FAILOVERS=20 SHOAL_E2E_HA_STEPDOWNS=31 $(GO) test -count=1 -timeout 30m -v -run '^TestHAPair$$' $(E2E)

# proto regenerates the committed gRPC code for the sacloud/autoscaler protocol.
proto:
	@bash tools/gen-proto.sh

clean:
	rm -rf $(BIN) build .shoal examples/demo/.shoal
