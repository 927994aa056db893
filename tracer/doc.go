// Package tracer loads mdtrace's BPF programs and attaches them to the
// allocators of the processes it traces, launches or attaches to those
// processes (ptrace, only while it must), follows their forks, execs,
// libraries and exits, and reads what the programs recorded: the live
// allocation table, backtraces, counters, record_allocs' records, pointer
// errors and the shim's batches. It is the only package that touches the
// kernel; leak/, stacks/ and output/ take what it reads.
//
// The files by concern: load.go (LoadProbes, the verifier's groups),
// attach.go (probes on a process's allocator: uprobe_multi or one link per
// probe), entrypoints.go (which functions are probed, and how), tables.go
// (the live table's tiers), snapshot.go (reading a process's blocks,
// forks, stacks), batch.go (the shim's batches), process.go (launch and
// attach), program.go (program mode), loader.go (the dynamic loader's
// library list), allocator.go (which file serves malloc), probepoint.go
// (where in a function a probe costs least), features.go (what the kernel
// has).
//
// What it needs from the kernel (Features and mdtrace --check say what the
// running one has): x86-64 Linux 5.17 or later with BTF, uprobes, the BPF
// ring buffer (5.8), task storage (5.11) and bpf_loop (5.17); root, or
// CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE. It uses uprobe_multi links
// (6.6), the preemption kfuncs (6.10) and a kprobe on do_exit where the
// kernel has them, and falls back where it does not. Probes is safe for
// concurrent use.
package tracer
