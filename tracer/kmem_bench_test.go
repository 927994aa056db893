//go:build linux

package tracer

import (
	"bufio"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// kmem is the kernel memory that the probes' maps may use, read at one
// moment, in bytes.
type kmem struct {
	slab    int64            // /proc/meminfo Slab
	vmalloc int64            // /proc/meminfo VmallocUsed
	memcg   int64            // kernel memory charged to this process's memory cgroup; -1 unknown
	caches  map[string]int64 // /proc/slabinfo: num_objs * objsize of each cache
	objs    map[string]int64 // /proc/slabinfo: num_objs of each cache
}

func readKmem(tb testing.TB) kmem {
	tb.Helper()
	runtime.GC()
	k := kmem{memcg: memcgKernel(), caches: map[string]int64{}, objs: map[string]int64{}}
	meminfo, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.SplitSeq(string(meminfo), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "Slab:":
			k.slab = v << 10
		case "VmallocUsed:":
			k.vmalloc = v << 10
		}
	}
	if f, err := os.Open("/proc/slabinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 || strings.HasPrefix(fields[0], "#") {
				continue
			}
			num, err1 := strconv.ParseInt(fields[2], 10, 64)
			size, err2 := strconv.ParseInt(fields[3], 10, 64)
			if err1 == nil && err2 == nil {
				k.caches[fields[0]] = num * size
				k.objs[fields[0]] = num
			}
		}
		f.Close()
	}
	return k
}

// memcgKernel returns the kernel memory charged to this process's memory
// cgroup (cgroup v2 memory.stat "kernel", or v1 memory.kmem.usage_in_bytes),
// or -1.
func memcgKernel() int64 {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[1] == "memory":
			b, err := os.ReadFile("/sys/fs/cgroup/memory" + parts[2] + "/memory.kmem.usage_in_bytes")
			if err == nil {
				v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
				if err == nil {
					return v
				}
			}
		case parts[0] == "0" && parts[1] == "":
			b, err := os.ReadFile("/sys/fs/cgroup" + parts[2] + "/memory.stat")
			if err != nil {
				continue
			}
			for l := range strings.SplitSeq(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, "kernel "); ok {
					if n, err := strconv.ParseInt(v, 10, 64); err == nil {
						return n
					}
				}
			}
		}
	}
	return -1
}

// memlock returns the kernel's own account of a map's memory, the
// "memlock" of its fdinfo.
func memlock(tb testing.TB, m *ebpf.Map) int64 {
	tb.Helper()
	n, err := mapMemlock(m)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// BenchmarkKernelBytesPerAlloc measures the kernel memory the probes use
// per tracked live allocation: it loads them as mdtrace does by default
// (a live table of DefaultMaxAllocs in tiers, DefaultMaxStacks backtraces
// of 16 frames) and puts live allocations in the maps, with one unique
// backtrace per 50 allocations, up to 50,000, 200,000 and 1,000,000. The
// live table's tiers are arrays made whole, so its cost per block depends
// on how full the tiers made so far are: at each fill it reports the
// memory of the live table and of the stacks map, the kernel's own count
// (memlock), divided by the number of live allocations, and the growth of
// the memory cgroup's kernel memory since before loading, divided the same
// way. It logs the slab caches that grew and each map's memlock.
func BenchmarkKernelBytesPerAlloc(b *testing.B) {
	needBPF(b)
	fills := []struct {
		n    int
		name string
	}{{50_000, "50k"}, {200_000, "200k"}, {1_000_000, "1m"}}
	for b.Loop() {
		before := readKmem(b)
		p, err := LoadProbes(ProbeConfig{StackDepth: 16})
		if err != nil {
			b.Fatal(err)
		}
		loaded := readKmem(b)
		b.ReportMetric(float64(tablesMemlock(b, p)+memlock(b, p.objs.Stacks))/1e6, "MB-fixed-memlock")
		if loaded.memcg >= 0 {
			b.ReportMetric(float64(loaded.memcg-before.memcg)/1e6, "MB-fixed-memcg")
		}
		done := 0
		var filled kmem
		for k, f := range fills {
			fillTable(b, p, tableFill{tgid: fakeTgid + uint32(k), allocs: f.n - done, stacks: (f.n - done) / 50, seed: uint64(3 + k)})
			done = f.n
			now := readKmem(b)
			if k == 0 {
				filled = now
			}
			table, stacks := tablesMemlock(b, p), memlock(b, p.objs.Stacks)
			b.ReportMetric(float64(table+stacks)/float64(f.n), "B/alloc-memlock-"+f.name)
			if now.memcg >= 0 {
				b.ReportMetric(float64(now.memcg-before.memcg)/float64(f.n), "B/alloc-memcg-"+f.name)
			}
			b.Logf("kmem: %d allocations: %d tiers of the live table (tier %d in use), live table %.1f MB, stacks %.1f MB (memlock), memory cgroup %+.1f MB since before loading",
				f.n, len(p.tables.maps()), tierInUse(p), float64(table)/1e6, float64(stacks)/1e6, float64(now.memcg-before.memcg)/1e6)
		}
		var maps []string
		v := reflect.ValueOf(p.objs.MdtraceMaps)
		for i := range v.NumField() {
			if m, ok := v.Field(i).Interface().(*ebpf.Map); ok && m != nil {
				maps = append(maps, fmt.Sprintf("%s %.2f", v.Type().Field(i).Tag.Get("ebpf"), float64(memlock(b, m))/1e6))
			}
		}
		b.Logf("kmem: memlock of each map, MB, filled: %s", strings.Join(maps, ", "))
		type grow struct {
			name        string
			bytes, objs int64
		}
		var grew []grow
		for name, v := range filled.caches {
			if d := v - loaded.caches[name]; d > 256<<10 {
				grew = append(grew, grow{name, d, filled.objs[name] - loaded.objs[name]})
			}
		}
		sort.Slice(grew, func(i, j int) bool { return grew[i].bytes > grew[j].bytes })
		for _, g := range grew {
			b.Logf("kmem: slab cache %-16s %+8d objects %+7.1f MB = %5.1f B per allocation, at 50K", g.name, g.objs, float64(g.bytes)/1e6, float64(g.bytes)/5e4)
		}
		p.Close()
	}
}

// tablesMemlock returns the kernel's own account of the memory of every
// tier of the live table.
func tablesMemlock(tb testing.TB, p *Probes) int64 {
	tb.Helper()
	n, err := p.tables.memlock()
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// waitTiers waits until the live table has n tiers made.
func waitTiers(tb testing.TB, p *Probes, n int) {
	tb.Helper()
	for range 500 {
		if len(p.tables.maps()) >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	tb.Fatalf("the live table has %d tiers after 5 s, want %d", len(p.tables.maps()), n)
}

// tierInUse returns the tier of the live table the probes put blocks into.
func tierInUse(p *Probes) int {
	p.tables.mu.Lock()
	defer p.tables.mu.Unlock()
	return p.tables.inUse()
}
