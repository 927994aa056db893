/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * mdtrace's ABI: what its three sides must agree on, written once here.
 *
 *   the probes   bpf/mdtrace.bpf.c and its headers (through bpf/common.h)
 *   the shim     shim/, the LD_PRELOAD library (C)
 *   mdtrace      Go: tracer/, ctl/, session/, output/, through package abi
 *
 * Package abi (abi/abi.go) is generated from this file by abi/gen (go
 * generate ./abi, or make generate): every #define of a number or a string
 * and every enumerator becomes a Go constant, NAME_IN_CAPS as NameInCaps,
 * and every struct its Go sizes and offsets, struct md_name's field f as
 * SizeofName and OffsetofNameF. abi/abi_test.go fails when abi.go is stale,
 * when a value C computes differs from Go's, when mix64 or table_buckets
 * differ from their Go versions (abi/funcs.go), and when bpf/ or shim/
 * define one of these names themselves.
 *
 * Plain C for clang -target bpf and the host's cc alike: no includes, the
 * compilers' own __UINT64_TYPE__ and __UINT32_TYPE__. A #define here holds
 * a number, a string, or an expression of numbers, names defined above and
 * + - * / % << >> & | ^ ( ), which Go writes the same; no casts, no ~.
 */
#ifndef MDTRACE_ABI_H
#define MDTRACE_ABI_H

typedef __UINT64_TYPE__ md_u64;
typedef __UINT32_TYPE__ md_u32;

/*
 * The shim's interface: one number for all that mdtrace and the shim agree
 * on (this file, the functions and words the shim exports, their
 * arguments), raised with any change to them. The shim exports it as the
 * 32-bit constant SYMBOL_INTERFACE; mdtrace reads it from the shim's file
 * before it preloads or loads it, and refuses a shim of another number (an
 * older or newer build beside it).
 */
#define SHIM_INTERFACE 6
#define SYMBOL_INTERFACE "mdshim_interface"

/* ---- Allocator calls, probe sites, counters, records ---- */

/*
 * The allocator entry points. mdtrace sets them as the attach cookie of
 * the entry probe (tracer/entrypoints.go); the probes read the cookie and
 * keep the call in flight in struct thread_state. The shim passes
 * CALL_MALLOC, CALL_CALLOC, CALL_REALLOC, CALL_MEMALIGN and CALL_FREE as
 * the call argument of its probe sites (shim/mdshim.c), which the probes
 * read.
 */
enum call {
	CALL_NONE = 0,
	CALL_MALLOC,
	CALL_CALLOC,	   /* at a site: a0 count, a1 element size */
	CALL_REALLOC,	   /* at a site: a0 old pointer, a1 size */
	CALL_REALLOCARRAY,
	CALL_MEMALIGN,	   /* at a site: a0 alignment, a1 size */
	CALL_POSIX_MEMALIGN,
	CALL_VALLOC,
	CALL_PVALLOC,
	CALL_FREE,	   /* entry only; at a site: a0 the freed pointer */
	CALL_USABLE_SIZE,  /* malloc_usable_size: entry only */
	CALL_NEW_ALIGNED,  /* C++'s operator new(size, align_val_t) */
	CALL_DELETE,	   /* C++'s operator delete: entry and return */
	CALL_RUNTIME_NEW,  /* a C++ runtime's operator new on another malloc: entry only */
	CALL_THREAD_END,   /* glibc's __call_tls_dtors, where a thread's end begins: entry only */
};

/*
 * In the low half of an entry probe's cookie, beside the call: the probed
 * allocator is glibc's, whose chunk header before a block gives its usable
 * size (record_allocs' PRESENT_BYTES).
 */
#define CALL_GLIBC_CHUNKS 0x40000000
/*
 * And: the entry point has a return probe (the session program of kernels
 * with uprobe sessions makes it only then); the call makes no call of
 * another probed function (glibc's malloc and calloc), so that one the
 * sampling passes over needs no return probe.
 */
#define CALL_RETURN 0x20000000
#define CALL_NO_NESTING 0x10000000
#define CALL_MASK 0xffff

