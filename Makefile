# director: see README.md. `make test` is what CI runs.
GO      ?= go
BIN     ?= bin/director
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

# The BPF object is built with a pinned compiler, so that regenerating it
# gives the committed bytes (CI checks).
BPF_CLANG ?= clang-14
BPF_STRIP ?= llvm-strip-14

.PHONY: all build test test-kernels bench lint fuzz clean generate check-generated check-headers demo demo-fleet demo-ipv6 lab lab-down install

all: build

# GOARCH=arm64 builds for arm64 (make build GOARCH=arm64 BIN=bin/director-arm64).
# STATIC=1 builds a static binary, which cannot load libpcap: capture
# refuses filter expressions (internal/format/pcapfilter).
STATIC ?=
BUILD_TAGS = $(if $(STATIC),-tags nolibpcap)
build:
	$(if $(STATIC),CGO_ENABLED=0) $(GO) build $(BUILD_TAGS) -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/director

# The binary and the systemd unit (docs/operations.md, "Running as a service"). The
# unit's paths follow PREFIX; DESTDIR stages an install for packaging.
PREFIX  ?= /usr/local
UNITDIR ?= /etc/systemd/system
ETCDIR  ?= /etc/director
install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/director
	install -d -m 0755 $(DESTDIR)$(UNITDIR) $(DESTDIR)$(ETCDIR)
	sed 's|/usr/local/bin/director|$(PREFIX)/bin/director|' cmd/director/systemd/director.service \
		> $(DESTDIR)$(UNITDIR)/director.service
	sed 's|/usr/local/bin/director|$(PREFIX)/bin/director|' cmd/director/systemd/director-backend.service \
		> $(DESTDIR)$(UNITDIR)/director-backend.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/director.service $(DESTDIR)$(UNITDIR)/director-backend.service
	@echo "installed $(PREFIX)/bin/director, $(UNITDIR)/director.service and director-backend.service; on a director, put" \
		"the configs in $(ETCDIR), then: systemctl daemon-reload && systemctl enable --now director; on a backend:" \
		"systemctl enable --now director-backend"

# The table package is tested twice: with the vector scoring path this CPU
# has, and with the portable one (-tags purego), so both stay correct.
# The race detector on the pure packages and the service's (their tests
# run goroutines against each other); a race fails the run. Vector tests
# fail rather than skip where DIRECTOR_VECTOR_TESTS=required: wherever the
# CPU has AVX-512F and BW, as /proc/cpuinfo says (independently of the Go
# code's own detection, which the tests check); on a CPU without them the
# tests say so and skip, and the portable path is what runs.
DIRECTOR_VECTOR_TESTS ?= $(shell grep -qw avx512f /proc/cpuinfo 2>/dev/null && grep -qw avx512bw /proc/cpuinfo && echo required)
RACE_PKGS = ./table/... ./internal/change ./internal/service ./internal/service/health ./internal/service/bgp ./internal/datapath/model ./internal/datapath/classify \
	./internal/format/pcapfile ./internal/replay ./internal/datapath/chunk ./internal/datapath/gue ./internal/lab/vmtest ./internal/lab/golden ./internal/picture
# Test artifacts (the status page's screenshots) are kept in ARTIFACTS.
ARTIFACTS ?= $(CURDIR)/test-artifacts
# The NIC tests (TestNIC...) need virtio-net NICs of their own, which the
# guests of 'make test-kernels' have and the host does not: they are left
# to the guests, where a missing NIC fails them (testenv.NICs).
# The table's property tests run all their random cases here
# (DIRECTOR_PROPERTY_TESTS=full); a plain 'go test ./table/...' runs a
# third of them, to stay quick. The testbed's package takes about ten
# minutes, go test's default limit: it gets thirty.
test: lint
	mkdir -p $(ARTIFACTS)
	DIRECTOR_KERNEL_TESTS=required DIRECTOR_PROPERTY_TESTS=full DIRECTOR_VECTOR_TESTS=$(DIRECTOR_VECTOR_TESTS) $(GO) test -count=1 -timeout 30m -skip '^TestNIC' -artifacts -outputdir $(ARTIFACTS) ./...
	DIRECTOR_PROPERTY_TESTS=full $(GO) test -count=1 -tags purego ./table
	$(GO) test -count=1 -tags nolibpcap ./internal/format/pcapfilter
	DIRECTOR_KERNEL_TESTS=required DIRECTOR_PROPERTY_TESTS=full $(GO) test -race -count=1 $(RACE_PKGS)

