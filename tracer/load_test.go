package tracer

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/mdtrace/mdtrace/bpf"
)

// TestProgramGroups: the programs load names (program mode's, the site
// group) are BPF programs.
func TestProgramGroups(t *testing.T) {
	var all []string
	typ := reflect.TypeFor[bpf.MdtracePrograms]()
	for i := range typ.NumField() {
		all = append(all, typ.Field(i).Tag.Get("ebpf"))
	}
	for _, name := range slices.Concat(programMode, siteGroup, mappingsGroup, sessionGroup) {
		if !slices.Contains(all, name) {
			t.Errorf("%s is not a BPF program", name)
		}
	}
}

// TestLoadPrograms: every program but program mode's is loaded outside
// program mode, every one in it (the session program where the kernel has
// what it needs), and the variables work.
func TestLoadPrograms(t *testing.T) {
	needBPF(t)
	for _, program := range []string{"", "prog"} {
		p, err := LoadProbes(ProbeConfig{StackDepth: 16, MaxAllocs: 1024, Program: program})
		if err != nil {
			t.Fatal(err)
		}
		v := reflect.ValueOf(p.objs.MdtracePrograms)
		for i := range v.NumField() {
			name := v.Type().Field(i).Tag.Get("ebpf")
			want := program != "" || !slices.Contains(programMode, name)
			if name == "alloc_session" {
				// Where the kernel has uprobe sessions (6.13, or a
				// kernel whose BTF says it has them: not tested here).
				if !kernelAtLeast(t, 6, 13) {
					continue
				}
				want = p.multi
			}
			if got := !v.Field(i).IsNil(); got != want {
				t.Errorf("program mode %q: %s loaded %v, want %v", program, name, got, want)
			}
		}
		if err := p.SetBacktrace(false); err != nil {
			t.Error(err)
		}
		var on uint32
		if err := p.objs.BacktraceOn.Get(&on); err != nil || on != 0 {
			t.Errorf("backtrace_on = %d, %v after SetBacktrace(false)", on, err)
		}
		p.Close()
	}
}

// TestTableCount: the live table's entry count, the probes' per-CPU counts
// and user space's own, follows insertions and deletions exactly, tiers
// counted empty are not walked, and Snapshot reads the same allocations as
// reads through the kernel.
func TestTableCount(t *testing.T) {
	p := smallTable(t)
	if n, ok := p.tables.estimate(); !ok || n != 0 {
		t.Fatalf("empty table: estimate %d, %v; want 0, true", n, ok)
	}
	// An empty tier is not walked.
	if tiers := p.tables.nonEmpty(); len(tiers) != 0 {
		t.Errorf("empty table: %d tiers to walk", len(tiers))
	}
	fillTable(t, p, tableFill{tgid: fakeTgid, allocs: 5000, stacks: 50, seed: 1})
	fillTable(t, p, tableFill{tgid: otherTgid, allocs: 700, stacks: 10, seed: 2})
	if n, ok := p.tables.estimate(); !ok || n != 5700 {
		t.Errorf("5700 entries: estimate %d, %v", n, ok)
	}
	if tiers := p.tables.nonEmpty(); len(tiers) != 1 {
		t.Errorf("5700 entries: %d tiers to walk, want 1", len(tiers))
	}
	with, err := p.Snapshot(fakeTgid)
	if err != nil {
		t.Fatal(err)
	}
	want, err := p.snapshotBySyscall(fakeTgid)
	if err != nil {
		t.Fatal(err)
	}
	if d := sameSnapshot(with, want); len(with.Allocs) != 5000 || d != "" {
		t.Errorf("snapshot of %d allocations differs from the table read through the kernel: %s", len(with.Allocs), d)
	}
	if cap(with.Allocs) > 2*len(with.Allocs)+1024 {
		t.Errorf("snapshot of 5000 allocations kept room for %d", cap(with.Allocs))
	}
	if err := p.Forget(otherTgid); err != nil {
		t.Fatal(err)
	}
	if n, ok := p.tables.estimate(); !ok || n != 5000 {
		t.Errorf("after forgetting 700: estimate %d, %v; want 5000", n, ok)
	}
}

// TestForgetSkipsTakenOut: Forget drops a process's blocks, past a block
// another taker emptied first, and leaves other processes' alone.
func TestForgetSkipsTakenOut(t *testing.T) {
	p := smallTable(t)
	fillTable(t, p, tableFill{tgid: fakeTgid, allocs: 100, stacks: 5, seed: 1})
	fillTable(t, p, tableFill{tgid: otherTgid, allocs: 30, stacks: 5, seed: 2})
	var gone bpf.MdtraceAllocKey
	tr := p.tables.made()[0]
	tr.each(func(k *bpf.MdtraceAllocKey, _ *bpf.MdtraceAllocInfo, bk *bpf.MdtraceBucket, j int) {
		if k.Tgid == fakeTgid && gone.Ptr == 0 {
			gone = *k
			if !tr.takeOut(bk, j, k) {
				t.Errorf("taking out %+v failed", *k)
			}
			if tr.takeOut(bk, j, k) {
				t.Errorf("%+v taken out twice", *k)
			}
		}
	})
	if err := p.Forget(fakeTgid); err != nil {
		t.Fatal(err)
	}
	left := map[uint32]int{}
	p.eachAlloc(func(k *bpf.MdtraceAllocKey, _ *bpf.MdtraceAllocInfo) { left[k.Tgid]++ })
	if left[fakeTgid] != 0 || left[otherTgid] != 30 {
		t.Errorf("left: %v; want none of %d and 30 of %d", left, fakeTgid, otherTgid)
	}
	if n, ok := p.tables.estimate(); !ok || n != 30 {
		t.Errorf("estimate %d, %v; want 30", n, ok)
	}
}