/*
 * The shim's probe sites: mdtrace sets them as the attach cookie of the
 * probe alloc_site (tracer/entrypoints.go), which reads it.
 */
enum site {
	SITE_ALLOC = 1, /* mdshim_site_alloc(ret, call, a0, a1, start_ns, present) */
	SITE_FREE,	/* mdshim_site_free(ptr, call, epoch) */
	SITE_BATCH,	/* mdshim_site_batch(batch, used, epoch, flags) */
};

/*
 * Indexes into the counters map: the probes count, mdtrace sums them over
 * the CPUs into tracer.Counters, whose fields are in this order.
 */
enum counter {
	COUNTER_ALLOCS = 0,	   /* allocations added to the live table */
	COUNTER_FREES,		   /* frees of tracked blocks */
	COUNTER_UNKNOWN_FREES,	   /* frees of blocks not in the table (allocated before the attach, or untracked) */
	COUNTER_TABLE_FULL,	   /* allocations not tracked: the live table was full */
	COUNTER_STACK_FULL,	   /* backtraces lost: the stack map was full */
	COUNTER_STACK_COLLISION,   /* backtraces lost: two stacks with one hash */
	COUNTER_STACK_ERROR,	   /* backtraces lost: the kernel could not walk the stack */
	COUNTER_STATE_ERROR,	   /* calls not seen: no per-thread storage */
	COUNTER_MISSED_RETURN,	   /* calls whose return probe never ran */
	COUNTER_NESTED,		   /* allocator calls made by the allocator itself, not counted twice */
	COUNTER_USABLE_SIZE,	   /* malloc_usable_size calls */
	COUNTER_RECORDS_LOST,	   /* record_allocs: records lost to a full ring buffer */
	COUNTER_NOTIFY_LOST,	   /* library load notices lost to a full ring buffer */
	COUNTER_ERRORS_LOST,	   /* verify_pointers errors lost to a full ring buffer */
	COUNTER_PROGRAM_LOST,	   /* program mode: processes not traced (traced map or exec ring buffer full) */
	COUNTER_GEN_LOST,	   /* execs whose program's blocks cannot be told from the one before (gens map full) */
	COUNTER_BATCH_LOST,	   /* batched calls lost: a batch the probes could not read or understand */
	COUNTER_ORPHANS_LOST,	   /* frees of blocks whose batch had not come that could not be kept for it */
	COUNTER_FREES_EARLY,	   /* frees that came before their block's batch, kept and matched later (not a loss) */
	COUNTER_UNWIND_STOPPED,	   /* backtraces cut short: a frame the unwind tables could not go past */
	COUNTER_STACK_TRUNCATED,   /* backtraces cut at the frame limit with frames left */
	COUNTER_PAIRED,		   /* allocations freed in their own batch: neither reached the table (not a loss) */
	COUNTER_MAPPINGS_LOST,	   /* the allocator's own mappings not learnt, or not let go: a full ring buffer */
	COUNTER_UNWIND_DEFERRED,   /* walks stopped at a library not in the list yet, handed to mdtrace to finish (not a loss) */
	COUNTER_UNWIND_DEFER_LOST, /* walks that could have been handed to mdtrace, past the bound or without room */
	COUNTER_UNSAMPLED,	   /* allocations the probes' sampling passed over (not a loss) */
	COUNTER_UNSAMPLED_FREES,   /* frees of blocks not in the table while the probes sample: not sampled, or from before */
	COUNTER_CALLS_UNCOUNTED,   /* --all --inject: allocator calls of processes not counted, the table of counts full */
	COUNTER_UNWIND_NO_LIST,	   /* backtraces taken by frame pointers alone, before the process's unwind tables were in place */
	COUNTER_MAX,
};

/*
 * The kinds of record_allocs records, as in Android's record_allocs file:
 * the probes write them in struct record_event's type (bpf/record.h),
 * mdtrace reads them as output.RecordType.
 */
enum record_type {
	RECORD_MALLOC = 1,
	RECORD_CALLOC,
	RECORD_MEMALIGN,
	RECORD_REALLOC,
	RECORD_FREE,
	RECORD_THREAD_DONE,
};

