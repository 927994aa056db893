//go:build linux

package tracer

import (
	"testing"
)

func TestPreemptModel(t *testing.T) {
	const dyn = "#1 SMP PREEMPT_DYNAMIC Debian 6.12.1-1"
	for _, tc := range []struct {
		name, version, sched, cmdline, config string
		want                                  bool
	}{
		{"built without preemption", "#1 SMP Debian 5.10.1-1", "", "", "", false},
		{"built full", "#1 SMP PREEMPT Thu Jan 1", "", "", "", true},
		{"real time", "#1 SMP PREEMPT_RT Debian", "", "preempt=none", "CONFIG_PREEMPT_NONE=y\n", true},
		{"dynamic, debugfs none", dyn, "(none) voluntary full lazy\n", "preempt=full", "", false},
		{"dynamic, debugfs full", dyn, "none voluntary (full) lazy\n", "", "CONFIG_PREEMPT_NONE=y\n", true},
		{"dynamic, debugfs lazy", dyn, "none voluntary full (lazy)\n", "", "", true},
		{"dynamic, boot voluntary", dyn, "", "root=/dev/sda1 preempt=voluntary quiet", "CONFIG_PREEMPT=y\n", false},
		{"dynamic, boot full", dyn, "", "preempt=full", "CONFIG_PREEMPT_NONE=y\n", true},
		{"dynamic, built none", dyn, "", "quiet", "CONFIG_PREEMPT_BUILD=y\nCONFIG_PREEMPT_NONE=y\nCONFIG_PREEMPT_DYNAMIC=y\n", false},
		{"dynamic, built voluntary", dyn, "", "", "CONFIG_PREEMPT_VOLUNTARY=y\n", false},
		{"dynamic, built full", dyn, "", "", "# CONFIG_PREEMPT_NONE is not set\nCONFIG_PREEMPT=y\n", true},
		{"dynamic, built lazy", dyn, "", "", "CONFIG_PREEMPT_LAZY=y\n", true},
		{"dynamic, nothing known", dyn, "", "", "", true},
	} {
		if got := preemptModel(tc.version, tc.sched, tc.cmdline, tc.config); got != tc.want {
			t.Errorf("%s: preemptModel = %v, want %v", tc.name, got, tc.want)
		}
	}
	t.Logf("this kernel: preempts BPF programs = %v", kernelPreempts())
}

// TestPreemptGuard runs the leak test with the stack walk's preemption
// guard (and the atomic counters) forced on and off: the verifier takes
// both, and the stacks and counts are the same.
func TestPreemptGuard(t *testing.T) {
	needProbes(t)
	var counts []Counters
	for _, on := range []bool{true, false} {
		snap, names, c, _ := exitSnapshot(t, ProbeConfig{StackDepth: 16, Preemptible: &on}, testProg(t, "leaky"))
		named := 0
		for _, a := range snap.Allocs {
			if n := names[a.StackID]; len(n) > 1 && n[1] == "main" {
				named++
			}
		}
		// 13 leaks, 12 allocated from main (one in a constructor), and
		// leaky's churn of 10000 allocations and more, each counted.
		if len(snap.Allocs) != 13 || named != 12 || c.StackError != 0 || c.StackCollision != 0 || c.Allocs < 10000 {
			t.Errorf("guard %v: %d live blocks, %d called from main, counters %+v", on, len(snap.Allocs), named, c)
		}
		counts = append(counts, c)
	}
	if counts[0] != counts[1] {
		t.Errorf("counters differ:\nguard on  %+v\nguard off %+v", counts[0], counts[1])
	}
}
