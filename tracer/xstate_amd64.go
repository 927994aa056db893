//go:build linux && amd64

package tracer

import "sync"

// cpuid executes CPUID for leaf and subleaf sub.
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// xsaveLayout is the processor's XSAVE layout in its standard form, the one
// PTRACE_GETREGSET and signal frames use, as CPUID's leaf 0xd tells it.
type xsaveLayout struct {
	// max is the size of the state of every feature the processor has: at
	// least what the kernel's regset gives, which is all of the features
	// it enables (AMX's tile data, 8 KB, among them where the processor
	// has it).
	max int
	// offset and size of each feature from 2 on (0 and 1, x87 and SSE,
	// are in the legacy area's 512 bytes).
	offset, size [64]int
	// dynamic are the features a process has only once it asks for them
	// (arch_prctl ARCH_REQ_XCOMP_PERM): AMX's tile data, whose first use
	// faults until then (XFD). A process without them has them neither in
	// its signal frames nor in the size the kernel checks them against.
	dynamic uint64
}

var xsave = sync.OnceValue(func() xsaveLayout {
	var l xsaveLayout
	if max, _, _, _ := cpuid(0, 0); max < 0xd {
		return l
	}
	_, _, ecx, _ := cpuid(0xd, 0)
	l.max = int(ecx)
	for i := 2; i < 64; i++ {
		eax, ebx, ecx, _ := cpuid(0xd, uint32(i))
		if eax == 0 {
			continue
		}
		l.size[i], l.offset[i] = int(eax), int(ebx)
		// ECX bit 0: a supervisor feature, not in this layout; bit 2:
		// its first use can be made to fault (XFD).
		if ecx&1 != 0 {
			l.size[i], l.offset[i] = 0, 0
		}
		if ecx&4 != 0 {
			l.dynamic |= 1 << i
		}
	}
	return l
})

// frameSize returns the size of the state of features in the standard
// layout: the legacy area and the header (576 bytes), and every feature's
// area up to the end of the last.
func (l *xsaveLayout) frameSize(features uint64) int {
	end := 512 + 64
	for i := 2; i < 64; i++ {
		if features&(1<<i) != 0 && l.size[i] > 0 && l.offset[i]+l.size[i] > end {
			end = l.offset[i] + l.size[i]
		}
	}
	return end
}