/*
 * What the probes' events of a traced process's mappings say of their
 * range (struct mapping_event in bpf/mappings.h), read by mdtrace
 * (tracer/mappings.go): the allocator's own memory, for the reachability
 * check.
 */
enum mapping_kind {
	MAPPING_ALLOCATOR = 1, /* mapped by the allocator, for itself */
	MAPPING_GONE,	       /* unmapped, or mapped again by anyone */
	MAPPING_RESET,	       /* the process executed a program: none left */
};

/* ---- Limits and flags of the probes' maps ---- */

/*
 * The largest backtrace, Android's most: the probes' walk and stack map
 * value (bpf/stack.h), mdtrace's bound of the backtrace depth it sets
 * (tracer.MaxStackDepth), and the shim's bound of MDSHIM_BATCH's depth.
 */
#define MAX_STACK_DEPTH 256

/*
 * The bit of a stack id (the probes' hash of a backtrace's frames) that
 * says the backtrace was cut at the frame limit with frames left beyond
 * it: set by the probes' walk (bpf/stack.h), read by mdtrace, which never
 * merges a cut backtrace with a complete one and marks it in --folded.
 */
#define STACK_ID_TRUNCATED 1
/*
 * The bit of a stack id that says it is no hash but a number of its own:
 * a walk the probes stopped at a library mdtrace had not given them yet,
 * which mdtrace finishes (tracer/deferred.go) and whose frames it then
 * rewrites under the same id. A hash never has it (stack_id_of clears
 * it), so that the two never meet.
 */
#define STACK_ID_DEFERRED 2
/*
 * What a deferred walk sends mdtrace of the thread's stack: the bytes from
 * the stack pointer where it stopped up, at most DEFER_STACK (fewer where
 * the stack ends sooner).
 */
#define DEFER_STACK 16384

/*
 * In struct alloc_info's size, written by the probes and by mdtrace (a
 * zygote child's copy of its parent's blocks), read by mdtrace: the block
 * was made by a zygote child. No allocation is that large.
 */
#define ALLOC_ZYGOTE (1ULL << 63)

/* The program name of program mode, with its NUL: mdtrace writes it, the probes read it. */
#define PROGRAM_NAME_MAX 64

/*
 * The live table (bpf/table.h, tracer/tables.go), which the probes and
 * mdtrace both read and write: its most tiers, the slots of a bucket, and
 * the pointer of a slot being filled in or emptied.
 */
#define TABLE_TIERS 4
#define BUCKET_SLOTS 16
#define SLOT_BUSY 1
/*
 * The live table's occupancy bitmap: OCC_BITS bits for each tier, in
 * OCC_WORDS 64-bit words, each bit for a run of the tier's buckets
 * (occ_bit) that may hold an entry. The probes and mdtrace set a bucket's
 * bit after they take a slot of it; mdtrace clears the bits of empty runs
 * as it walks the table, and its walks read only the runs whose bit is
 * set: a table of a few blocks is walked in microseconds, not the
 * milliseconds all of its buckets take.
 */
#define OCC_BITS 4096
#define OCC_WORDS (OCC_BITS / 64)

/* ---- The shim's batches ---- */

/*
 * A thread of the shim (shim/batch.c) writes its allocations and frees
 * into its struct md_batch and hands it to the probes through
 * mdshim_site_batch(b, used, epoch, flags); the probes (bpf/batch.h) read
 * it there and as its thread ends, mdtrace (tracer/batch.go) from the
 * process's memory. seq is odd while the batch is handed over and emptied;
 * used words of events follow. An event is a word of kind (the low byte),
 * frame count and epoch, then the block's address, and for an allocation
 * its size and its frames, at most MAX_STACK_DEPTH (none with
 * BATCH_STACK_PREV).
 */
#define BATCH_WORDS 1016
#define BATCH_HEADER 16 /* the bytes before the words */
#define BATCH_KIND_MASK 0xff
#define BATCH_ALLOC 1
#define BATCH_FREE 2
/*
 * An allocation freed by its own thread while its event was still in the
 * batch, in the epoch it was written in: neither it nor its free goes to
 * the table, and the block goes back to the allocator at once. Its words
 * stay, to be skipped, when later events follow it.
 */
