//go:build linux

package tracer

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Feature is a kernel feature mdtrace uses, and what this kernel says of
// it.
type Feature struct {
	Name  string // as the kernel's documentation names it
	Since string // the first mainline kernel that has it
	For   string // what mdtrace uses it for
	// Without is what mdtrace does on a kernel without it; "" when it
	// cannot run without it.
	Without string
	Have    bool
	// Err is why the probe could not tell, or the kernel's refusal: then
	// Have is false.
	Err error
}

// Required reports whether mdtrace cannot run without f.
func (f Feature) Required() bool { return f.Without == "" }

// The features, in the order --check lists them.
var featureList = []struct {
	Feature
	probe func() (bool, error)
}{
	{Feature{Name: "BTF of the kernel (/sys/kernel/btf/vmlinux)", Since: "5.4, built with CONFIG_DEBUG_INFO_BTF",
		For: "reading the kernel's structures the same way on every kernel (CO-RE)"}, haveKernelBTF},
	{Feature{Name: "BPF ring buffer", Since: "5.8", For: "record_allocs' records"},
		func() (bool, error) { return have(features.HaveMapType(ebpf.RingBuf)) }},
	{Feature{Name: "task storage (bpf_task_storage_get, bpf_get_current_task_btf)", Since: "5.11",
		For: "each thread's batch and in-flight calls"},
		func() (bool, error) {
			return have(errors.Join(features.HaveMapType(ebpf.TaskStorage),
				features.HaveProgramHelper(ebpf.Kprobe, asm.FnTaskStorageGet),
				features.HaveProgramHelper(ebpf.Kprobe, asm.FnGetCurrentTaskBtf)))
		}},
	{Feature{Name: "bpf_loop", Since: "5.17", For: "walking the loader's list of libraries, program mode's name match"},
		func() (bool, error) { return have(features.HaveProgramHelper(ebpf.Kprobe, asm.FnLoop)) }},
	{Feature{Name: "kprobes (CONFIG_KPROBES)", Since: "4.1", For: "handing a thread's last batch over at do_exit",
		Without: "the sched_process_exit tracepoint, which older kernels (6.1) reach after the thread's memory is gone: the calls in a thread's last unflushed batch are lost, counted and said (--no-batch loses none)"},
		haveKprobe},
	{Feature{Name: "uprobe_multi links", Since: "6.6", For: "attaching every probe of a file with one link",
		Without: "one link per probe: attaching takes longer, tracing costs the same"},
		func() (bool, error) { return have(features.HaveBPFLinkUprobeMulti()) }},
	{Feature{Name: "bpf_preempt_disable kfuncs", Since: "6.10", For: "keeping a stack walk's per-CPU scratch space to itself on a preemptible kernel",
		Without: "nothing on a kernel that does not preempt kernel code; on one that does, two backtraces taken on one CPU at once may mix (rare)"},
		func() (bool, error) { return haveKernelFunc("bpf_preempt_disable") }},
	{Feature{Name: "optimized uprobes on a 5-byte NOP", Since: "6.18", For: "the shim's probe sites: a call instead of a trap",
		Without: "a trap per probe hit: the shim's sites cost about as much as attach mode's probes"},
		func() (bool, error) { return haveKernelSymbol("arch_uprobe_optimize") }},
}

// featureState is each feature's probe, run once when first asked.
var featureState = func() []func() Feature {
	fs := make([]func() Feature, len(featureList))
	for i, f := range featureList {
		fs[i] = sync.OnceValue(func() Feature {
			g := f.Feature
			g.Have, g.Err = f.probe()
			return g
		})
	}
	return fs
}()

// Features probes the running kernel for each feature mdtrace uses.
func Features() []Feature {
	var fs []Feature
	for _, f := range featureState {
		fs = append(fs, f())
	}
	return fs
}

// MissingFeatureError is a kernel without a feature mdtrace needs.
type MissingFeatureError struct {
	Release string
	Feature Feature
}

func (e *MissingFeatureError) Error() string {
	why := ""
	if e.Feature.Err != nil {
		why = fmt.Sprintf(" (%v)", e.Feature.Err)
	}
	return fmt.Sprintf("this kernel (%s) lacks %s%s, which mdtrace needs for %s; it came in Linux %s (mdtrace --check lists what this kernel has)",
		e.Release, e.Feature.Name, why, e.Feature.For, e.Feature.Since)
}

// CheckKernel returns a MissingFeatureError for the first feature mdtrace
// needs that the running kernel lacks, nil when it has them all. LoadProbes
// asks it when the kernel refuses the programs.
func CheckKernel() error {
	for i, f := range featureList {
		if !f.Required() {
			continue
		}
		if g := featureState[i](); !g.Have {
			return &MissingFeatureError{Release: KernelRelease(), Feature: g}
		}
	}
	return nil
}

// KernelRelease is uname -r.
func KernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// have turns a cilium/ebpf feature probe's answer into have-or-not, with
// the error when the probe could not tell.
func have(err error) (bool, error) {
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ebpf.ErrNotSupported):
		return false, nil
	default:
		return false, err
	}
}

func haveKernelBTF() (bool, error) {
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	if _, err := btf.LoadKernelSpec(); err != nil {
		return false, err
	}
	return true, nil
}

