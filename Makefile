# mdtrace: Android's malloc debug for Linux, with eBPF.
#
#   make install   install mdtrace, its shim and mdreplay, libmdtrace and its header,
#                  pkg-config file and the man page under PREFIX (/usr/local),
#                  in DESTDIR if given; make uninstall removes them
#   make demo      build, then trace a leaking program and show its reports
#   make test      every test: unit, golden and real-eBPF integration (as root)
#   make bench     side-by-side overhead measurements
#   make generate  rebuild the committed BPF objects with clang, abi/abi.go
#                  from abi/mdtrace_abi.h, and the man page docs/mdtrace.1
#                  from the flag definitions
#   make test-kernels  the smoke suite under other kernels (KERNELS="6.1 6.12", OLD_KERNELS=5.10)
#
# The targets install what they need (Debian packages) when it is missing.

GO      ?= go
CC      ?= cc
SHELL   := /bin/bash
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
GOFLAGS_BUILD := -trimpath -ldflags "-X main.version=$(VERSION)"

# Packages needed to build and test: C compiler for the test programs and the
# shim, clang and bpftool to regenerate and check the BPF objects, jemalloc
# and tcmalloc to trace other allocators than glibc's.
DEBIAN_PACKAGES := clang llvm libbpf-dev bpftool gcc make libjemalloc2 libtcmalloc-minimal4
LIBDIR := /usr/lib/x86_64-linux-gnu
# Fuzzing runs a count of inputs per target, not a time: with a duration,
# Go 1.26's fuzzing coordinator can fail a target with "context deadline
# exceeded" as the time runs out, with no failing input (go.dev/issue/75804,
# fixed in Go 1.27). 200000 inputs take 3 to 30 s a target here.
FUZZTIME ?= 200000x

.PHONY: all build deps generate testprogs test unit integration fuzz demo bench clean smoke-build test-kernels install uninstall

all: build