#define BATCH_SKIP 3
#define BATCH_FRAMES_SHIFT 8
#define BATCH_FRAMES_MASK 0x1ff
/*
 * How an allocation's walk ended, when it did not reach the stack's
 * outermost frame: cut at the frame limit with frames left, or stopped
 * where the shim's unwinder could not go on (as the probes count theirs).
 */
#define BATCH_STACK_CUT (1 << 17)
#define BATCH_STACK_STOPPED (1 << 18)
/*
 * An allocation made while backtraces were off (backtrace_enable_on_signal,
 * signal 45): its frames are not walked, and it gets none. The shim reads
 * it in its byte SYMBOL_BACKTRACE_STATE, which mdtrace writes when it
 * toggles backtraces (BACKTRACE_STATE_ON or _OFF; 0, as the shim starts,
 * is the option's own start: off with backtrace_enable_on_signal), so
 * that a toggle takes effect at the next allocation and not at the next
 * hand-over of a batch.
 */
#define BATCH_NO_BACKTRACE (1 << 19)
#define SYMBOL_BACKTRACE_STATE "mdshim_backtrace_state"
#define BACKTRACE_STATE_ON 1
#define BACKTRACE_STATE_OFF 2
/*
 * The shim's sampling interval in bytes (md_sample_bytes in shim/sample.c),
 * 0 while it reports every call: a 64-bit word SYMBOL_SAMPLE_BYTES that
 * another mdtrace attaching with -p or --all reads in the process's memory,
 * as the calls that reach the sites are then a sample already.
 */
#define SYMBOL_SAMPLE_BYTES "mdshim_sample_bytes"
/*
 * An early start (ENV_EARLY): the command runs while mdtrace loads its
 * programs (or, with --all --inject, a process's calls are routed before
 * the probes on the shim's sites are live: mdshim_inject_start's last
 * argument), and the shim holds its threads' batches until mdtrace writes
 * EARLY_READY in its 32-bit word SYMBOL_READY, once every probe of the
 * process is attached and its unwind tables are in place. The shim writes
 * EARLY_WAITING there first, as it starts: mdtrace writes the word only
 * after that, never while the loader may still be mapping or zeroing the
 * shim's data. A thread whose batch is
 * full, or that must call an unbatched site, waits for the word meanwhile
 * (EARLY_WAIT_MS at most, then goes on without it). The buffers of the
 * threads that have not handed a batch over yet, which the probes do not
 * know, are listed in the array of EARLY_BATCHES 64-bit addresses
 * SYMBOL_EARLY_BATCHES (0: a free slot), where mdtrace reads them for its
 * reports; a thread past the slots waits for the word.
 */
#define SYMBOL_READY "mdshim_ready"
#define SYMBOL_EARLY_BATCHES "mdshim_early_batches"
#define EARLY_READY 1
#define EARLY_WAITING 2
#define EARLY_BATCHES 64
#define EARLY_WAIT_MS 30000
/*
 * An allocation without frames (its count 0) whose backtrace is that of
 * the batch's last event with frames before it, an allocation or one taken
 * back (BATCH_SKIP): the same frames, walked to the same end (its
 * BATCH_STACK_CUT and BATCH_STACK_STOPPED are that event's). Most
 * allocations of a batch come from a few call sites: the shim compares a
 * walk with that event's frames, and the probes then take its stack id
 * without hashing the frames again.
 */
#define BATCH_STACK_PREV (1 << 20)
#define BATCH_EPOCH_SHIFT 21
/* The most events in a batch: every event takes two words at least. */
#define BATCH_EVENTS (BATCH_WORDS / 2)
/*
 * The probes' index mask into a copy of a batch's words (bpf/batch.h): a
 * power of two less one, BATCH_WORDS at least.
 */
#define BATCH_MASK 1023

/*
 * The flags of mdshim_site_batch, from the shim to the probes: REGISTER
 * tells them of a thread's new buffer, RETIRE of its end, INHERITED that a
 * fork child hands over calls made before the fork (its blocks are not a
 * zygote child's own).
 */
