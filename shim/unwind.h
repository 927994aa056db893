// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Backtraces without frame pointers: a DWARF CFI (.eh_frame) unwinder (unwind.c). */
#ifndef MD_UNWIND_H
#define MD_UNWIND_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

/* Why a walk stopped, counted by md_unwind_stops. */
enum md_unwind_stop {
	MD_UNWIND_END,          /* the return address is undefined: _start, clone3 (a whole stack) */
	MD_UNWIND_FRAME_LIMIT,  /* as many frames as asked for */
	MD_UNWIND_NO_FDE,       /* code without unwind info, and no frame record to step over */
	MD_UNWIND_BAD_RA,       /* a return address in no loaded object */
	MD_UNWIND_UNSUPPORTED,  /* a rule this unwinder does not express */
	MD_UNWIND_STACK_BOUNDS, /* a read outside the thread's stack, or a frame not above the last */
	MD_UNWIND_STOPS,
};

/* md_unwind's flags: store pcs (return address - 1), not return addresses; skip this library's frames. */
#define MD_UNWIND_PC 1
#define MD_UNWIND_NO_SELF 2

/*
 * md_unwind walks the stack of the calling thread from fp, the frame of an
 * exported hook (built with frame pointers: the return address into its
 * caller at fp + 8, the caller's rbp at fp), by the callers' .eh_frame
 * rules, and stores up to max frames in out, the hook's caller first: each
 * a return address (a frame interrupted by a signal: its pc + 1), or with
 * MD_UNWIND_PC that minus one. Every read of the stack stays in [lo, hi),
 * the thread's stack; a return address is kept only in a loaded object. Why
 * the walk stopped goes to why, unless it is NULL. It allocates nothing,
 * takes no lock and may run in a signal handler.
 */
size_t md_unwind(uintptr_t fp, uintptr_t lo, uintptr_t hi, uintptr_t *out, size_t max, unsigned flags,
		 enum md_unwind_stop *why) __attribute__((visibility("hidden")));

/*
 * md_unwind_alt is md_unwind from a signal handler running on the signal
 * stack [alt_lo, alt_hi) (sigaltstack): the walk reads it too, and goes on
 * through the signal frame to the interrupted code's stack, [lo, hi).
 */
size_t md_unwind_alt(uintptr_t fp, uintptr_t lo, uintptr_t hi, uintptr_t alt_lo, uintptr_t alt_hi, uintptr_t *out,
		     size_t max, unsigned flags, enum md_unwind_stop *why) __attribute__((visibility("hidden")));

/* md_unwind_replays counts the thread's walks that took frames from its last one (for the tests). */
extern __thread unsigned long md_unwind_replays __attribute__((tls_model("initial-exec"), visibility("hidden")));

/*
 * md_unwind_walks counts the thread's walks that had its memo (not one in
 * a signal handler that came during another): the last of them is the one
 * md_unwind_same compares with.
 */
extern __thread unsigned long md_unwind_walks __attribute__((tls_model("initial-exec"), visibility("hidden")));

/*
 * md_unwind_same reports whether md_unwind from fp, with the same stack,
 * max and flags, would give the frames of the thread's last walk and stop
 * for the same reason, without writing them: its first frame has the same
 * registers, the stack words its steps read hold what they held, and its
 * frames all came from them. *n and *why are then that walk's; the walk is
 * counted by its stop as md_unwind's are.
 */
bool md_unwind_same(uintptr_t fp, uintptr_t lo, uintptr_t hi, size_t max, unsigned flags, size_t *n,
		    enum md_unwind_stop *why) __attribute__((visibility("hidden")));

/*
 * md_unwind_stops adds up, for every reason, the walks that stopped for it
 * since the process started (exported for the tests).
 */
void md_unwind_stops(uint64_t counts[MD_UNWIND_STOPS]);

#endif