deps:
	@missing=""; optional=""; \
	for p in clang bpftool gcc; do command -v $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	for l in libjemalloc.so.2 libtcmalloc_minimal.so.4; do [ -e $(LIBDIR)/$$l ] || optional="$$optional $$l"; done; \
	if [ -n "$$missing$$optional" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing Debian packages for:$$missing$$optional"; \
			DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEBIAN_PACKAGES) >/dev/null; \
		elif [ -n "$$missing" ]; then \
			echo "missing:$$missing; install: apt-get install $(DEBIAN_PACKAGES)" >&2; exit 1; \
		else \
			echo "not installed:$$optional (the tests of other allocators will skip)" >&2; \
		fi; \
	fi

build: bin/mdtrace bin/libmdshim.so bin/mdreplay bin/libmdtrace.so bin/libmdtrace.a

bin/mdtrace: $(shell find . -name '*.go' -not -path './testdata/*') bpf/mdtrace_x86_bpfel.o suppress/default.supp go.mod go.sum
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o $@ ./cmd/mdtrace

bin/libmdshim.so: $(wildcard shim/*.c shim/*.h) abi/mdtrace_abi.h
	@mkdir -p bin
	$(CC) -shared -fPIC -Wl,-z,now -O2 -g -fexceptions -fno-omit-frame-pointer -fno-optimize-sibling-calls -Wall -Wextra -Werror -o $@ shim/*.c

# mdreplay makes the allocator calls of "mdtrace replay", which is built
# without cgo (replay/).
bin/mdreplay: replay/mdreplay.c replay/mdreplay.h
	@mkdir -p bin
	$(CC) -O2 -g -Wall -Wextra -Werror -pthread -o $@ replay/mdreplay.c -Wl,--as-needed -ldl

# libmdtrace: get_malloc_leak_info and free_malloc_leak_info for programs
# that link them, handed over to the shim when it is preloaded (lib/).
LIBMDTRACE_SONAME := libmdtrace.so.0
LIBMDTRACE_CFLAGS := -O2 -g -fPIC -fvisibility=hidden -Wall -Wextra -Werror -Ilib/include
LIBMDTRACE_SRC := lib/leak_info.c lib/include/mdtrace/malloc_debug.h abi/mdtrace_abi.h

bin/$(LIBMDTRACE_SONAME): $(LIBMDTRACE_SRC)
	@mkdir -p bin
	$(CC) -shared $(LIBMDTRACE_CFLAGS) -Wl,-soname,$(LIBMDTRACE_SONAME) -o $@ lib/leak_info.c -Wl,--as-needed -ldl

bin/libmdtrace.so: bin/$(LIBMDTRACE_SONAME)
	ln -sf $(LIBMDTRACE_SONAME) $@

bin/libmdtrace.a: $(LIBMDTRACE_SRC)
	@mkdir -p bin
	$(CC) -c $(LIBMDTRACE_CFLAGS) -o bin/libmdtrace.o lib/leak_info.c
	rm -f $@ && $(AR) rcs $@ bin/libmdtrace.o && rm -f bin/libmdtrace.o

# Installation, as GNU's conventions have it: PREFIX, DESTDIR for staging,
# and the folders below PREFIX. The shim's folder is not one of them:
# mdtrace looks for it at ../lib/mdtrace from its own (session/launch.go).
PREFIX      ?= /usr/local
bindir      ?= $(PREFIX)/bin
libdir      ?= $(PREFIX)/lib
includedir  ?= $(PREFIX)/include
mandir      ?= $(PREFIX)/share/man
pkgconfigdir ?= $(libdir)/pkgconfig
shimdir     := $(PREFIX)/lib/mdtrace
INSTALLED := $(bindir)/mdtrace $(shimdir)/libmdshim.so $(shimdir)/mdreplay $(libdir)/$(LIBMDTRACE_SONAME) \
	$(libdir)/libmdtrace.so $(libdir)/libmdtrace.a $(includedir)/mdtrace/malloc_debug.h \
	$(pkgconfigdir)/mdtrace.pc $(mandir)/man1/mdtrace.1

install: build
	install -d $(DESTDIR)$(bindir) $(DESTDIR)$(shimdir) $(DESTDIR)$(libdir) $(DESTDIR)$(includedir)/mdtrace \
		$(DESTDIR)$(pkgconfigdir) $(DESTDIR)$(mandir)/man1
	install -m 0755 bin/mdtrace $(DESTDIR)$(bindir)/mdtrace
	install -m 0755 bin/libmdshim.so $(DESTDIR)$(shimdir)/libmdshim.so
	install -m 0755 bin/mdreplay $(DESTDIR)$(shimdir)/mdreplay
	install -m 0755 bin/$(LIBMDTRACE_SONAME) $(DESTDIR)$(libdir)/$(LIBMDTRACE_SONAME)
	ln -sfn $(LIBMDTRACE_SONAME) $(DESTDIR)$(libdir)/libmdtrace.so
	install -m 0644 bin/libmdtrace.a $(DESTDIR)$(libdir)/libmdtrace.a
	install -m 0644 lib/include/mdtrace/malloc_debug.h $(DESTDIR)$(includedir)/mdtrace/malloc_debug.h
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(libdir)|; s|@INCLUDEDIR@|$(includedir)|; s|@VERSION@|$(VERSION)|' \
		lib/mdtrace.pc.in >$(DESTDIR)$(pkgconfigdir)/mdtrace.pc
	chmod 0644 $(DESTDIR)$(pkgconfigdir)/mdtrace.pc
	install -m 0644 docs/mdtrace.1 $(DESTDIR)$(mandir)/man1/mdtrace.1
	@# The loader finds libmdtrace.so.0 in PREFIX/lib once its cache knows it.
	@if [ -z "$(DESTDIR)" ] && command -v ldconfig >/dev/null 2>&1; then \
		ldconfig || echo "note: ldconfig failed: run it as root for programs to find $(libdir)/$(LIBMDTRACE_SONAME)" >&2; \
	fi

uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED))
	rmdir $(DESTDIR)$(shimdir) $(DESTDIR)$(includedir)/mdtrace 2>/dev/null || true

generate: deps
	$(GO) generate ./...

testprogs:
	$(MAKE) -s -C testdata

# Unit and golden tests need no kernel; the integration tests load real BPF
# programs and attach real uprobes, so they need root.
test: deps build testprogs
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) test -count=1 -timeout 10m ./...
	# The packages whose types are shared between goroutines, under the
	# race detector (cmd/mdtrace's tests mostly run the built mdtrace).
	$(GO) test -count=1 -race -timeout 5m ./tracer ./leak ./output ./stacks
	sh shim/tests/run.sh
	$(MAKE) fuzz

# Bounded fuzzing of every parser (FUZZTIME inputs each). Minimizing a new
# input is bounded too (Go's default is 60 s, longer than a whole target's
# run), and the fuzzer's shared-memory file lives on tmpfs: on a disk mounted
# with discard every resize of it waits for the device.
FUZZ_TMP := $(shell test -d /dev/shm -a -w /dev/shm && echo /dev/shm || echo $${TMPDIR:-/tmp})
FUZZ     := TMPDIR=$(FUZZ_TMP) $(GO) test -run '^$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 1s

fuzz:
	$(FUZZ) -fuzz '^FuzzParseConfig$$' ./options
	$(FUZZ) -fuzz '^FuzzProbePoint$$' ./tracer
	$(FUZZ) -fuzz '^FuzzParseMaps$$' ./stacks
	$(FUZZ) -fuzz '^FuzzOpenELF$$' ./stacks
	$(FUZZ) -fuzz '^FuzzParseHeapDump$$' ./output
	$(FUZZ) -fuzz '^FuzzWriteHeapDump$$' ./output
	$(FUZZ) -fuzz '^FuzzParseRecord$$' ./output
	$(FUZZ) -fuzz '^FuzzDemangle$$' ./stacks
	$(FUZZ) -fuzz '^FuzzUnxz$$' ./stacks

DEMO_DIR := /tmp/mdtrace-demo
demo: deps build testprogs
	@rm -rf $(DEMO_DIR) && mkdir -p $(DEMO_DIR)
	@echo '$$ sudo bin/mdtrace -o "backtrace leak_track backtrace_dump_on_exit backtrace_dump_prefix=$(DEMO_DIR)/heap" -- testdata/leaky'
	@bin/mdtrace -o "backtrace leak_track backtrace_dump_on_exit backtrace_dump_prefix=$(DEMO_DIR)/heap" -- testdata/leaky
	@echo
	@echo "--- the heap dump, $$(ls $(DEMO_DIR)/heap.*.exit.txt) (maps cut to 8 lines):"
	@awk '/^MAPS$$/{m=1; n=0} m&&n++>8&&!/^END$$/{next} {print}' $(DEMO_DIR)/heap.*.exit.txt

bench: deps build testprogs
	CGO_ENABLED=0 $(GO) build -o bin/mdbench ./cmd/mdbench
	@scripts/bench.sh

clean:
	rm -rf bin
	$(MAKE) -s -C testdata clean

# The kernel matrix: Debian's packaged kernels booted under QEMU with this
# machine's files (vagrant/qemu-run), each running the smoke suite
# (vagrant/smoke) on binaries built here.
# OLD_KERNELS are older than mdtrace supports: each mode must stop there
# with one line naming what the kernel lacks.
KERNELS ?= 6.1 6.12
OLD_KERNELS ?= 5.10
smoke-build: build testprogs
	@mkdir -p bin/smoke
	CGO_ENABLED=0 $(GO) test -c -o bin/smoke/tracer.test ./tracer
	CGO_ENABLED=0 $(GO) test -c -o bin/smoke/e2e.test ./test/e2e

test-kernels: smoke-build
	@for k in $(KERNELS); do \
		echo "=== kernel $$k"; \
		vagrant/qemu-run -k $$k -t 1800 -- vagrant/smoke || exit 1; \
	done; \
	for k in $(OLD_KERNELS); do \
		echo "=== kernel $$k (unsupported)"; \
		vagrant/qemu-run -k $$k -t 600 -- vagrant/smoke --unsupported || exit 1; \
	done
