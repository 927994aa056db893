//go:build linux

package tracer

import (
	"os"
	"runtime"
	"testing"
	"time"
	"unsafe"
)

// BenchmarkReadRanges: the copy a check for unreachable memory takes of a
// process's heap, with process_vm_readv, in seconds per GB: 256 MB of this
// process's own memory in runs of 64 KB (the runs of blocks close to each
// other that the check reads).
func BenchmarkReadRanges(b *testing.B) {
	const total, run = 256 << 20, 64 << 10
	mem := make([]byte, total)
	for i := range mem {
		if i%4096 == 0 {
			mem[i] = 1
		}
	}
	base := uint64(uintptr(unsafe.Pointer(&mem[0])))
	var ranges [][2]uint64
	for off := uint64(0); off < total; off += run {
		ranges = append(ranges, [2]uint64{base + off, base + off + run})
	}
	b.ResetTimer()
	var took time.Duration
	for range b.N {
		start := time.Now()
		data, skipped := ReadRanges(os.Getpid(), ranges)
		took += time.Since(start)
		if skipped != 0 || len(data) != len(ranges) || data[1][0] != 1 {
			b.Fatalf("%d pages skipped", skipped)
		}
	}
	// mem is read through its address only: it must live until here.
	runtime.KeepAlive(mem)
	b.ReportMetric(took.Seconds()/float64(b.N)/(float64(total)/(1<<30)), "s/GB")
}