/*
 * How many frees the probes keep aside for one address, whose allocation
 * is still in a batch (bpf/batch.h): each under the address with its way
 * number in the low bits, which an allocation's address never has (every
 * allocator aligns blocks to 8 bytes at least).
 */
#define ORPHAN_WAYS 8
/*
 * A kept free's value: its epoch in the bits below KEPT_ONE, and above
 * them how many frees of the address it stands for. Once an address's ways
 * are all taken (a block passed back and forth between threads faster than
 * a batch fills), a further free joins its newest kept free, whose epoch
 * becomes the later of the two: the allocations written before it are
 * those of the frees it stands for. 0 marks one whose last free was just
 * taken, on its way out.
 */
#define KEPT_ONE (1ULL << 48)

/*
 * A shim loaded into a running process (--inject) counts, for the probes,
 * the allocations its threads' batches hold that were not handed over yet,
 * in 1 << INJECT_PENDING_BITS 32-bit counters, a block's by the top bits
 * of its address times 0x9e3779b97f4a7c15 (pending_slot in shim/batch.c
 * and bpf/batch.h). A batched free of a block the table does not hold,
 * whose counter is 0, is of a block from before the attach: no batch can
 * bring its allocation, and it is not kept aside.
 */
#define INJECT_PENDING_BITS 14

/*
 * --inject: mdshim_inject_start lists the GOT slots to route in an array
 * whose address is the 64-bit word SYMBOL_INJECT_LIST, INJECT_SLOT_WORDS
 * 64-bit words a slot: at INJECT_SLOT_ADDR the slot's address, at
 * INJECT_SLOT_OLD the value it held, at INJECT_SLOT_HOOK the shim's hook,
 * at INJECT_SLOT_REAL the allocator's function, then its module's
 * PT_GNU_RELRO bounds; the 64-bit word SYMBOL_INJECT_DROPPED counts the
 * slots past the array's room. mdtrace routes the slots itself, every
 * thread stopped, writing each through /proc/PID/mem (which writes
 * read-only pages too), as mdshim_inject_route would: there, each page of
 * slots takes two mprotect calls, each a stop of the thread mdtrace makes
 * the call in.
 */
#define SYMBOL_INJECT_LIST "mdshim_inject_list"
#define SYMBOL_INJECT_DROPPED "mdshim_inject_dropped"
#define INJECT_SLOT_WORDS 6
#define INJECT_SLOT_ADDR 0
#define INJECT_SLOT_OLD 1
#define INJECT_SLOT_HOOK 2
#define INJECT_SLOT_REAL 3

/*
 * --all --inject: mdshim_inject_start takes the blob of
 * mdshim_inject_bypass as its last two arguments (NULL and 0: none), and
 * makes the bypasses once started, in the same call; the 64-bit word
 * SYMBOL_INJECT_BYPASSED is then what mdshim_inject_bypass would have
 * returned (the functions bypassed, or -errno). mdtrace makes the blob
 * before it stops the thread, from the maps before dlopen: where the page
 * it names has been taken since (-EEXIST), it makes it again and calls
 * mdshim_inject_bypass.
 */
#define SYMBOL_INJECT_BYPASSED "mdshim_inject_bypassed"

/*
 * --all --inject: the blocks the probes sampled before the route, whose
 * frees the shim must report, are given to it in the route's stop without
 * a call in the process. With sampling, mdshim_inject_start maps an array
 * of ADOPT_CAP 64-bit words, at the address in the 64-bit word
 * SYMBOL_ADOPT_AREA. mdtrace writes the blocks' addresses there, their
 * count in the 64-bit word SYMBOL_ADOPT_COUNT, and sets ADOPT_PENDING in
 * the 32-bit word SYMBOL_CTL_PENDING (every thread stopped); the first of
 * the hooks' calls after the route takes them, the other threads' calls
 * waiting for it, and clears the bit. SYMBOL_ADOPT_FAILED counts the
 * blocks the shim had no memory to take. More blocks than ADOPT_CAP go
 * through mdshim_sample_adopt, a call in the stop.
 */
