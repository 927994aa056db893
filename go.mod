module github.com/mdtrace/mdtrace

go 1.26.0

require (
	github.com/cilium/ebpf v0.22.0
	github.com/google/pprof v0.0.0-20261105003125-4bf881d7fb0b
	github.com/ianlancetaylor/demangle v0.0.0-20260724033716-83e58baca724
	github.com/spf13/pflag v1.0.10
	github.com/ulikunitz/xz v0.5.17
	golang.org/x/arch v0.32.0
	golang.org/x/sys v0.49.0
)

tool github.com/cilium/ebpf/cmd/bpf2go
