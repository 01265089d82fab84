GO ?= go
BIN := bin/xema
# The commit and version for `xema version` where the toolchain cannot stamp them itself
# (a git worktree, a tarball): see internal/buildinfo.
BUILDINFO := github.com/xemahq/xema/internal/buildinfo
LDFLAGS := -X $(BUILDINFO).commit=$(shell git rev-parse HEAD 2>/dev/null) -X $(BUILDINFO).version=$(shell git describe --tags --always --dirty 2>/dev/null)

.PHONY: help build run run-image test unit lint bench policy-test fuzz bundle cover image

# make help lists the targets: each documented by a '## ' comment on its line.
help: ## list the targets
	@awk -F':.*## ' '/^[a-z-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build bin/xema
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/xema

# The demo bundle (bundles/README.md): the Rego of policies/ with bundles/demo/data.json.
bundle: build ## build the demo policy bundle (bundles/demo.tar.gz)
	./$(BIN) bundle build -o bundles/demo.tar.gz --data bundles/demo/data.json --revision demo

# make run ADDR=0.0.0.0:9000 listens elsewhere.
ADDR ?= 127.0.0.1:8181
run: build ## run the gateway on its embedded default (SQLite, development issuer, the demo biome) on ADDR
	./$(BIN) serve --addr $(ADDR) --data-dir .xema --biomes biomes --dev-grant demo

# The container tests (test/e2e/container_test.go) run on their own with -v, so that where
# podman cannot run their SKIP line is seen. The chart checks are a module of their own
# (deploy/helm/chartcheck: the k8s.io/api types stay out of the gateway's go.mod).
CHARTCHECK := deploy/helm/chartcheck
test: build policy-test ## every test: unit, e2e (real PostgreSQL, hydra, Gitea, npm MCP servers, Chromium), containers, chart, race
	$(GO) test -count=1 -timeout 30m -skip '^TestContainer' ./...
	$(GO) test -count=1 -timeout 20m -v -run '^TestContainer' ./test/e2e
	cd $(CHARTCHECK) && XEMA_BIN=$(abspath $(BIN)) $(GO) test -count=1 -timeout 20m ./...
	$(GO) test -race -short -count=1 -timeout 30m $(RACE_PKGS)

# The unit tests: the packages whose tests start no service (no PostgreSQL, no hydra, no stock
# opa build, no gateway binary), in seconds rather than minutes.
UNIT_PKGS = $(shell $(GO) list -f '{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./... | grep -v -E 'testpg|hydratest|opatest|/test/(e2e|load)' | cut -d' ' -f1)
unit: ## the fast tests: packages whose tests start no service
	$(GO) test -count=1 -short $(UNIT_PKGS)

# The OCI image (deploy/image): a static binary on an empty base, built with podman.
IMAGE ?= xema:$(shell git describe --tags --always --dirty 2>/dev/null)
image: ## build the OCI image with podman
	deploy/image/build.sh $(IMAGE)

# The image run as `make run` runs the binary (docs/operations.md, "The image"): the demo biome
# mounted, SQLite and the development issuer in the volume xema-data. containers.conf as
# build.sh uses it: podman on hosts like the development VM refuses to run without it.
CONTAINERS_CONF := $(or $(CONTAINERS_CONF),$(abspath deploy/image/containers.conf))
run-image: image ## build the image and run it on ADDR like make run (the demo biome mounted, data in the volume xema-data)
	CONTAINERS_CONF=$(CONTAINERS_CONF) podman run --rm --read-only --read-only-tmpfs=false -p $(ADDR):8181 \
		-v xema-data:/data -v $(abspath biomes):/biomes:ro $(IMAGE) \
		serve --addr 0.0.0.0:8181 --data-dir /data --biomes /biomes --dev-grant demo

# The packages whose concurrency the race detector checks in CI (-short: a sample of the
# large corpora, the race detector slowing evaluation ~10x).
RACE_PKGS := ./internal/policy ./internal/gateway ./internal/approval ./internal/idempotency ./internal/outage

# The differential test (internal/policy: the gateway's decisions vs stock OPA's evaluation
# of the same bundle over generated grants, platform Rego and inputs) over new seeds for
# FUZZTIME (CI runs its fixed seeds only).
FUZZTIME ?= 10m
fuzz: ## the differential test over new seeds for FUZZTIME
	$(GO) test -count=1 -timeout 0 -run '^TestDifferential$$' ./internal/policy -diff.duration $(FUZZTIME) -v

# golangci-lint at a pinned version (config: .golangci.yml), installed into bin/ on first use.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := bin/golangci-lint-$(GOLANGCI_LINT_VERSION)/golangci-lint

$(GOLANGCI_LINT):
	GOBIN=$(abspath $(dir $@)) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

lint: $(GOLANGCI_LINT) ## gofmt, go vet, golangci-lint
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GOLANGCI_LINT) run --timeout 15m ./...
	cd $(CHARTCHECK) && $(GO) vet ./... && $(abspath $(GOLANGCI_LINT)) run --timeout 15m ./...