// TestLoadVariants: the kernel verifies the programs as every mode and
// every option that changes their constants loads them, and the drain at
// a thread's end attaches. The kernel matrix runs it on other kernels.
func TestLoadVariants(t *testing.T) {
	needBPF(t)
	if err := CheckKernel(); err != nil {
		t.Fatal(err)
	}
	for _, v := range LoadVariants() {
		t.Run(v.Name, func(t *testing.T) {
			start := time.Now()
			p, err := LoadProbes(v.Config)
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			defer p.Close()
			checkVerifierWork(t, p, took)
			if _, err := p.DrainPoint(); err != nil {
				t.Error(err)
			}
			// The program that follows the allocator's mappings is
			// loaded apart, and mdtrace goes on without it; on the
			// kernels mdtrace supports it loads.
			if p.mappingsErr != nil {
				t.Error(p.mappingsErr)
			}
		})
	}
}

// TestFeatures: every feature the probes need is there on a kernel that
// loads them, and each is named with the kernel that brought it.
func TestFeatures(t *testing.T) {
	needBPF(t)
	for _, f := range Features() {
		if f.Name == "" || f.Since == "" || f.For == "" {
			t.Errorf("%+v: a feature needs a name, a first kernel and a use", f)
		}
		if f.Err != nil {
			t.Errorf("%s: the probe could not tell: %v", f.Name, f.Err)
		}
		if f.Required() && !f.Have {
			t.Errorf("%s is missing, yet the programs load", f.Name)
		}
	}
	i := slices.IndexFunc(Features(), func(f Feature) bool { return f.Name == "bpf_loop" })
	if i < 0 {
		t.Fatal("no feature bpf_loop")
	}
	e := (&MissingFeatureError{Release: "5.15.0", Feature: Features()[i]}).Error()
	want := "this kernel (5.15.0) lacks bpf_loop, which mdtrace needs for walking the loader's list of libraries, program mode's name match; it came in Linux 5.17 (mdtrace --check lists what this kernel has)"
	if e != want {
		t.Errorf("missing feature:\n%s\nwant\n%s", e, want)
	}
}

// verifierBudget is the most instructions the verifier may go through for
// each program, in any variant, on the kernels mdtrace supports: about 1.5
// times the most seen on 6.1, 6.12 and 6.18 (the comments: the most on
// 6.18, then 6.1). The verifier's time is the most of mdtrace's start
// (LoadProbes) and of this test under the kernel matrix's emulation: a
// change that goes past a budget has made a program's paths multiply (a
// helper inlined at more places, a loop unrolled, branches the verifier
// cannot prune), which bpf/*.h's global functions and bpf_loop steps are
// there to avoid.
var verifierBudget = map[string]uint32{
	"alloc_entry":        18000, // 9.1K, 12K (verify_pointers' backtraces)
	"alloc_return":       22000, // 14.9K, 14K (backtrace=256)
	"alloc_session":      27000, // 17.7K (backtrace=256); alloc_entry and alloc_return in one, 6.10 and later
	"alloc_site":         40000, // 26.1K (--all), 18.5K
	"batch_drain":        24000, // 15.8K, 11.8K (backtrace=256)
	"batch_drain_kprobe": 24000,
	"libraries_changed":  5000, // 3.2K, 2.6K
	"mappings_exit":      1000,
	"exec_gen":           500,
	"program_exec":       1000,
	"program_fork":       500,
	"thread_exit":        500,
	"watch_exit":         500,
}

// checkVerifierWork logs, for go test -v, the time LoadProbes took and
// the instructions the verifier went through for each program p loaded
// (its states times their lengths, the most of the load's time), so that
// a change to the programs can be measured by it; and checks them against
// verifierBudget.
func checkVerifierWork(t *testing.T, p *Probes, took time.Duration) {
	t.Helper()
	v := reflect.ValueOf(p.objs.MdtracePrograms)
	var line []string
	for i := range v.NumField() {
		prog, _ := v.Field(i).Interface().(*ebpf.Program)
		if prog == nil {
			continue
		}
		name := v.Type().Field(i).Tag.Get("ebpf")
		info, err := prog.Info()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		n, ok := info.VerifiedInstructions()
		if !ok {
			// Before 5.16 the kernel does not say.
			continue
		}
		line = append(line, fmt.Sprintf("%s %d", name, n))
		budget, ok := verifierBudget[name]
		switch {
		case !ok:
			t.Errorf("%s: no verifier budget (verifierBudget): it took %d instructions", name, n)
		case n > budget:
			t.Errorf("%s: the verifier went through %d instructions, over its budget of %d on this kernel (%s)",
				name, n, budget, KernelRelease())
		}
	}
	t.Logf("loaded in %d ms; verified instructions: %s", took.Milliseconds(), strings.Join(line, ", "))
}