#define SYMBOL_ADOPT_AREA "mdshim_adopt_area"
#define SYMBOL_ADOPT_COUNT "mdshim_adopt_count"
#define SYMBOL_ADOPT_FAILED "mdshim_adopt_failed"
#define SYMBOL_CTL_PENDING "mdshim_ctl_pending"
#define ADOPT_CAP 65536
#define ADOPT_PENDING 0x80000000

#define BATCH_REGISTER 1
#define BATCH_RETIRE 2
#define BATCH_INHERITED 4
/*
 * The flags' high bits count the allocations freed in their own batch
 * (BATCH_SKIP, or taken back from its end) since the last hand-over.
 */
#define BATCH_PAIRED_SHIFT 32

struct md_batch {
	md_u64 seq;
	md_u64 used;
	md_u64 words[BATCH_WORDS];
};

_Static_assert(__builtin_offsetof(struct md_batch, words) == BATCH_HEADER, "BATCH_HEADER");
_Static_assert(BATCH_FRAMES_MASK >= MAX_STACK_DEPTH, "a frame count does not fit its bits");
_Static_assert(BATCH_EPOCH_SHIFT >= BATCH_FRAMES_SHIFT + 9, "the frame count overlaps the epoch");
_Static_assert(BATCH_STACK_CUT > (BATCH_FRAMES_MASK << BATCH_FRAMES_SHIFT), "a walk's end overlaps the frame count");
_Static_assert(BATCH_NO_BACKTRACE < BATCH_STACK_PREV, "a walk's end overlaps BATCH_STACK_PREV");
_Static_assert(BATCH_STACK_PREV < (1 << BATCH_EPOCH_SHIFT), "BATCH_STACK_PREV overlaps the epoch");
_Static_assert(3 + MAX_STACK_DEPTH <= BATCH_WORDS, "an allocation does not fit a batch");
_Static_assert(BATCH_WORDS <= BATCH_MASK + 1 && (BATCH_MASK & (BATCH_MASK + 1)) == 0, "BATCH_MASK");

/* ---- The control channel ---- */

/*
 * The shim (shim/ctl.c) connects to the unix socket that MDSHIM_CTL
 * names (a path when it starts with '/', else an abstract name) and
 * sends a request; mdtrace (ctl/server.go) answers.
 * Every field is little endian, written and read a byte at a time: these
 * structs give the offsets and sizes, not a memory image. A leak info
 * request is answered with struct md_ctl_answer and overall_size bytes
 * (Android's get_malloc_leak_info buffer), a signal with the magic alone
 * once mdtrace has acted on it, an adoption with the magic and a status.
 * A check for unreachable memory, which another mdtrace asks for (mdtrace
 * unreachable -p PID), is answered with struct md_ctl_text: the magic, a
 * status and the length of the text that follows (the report, or why the
 * check failed).
 */
#define CTL_MAGIC 0x3174646dU /* "mdt1" */
#define CTL_OP_LEAK_INFO 1   /* arg 0 */
#define CTL_OP_SIGNAL 2	     /* arg the signal number */
#define CTL_OP_ADOPT 3	     /* arg 0: a fork child that nothing traces asks to be followed */
#define CTL_OP_UNREACHABLE 4 /* arg the pid to check now, from another mdtrace run by root */
#define CTL_OP_UNREACHABLE_CONTENTS 5 /* the same, with each leak's first bytes */
#define CTL_OP_EXITING 6     /* arg 0: the shim's last destructor, for the check at exit; answered as a signal */
#define CTL_STATUS_OK 0
#define CTL_STATUS_NOT_TRACKED 1 /* leak info: the backtrace option is off */
#define CTL_STATUS_REFUSED 2	 /* adopt: the child is not followed */
#define CTL_STATUS_NOT_TRACED 3	 /* unreachable: this mdtrace does not trace the pid */
#define CTL_STATUS_FAILED 4	 /* unreachable: the check failed, the text says why */
#define CTL_ACK_SIZE 4		 /* a signal's answer: the magic */
#define CTL_ADOPT_ANSWER_SIZE 8	 /* an adoption's answer: the magic and a status */

struct md_ctl_request {
	md_u32 magic;
	md_u32 op;
	md_u32 arg;
	md_u32 zero;
};

