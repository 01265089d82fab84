GO ?= go
BIN := bin/xema

.PHONY: build run test lint bench policy-test fuzz

build:
	$(GO) build -o $(BIN) ./cmd/xema

run: build
	./$(BIN) serve --addr 127.0.0.1:8181 --data-dir .xema --biomes biomes

test: build
	$(GO) test -count=1 ./...

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

policy-test:
	$(GO) run github.com/open-policy-agent/opa test policies/ -v --coverage --format=json > /dev/null
	$(GO) run github.com/open-policy-agent/opa test policies/ -v
