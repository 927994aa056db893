// Package abi is what mdtrace's Go code, its BPF programs (bpf/) and its
// LD_PRELOAD shim (shim/) must agree on: the allocator calls, the probe
// sites' cookies, the counters, the record types, the layout of the shim's
// batches, the control channel's protocol and the shim's environment.
//
// The one source is the C header mdtrace_abi.h, which the BPF programs and
// the shim include; abi.go is generated from it (go generate ./abi, or
// make generate) and funcs.go holds the Go versions of its functions.
// abi_test.go fails when abi.go is stale, when C and Go disagree on a value
// or a function, and when bpf/ or shim/ define one of the header's names
// themselves.
package abi

//go:generate go run ./gen mdtrace_abi.h abi.go