// haveKernelFunc reports whether the kernel's BTF has a function of that
// name (a kfunc mdtrace calls).
func haveKernelFunc(name string) (bool, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return false, err
	}
	var fn *btf.Func
	if err := spec.TypeByName(name, &fn); err != nil {
		if errors.Is(err, btf.ErrNotFound) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// haveKernelSymbol reports whether /proc/kallsyms lists a kernel function
// of that name.
func haveKernelSymbol(name string) (bool, error) {
	b, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		return false, err
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) >= 3 && f[2] == name {
			return true, nil
		}
	}
	return false, nil
}

// VerifierError is the kernel's verifier refusing a BPF program mdtrace
// loads: a kernel mdtrace has not been tried on, or a bug of mdtrace's.
type VerifierError struct {
	Release string
	Err     *ebpf.VerifierError
}

// Error is one line: the verifier's last words, not its log.
func (e *VerifierError) Error() string {
	return fmt.Sprintf("this kernel (%s) refused mdtrace's BPF programs: %v (the verifier's log: mdtrace -o verbose; what this kernel has: mdtrace --check)",
		e.Release, e.Err)
}

// Log is the verifier's whole log.
func (e *VerifierError) Log() string { return fmt.Sprintf("%+v", e.Err) }

func (e *VerifierError) Unwrap() error { return e.Err }

// LoadVariant is a configuration of the probes that changes the BPF
// programs the kernel verifies: the constants the programs are loaded with
// steer the verifier down other paths.
type LoadVariant struct {
	Name   string
	Config ProbeConfig
	// Check is in the short list mdtrace --check loads; the others are
	// loaded by the tests.
	Check bool
}

// LoadVariants are the configurations every supported kernel must load:
// each mode and each option that changes a constant of the programs.
func LoadVariants() []LoadVariant {
	// Android's default depth.
	const variantDepth = 16
	yes, no := true, false
	small := uint32(1 << 16)
	return []LoadVariant{
		{"launch: backtrace leak_track", ProbeConfig{StackDepth: variantDepth, UnknownIsError: true, MaxAllocs: small}, true},
		{"attach: backtrace", ProbeConfig{StackDepth: variantDepth, NoBatch: true, MaxAllocs: small}, true},
		{"no backtrace", ProbeConfig{MaxAllocs: small}, false},
		{"backtrace=1", ProbeConfig{StackDepth: 1, MaxAllocs: small}, false},
		{"backtrace=256", ProbeConfig{StackDepth: MaxStackDepth, MaxAllocs: small}, true},
		{"backtrace_min_size, backtrace_max_size", ProbeConfig{StackDepth: variantDepth, BacktraceMinSize: 100, BacktraceMaxSize: 1000, MaxAllocs: small}, false},
		{"backtrace_enable_on_signal", ProbeConfig{StackDepth: variantDepth, BacktraceOff: true, MaxAllocs: small}, false},
		{"record_allocs", ProbeConfig{Record: true, MaxAllocs: small}, true},
		{"record_allocs backtrace", ProbeConfig{Record: true, StackDepth: variantDepth, MaxAllocs: small}, false},
		{"verify_pointers abort_on_error", ProbeConfig{Verify: true, UnknownIsError: true, AbortOnError: true, StackDepth: variantDepth, NoAllocBacktraces: true, MaxAllocs: small}, true},
		{"verify_pointers, attached", ProbeConfig{Verify: true, StackDepth: variantDepth, NoAllocBacktraces: true, NoBatch: true, MaxAllocs: small}, false},
		{"program mode", ProbeConfig{StackDepth: variantDepth, Program: "prog", NoBatch: true, MaxAllocs: small}, true},
		{"--all, sampling", ProbeConfig{StackDepth: variantDepth, All: true, SampleBytes: 4096, NoBatch: true, MaxAllocs: small}, true},
		{"--all --inject", ProbeConfig{StackDepth: variantDepth, All: true, SampleBytes: 4096, NoBatch: true, CountCalls: true, BusyCalls: 4096, EagerHead: 256, MaxAllocs: small}, false},
		{"attach, sampling", ProbeConfig{StackDepth: variantDepth, SampleBytes: 4096, NoBatch: true, MaxAllocs: small}, false},
		{"one link per probe", ProbeConfig{StackDepth: variantDepth, PerProbeLinks: true, MaxAllocs: small}, false},
		{"preemptible kernel", ProbeConfig{StackDepth: variantDepth, Preemptible: &yes, MaxAllocs: small}, false},
		{"kernel without preemption", ProbeConfig{StackDepth: variantDepth, Preemptible: &no, MaxAllocs: small}, false},
	}
}

// DrainPoint attaches, if it is not yet, the probe that hands a thread's
// last batch over when the thread ends, and names where it is: "kprobe
// do_exit", or "tracepoint sched_process_exit" where kprobes cannot be
// used.
func (p *Probes) DrainPoint() (string, error) {
	if !p.batchReady() {
		return "", errors.New("neither a kprobe on do_exit nor the sched_process_exit tracepoint could be attached")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drainKprobe {
		return "kprobe do_exit", nil
	}
	return "tracepoint sched_process_exit", nil
}

// haveKprobe reports whether a BPF program can be attached to do_exit
// with a kprobe: tried with an empty program, as kernels can be built
// without kprobes, or have them only through a tracefs that is not there.
func haveKprobe() (bool, error) {
	if ok, err := have(features.HaveProgramType(ebpf.Kprobe)); !ok {
		return ok, err
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.Kprobe,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		return false, err
	}
	defer prog.Close()
	l, err := link.Kprobe("do_exit", prog, nil)
	if err != nil {
		return false, nil
	}
	l.Close()
	return true, nil
}