# The stock opa of the version in go.mod, for the load run's comparison.
OPA := bin/opa-$(shell $(GO) list -m -f '{{.Version}}' github.com/open-policy-agent/opa)

$(OPA):
	$(GO) build -o $@ github.com/open-policy-agent/opa

# The go benchmarks of the funnel's steps (a fixed count each, so the whole stays short; with
# BenchmarkConnectionCall, a federated call with the gateway's static token and through a
# connection, side by side in one process),
# then the load harness on both engines (test/load: the funnel, cached and cache-defeating,
# against the direct no-op provider, the bare proxy, the audited floor, the bare proxy on the
# gateway's audit log and stock OPA; CPU per call of each process, the gateway's RSS and
# profile, and the funnel ÷ floor ratios of RPS, CPU per call and p99, then their ranges over
# 3 more alternating rounds of the floor and the funnel). ~5 minutes.
BENCH := BenchmarkDecision|BenchmarkTake|BenchmarkAppend|BenchmarkVerify|BenchmarkBoundBody|BenchmarkValidate$$|BenchmarkLinkHash|BenchmarkSign|BenchmarkCachedToken|BenchmarkConnectionCall
BENCH_PKGS := ./internal/policy ./internal/ratelimit ./internal/audit ./internal/identity ./internal/server ./internal/inputschema ./internal/txntoken ./internal/exchange ./internal/app
bench: build $(OPA) ## the Go benchmarks of the funnel's steps, then the load harness on both engines (~5 min)
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime 200x -benchmem $(BENCH_PKGS)
	$(GO) test -run '^$$' -bench 'BenchmarkSearch$$|BenchmarkDescribe|BenchmarkSearchable' -benchtime 5x ./internal/metatool ./internal/policy
	$(GO) run ./test/load -xema $(BIN) -opa $(OPA) -engines sqlite,postgres -workers 16 -duration 5s -warmup 1s -rounds 3 -cpuprofile bin/bench-profiles

# Stock OPA (a tool dependency in go.mod) runs the Rego tests; coverage must stay at 90% or more.
# The example platform policy's tests run beside the built-in ones (docs/platform-policy.md).
policy-test: ## stock opa test over policies/ (coverage 90% or more) and examples/policies/
	$(GO) tool opa test policies/ --coverage --threshold 90 > /dev/null
	$(GO) tool opa test policies/ examples/policies/

# Go statement coverage of the module's own packages (cmd/, internal/, schemas/), printed
# twice over one denominator (tools/cover/percent.awk): from the unit tests alone (every
# package but test/), then from the unit tests and the e2e suite run against a cover-built
# binary (XEMA_E2E_BIN, GOCOVERDIR). Rego coverage is policy-test's, not counted here.
# E2E_RUN narrows the e2e run (a go test -run pattern).
COVER := .cover
COVERPKG := ./cmd/...,./internal/...,./schemas/...
E2E_RUN ?= .
cover: ## Go statement coverage: unit tests alone, then with the e2e suite
	rm -rf $(COVER) && mkdir -p $(COVER)/unit $(COVER)/e2e
	$(GO) test -count=1 -timeout 30m -cover -coverpkg=$(COVERPKG) $$($(GO) list ./... | grep -v /test/) -args -test.gocoverdir=$(abspath $(COVER)/unit) > $(COVER)/unit.log || { tail -n 50 $(COVER)/unit.log; exit 1; }
	$(GO) build -cover -coverpkg=$(COVERPKG) -o $(COVER)/xema ./cmd/xema
	GOCOVERDIR=$(abspath $(COVER)/e2e) XEMA_E2E_BIN=$(abspath $(COVER)/xema) $(GO) test -count=1 -timeout 60m -run '$(E2E_RUN)' ./test/e2e > $(COVER)/e2e.log || { tail -n 50 $(COVER)/e2e.log; exit 1; }
	$(GO) tool covdata textfmt -i=$(COVER)/unit -o $(COVER)/unit.out
	$(GO) tool covdata textfmt -i=$(COVER)/unit,$(COVER)/e2e -o $(COVER)/all.out
	@echo "(e2e run: -run '$(E2E_RUN)'; both over the statements of every package in the cover-built binary or a unit test binary)"
	@awk -f tools/cover/percent.awk $(COVER)/unit.out $(COVER)/all.out
