#include "textflag.h"

// The functions MeasureTrapCost calls: each starts as glibc's malloc does,
// with a push of %r12, an instruction the kernel emulates when probed.
// trapPlain stays unprobed, trapEntry gets an entry probe, trapBoth an
// entry and a return probe.

// func trapPlain()
TEXT ·trapPlain(SB), NOSPLIT|NOFRAME, $0-0
	PUSHQ R12
	POPQ R12
	RET

// func trapEntry()
TEXT ·trapEntry(SB), NOSPLIT|NOFRAME, $0-0
	PUSHQ R12
	POPQ R12
	RET

// func trapBoth()
TEXT ·trapBoth(SB), NOSPLIT|NOFRAME, $0-0
	PUSHQ R12
	POPQ R12
	RET

// func trapEntryPC() uintptr
TEXT ·trapEntryPC(SB), NOSPLIT, $0-8
	LEAQ ·trapEntry(SB), AX
	MOVQ AX, ret+0(FP)
	RET

// func trapBothPC() uintptr
TEXT ·trapBothPC(SB), NOSPLIT, $0-8
	LEAQ ·trapBoth(SB), AX
	MOVQ AX, ret+0(FP)
	RET
