//go:build linux

package tracer

import (
	"fmt"

	"github.com/cilium/ebpf"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// BenchmarkUnwindTables measures the unwind tables of libc, libstdc++ and
// Debian's python3.11 (the three a Python process with a C++ extension
// maps): the entries they take in the array every traced process shares,
// those entries' bytes, the kernel's own account of the unwinder's maps
// (memlock: the array is made whole at load), and the time the first
// LoadUnwind of such a process takes, the files read and their tables
// extracted.
func BenchmarkUnwindTables(b *testing.B) {
	needBPF(b)
	const python = "/usr/bin/python3.11"
	stdcxx := "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"
	for _, f := range []string{python, stdcxx} {
		if _, err := os.Stat(f); err != nil {
			b.Skipf("no %s: the Debian packages python3.11 and libstdc++6 are needed", f)
		}
	}
	for b.Loop() {
		p, err := LoadProbes(ProbeConfig{StackDepth: 64})
		if err != nil {
			b.Fatal(err)
		}
		// The process maps all three (libstdc++ preloaded), sleeping
		// once they are mapped.
		cmd := exec.Command(python, "-c", "import sys, time; sys.stdout.write('up\\n'); sys.stdout.flush(); time.sleep(60)")
		cmd.Env = append(os.Environ(), "LD_PRELOAD="+stdcxx)
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, 3)
		if _, err := out.Read(buf); err != nil || string(buf) != "up\n" {
			b.Fatalf("python3.11 did not start: %q %v", buf, err)
		}
		maps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", cmd.Process.Pid))
		for _, lib := range []string{"libc.so.6", "libstdc++.so.6", "python3.11"} {
			if !strings.Contains(string(maps), lib) {
				b.Fatalf("the process does not map %s", lib)
			}
		}
		t0 := time.Now()
		if err := p.LoadUnwind(cmd.Process.Pid); err != nil {
			b.Fatal(err)
		}
		load := time.Since(t0)
		cmd.Process.Kill()
		cmd.Wait()
		p.unwind.mu.Lock()
		used, lost := p.unwind.used, p.unwind.lost
		p.unwind.mu.Unlock()
		if lost != 0 {
			b.Fatalf("%d files' tables did not fit", lost)
		}
		all := tablesMem(b, p) + memlock(b, p.objs.UnwindTables) + memlock(b, p.objs.UnwindProcs) + memlock(b, p.objs.UnwindFiles) + memlock(b, p.objs.UnwindExes)
		b.ReportMetric(float64(used), "entries")
		b.ReportMetric(float64(used)*8/1e6, "MB-tables")
		b.ReportMetric(float64(all)/1e6, "MB-unwind-maps")
		b.ReportMetric(load.Seconds(), "s/first-load")
		p.Close()
	}
}

// tablesMem returns the kernel's account (memlock) of the memory of every
// file's unwind table.
func tablesMem(tb testing.TB, p *Probes) int64 {
	var n int64
	var key uint32
	var id ebpf.MapID
	it := p.objs.UnwindTables.Iterate()
	for it.Next(&key, &id) {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			tb.Fatal(err)
		}
		n += memlock(tb, m)
		m.Close()
	}
	if err := it.Err(); err != nil {
		tb.Fatal(err)
	}
	return n
}