struct md_ctl_answer {
	md_u32 magic;
	md_u32 status;
	md_u64 overall_size;
	md_u64 info_size;
	md_u64 total_memory;
	md_u64 backtrace_size;
};

struct md_ctl_text {
	md_u32 magic;
	md_u32 status;
	md_u64 length;
};

/* ---- The shim's environment ---- */

/* The variables mdtrace sets for the shim (session/launch.go), which reads them. */
#define ENV_OPTIONS "LIBC_DEBUG_MALLOC_OPTIONS" /* Android's options; mdtrace's -o */
#define ENV_CTL "MDSHIM_CTL"			/* the control socket's path */
#define ENV_BATCH "MDSHIM_BATCH"		/* batch the calls, with this many frames each */
#define ENV_RECORD "MDSHIM_RECORD"		/* record_allocs: the sites get each call's start time */
#define ENV_SAMPLE_BYTES "MDSHIM_SAMPLE_BYTES"	/* --sample-bytes */
#define ENV_LOG_FD "MDSHIM_LOG_FD"		/* the descriptor of mdtrace's --log file */
#define ENV_EXIT_CHECK "MDSHIM_EXIT_CHECK"	/* the check for unreachable memory at exit: ask for it at the last destructor */
#define ENV_EARLY "MDSHIM_EARLY"		/* mdtrace's pid: an early start (SYMBOL_READY); the shim makes it start with 0 for the programs it executes */

/* ---- Functions; Go's versions are in abi/funcs.go ---- */

/*
 * MurmurHash3's 64-bit finalizer: every bit of h reaches every bit. The
 * probes hash backtraces with it (stack_id_of), as mdtrace does the frames
 * of a batch it reads; the shim hashes pointers.
 */
static inline __attribute__((always_inline)) md_u64 mix64(md_u64 h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

/*
 * The two buckets of the block at ptr of process tgid in a tier of the live
 * table of n buckets (n >= 2), where the probes and mdtrace put it and look
 * for it: two multiplicative hashes of its address and process, scaled to n.
 */
static inline __attribute__((always_inline)) void table_buckets(md_u64 ptr, md_u32 tgid, md_u32 n, md_u32 b[2])
{
	md_u64 x = ptr ^ ((md_u64)tgid << 47);

	b[0] = (((x * 0x9e3779b97f4a7c15ULL) >> 32) * (md_u64)n) >> 32;
	b[1] = (((x * 0xc2b2ae3d27d4eb4fULL) >> 32) * (md_u64)n) >> 32;
	if (b[1] == b[0])
		b[1] = b[0] + 1 < n ? b[0] + 1 : 0;
}

/*
 * The multiplier of occ_bit for a tier of the live table of n buckets
 * (n >= 1): 2^32 * OCC_BITS / n, rounded down. mdtrace works it out for
 * each tier, so that the probes multiply and shift but never divide.
 */
static inline __attribute__((always_inline)) md_u64 occ_mult(md_u32 n)
{
	return ((md_u64)OCC_BITS << 32) / n;
}

/*
 * The bit of the occupancy bitmap of bucket b of a tier, whose multiplier
 * is mult (occ_mult): below OCC_BITS for every b below n, and growing with
 * b, so that a bit stands for a run of buckets (a bucket each when the
 * tier has OCC_BITS buckets or fewer).
 */
static inline __attribute__((always_inline)) md_u32 occ_bit(md_u32 b, md_u64 mult)
{
	return ((md_u64)b * mult) >> 32;
}

/* ---- libmdtrace ---- */

/*
 * The names the shim also exports get_malloc_leak_info and
 * free_malloc_leak_info by, for libmdtrace (lib/, the library programs
 * link to call them), which looks them up with dlsym: a program linked
 * with libmdtrace.a defines both calls itself, and its own definitions
 * come before the shim's, so the calls' own names would find them again.
 * Last in this file, so that the lines the probes' debug information
 * names stay where they were.
 */
#define SYM_GET_LEAK_INFO "mdshim_get_malloc_leak_info"
#define SYM_FREE_LEAK_INFO "mdshim_free_malloc_leak_info"

#endif /* MDTRACE_ABI_H */