# The kernel tests again, inside each kernel of internal/lab/vmtest/kernels.go
# (Debian 11's 5.10, Debian 12's 6.1 and 6.12) booted under qemu, with
# virtio-net NICs for the NIC tests; the kernel packages are
# downloaded into a cache the first time (docs/development.md, "Older
# kernels"). As root, after 'make test', which covers the host's kernel.
test-kernels:
	$(GO) run ./internal/lab/vmtest $(VMTEST_FLAGS)

# Table builds, then (as root) the datapath: program cost on real veth
# traffic beside an empty XDP_TX program, and full apply vs per-element.
# The main job on a fresh machine, as root: a testbed of namespaces, real
# TCP through the director, a reviewed drain that breaks no connection.
demo: build
	$(GO) run ./internal/lab/demo --director $(BIN)

# Three directors behind a BIRD router: one fails, its connections carry on.
demo-fleet: build
	$(GO) run ./internal/lab/demo --director $(BIN) --fleet

demo-ipv6: build
	$(GO) run ./internal/lab/demo --director $(BIN) --ipv6

# The testbed left running to try commands in (it prints them); lab-down
# removes it, and whatever a failed 'make lab' left.
LAB_NAME ?= lab
LAB_BIN  ?= bin/director-lab
lab: build
	$(GO) build -o $(LAB_BIN) ./internal/lab/demo
	$(LAB_BIN) --director $(BIN) --lab up --lab-name $(LAB_NAME)

lab-down:
	$(GO) run ./internal/lab/demo --lab down --lab-name $(LAB_NAME)

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./table
	$(GO) test -run '^$$' -bench 'Classif|Parse' ./internal/datapath/model
	$(GO) test -run '^$$' -bench Read ./internal/format/pcapfile
	$(GO) test -run '^$$' -bench Program -benchtime 1000000x ./loader
	$(GO) test -run '^$$' -bench Apply -benchtime 10x ./loader
	$(GO) test -run '^$$' -bench HealthFlip -benchtime 200x ./internal/service
	$(GO) test -run '^$$' -bench Picture -benchtime 10x ./internal/picture
	$(GO) test -run '^$$' -bench StatusPage ./internal/service
	$(GO) test -run '^$$' -bench ConfigEdit ./internal/service
	$(GO) test -run '^$$' -bench WholeProcess -benchtime 5x ./cmd/director

generate:
	cd bpf && BPF_CLANG=$(BPF_CLANG) BPF_STRIP=$(BPF_STRIP) $(GO) generate ./...

# Regenerates the BPF object and Go types and fails if they differ from
# what is committed; and checks that every C header compiles on its own,
# in both builds (each includes what it uses).
check-generated: generate check-headers
	@git diff --exit-code --stat -- bpf/ || { echo "bpf/: generated files are stale: run 'make generate' and commit them"; exit 1; }

check-headers:
	@cd bpf && for def in "" -DDIR_SINGLE_BUFFER; do for h in *.h; do \
		$(BPF_CLANG) -target bpf -O2 -Wall -Werror -nostdinc -I./include $$def -fsyntax-only -x c -include $$h /dev/null \
			|| { echo "bpf/$$h does not compile on its own ($$def): it must include what it uses"; exit 1; }; \
	done; done

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags purego ./table
	$(GO) vet -tags nolibpcap ./internal/format/pcapfilter ./cmd/director
	GOARCH=arm64 $(GO) vet ./cmd/director ./loader/... ./internal/lab/vmtest
	# The table tools review changes on an operator's laptop too.
	GOOS=darwin $(GO) build ./table/... ./internal/change ./loader/mapimage ./internal/datapath/model ./internal/datapath/classify ./internal/format/pcapfile ./internal/datapath/pkt ./internal/datapath/gue ./internal/replay ./internal/datapath/chunk

# Short fuzzing sessions for the two parsers of untrusted input.
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParseConfig -fuzztime $(FUZZTIME) ./table/config
	$(GO) test -run '^$$' -fuzz FuzzReadGLB -fuzztime $(FUZZTIME) ./table

clean:
	rm -rf bin
