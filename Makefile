# director: see README.md. `make test` is what CI runs.
GO      ?= go
BIN     ?= bin/director
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: all build test bench lint fuzz clean

all: build

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/director

# The table package is tested twice: with the vector scoring path this CPU
# has, and with the portable one (-tags purego), so both stay correct.
test: lint
	$(GO) test -count=1 ./...
	$(GO) test -count=1 -tags purego ./table

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./table

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags purego ./table

# Short fuzzing sessions for the two parsers of untrusted input.
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParseConfig -fuzztime $(FUZZTIME) ./table
	$(GO) test -run '^$$' -fuzz FuzzReadGLB -fuzztime $(FUZZTIME) ./table

clean:
	rm -rf bin
