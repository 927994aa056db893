module github.com/mdtrace/mdtrace

go 1.26.0

require (
	github.com/cilium/ebpf v0.22.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

tool github.com/cilium/ebpf/cmd/bpf2go
