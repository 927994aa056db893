// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Internal interface of libmdshim.so: the option parser (config.c), the log
 * and backtrace writer (log.c) and the checking allocator (mdshim.c).
 */
#ifndef MDSHIM_H
#define MDSHIM_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Option bits, the same values as Android's malloc debug. */
#define MD_FRONT_GUARD 0x1
#define MD_REAR_GUARD 0x2
#define MD_BACKTRACE 0x4
#define MD_FILL_ON_ALLOC 0x8
#define MD_FILL_ON_FREE 0x10
#define MD_EXPAND_ALLOC 0x20
#define MD_FREE_TRACK 0x40
#define MD_TRACK_ALLOCS 0x80
#define MD_LEAK_TRACK 0x100
#define MD_RECORD_ALLOCS 0x200
#define MD_BACKTRACE_FULL 0x400
#define MD_ABORT_ON_ERROR 0x800
#define MD_VERBOSE 0x1000
#define MD_CHECK_UNREACHABLE_ON_SIGNAL 0x2000
#define MD_BACKTRACE_SPECIFIC_SIZES 0x4000
#define MD_LOG_ALLOCATOR_STATS_ON_SIGNAL 0x8000
#define MD_LOG_ALLOCATOR_STATS_ON_EXIT 0x10000

/* The options the shim acts on by rewriting or checking blocks. */
#define MD_SHIM_OPTIONS                                                                          \
	(MD_FRONT_GUARD | MD_REAR_GUARD | MD_FILL_ON_ALLOC | MD_FILL_ON_FREE | MD_EXPAND_ALLOC | \
	 MD_FREE_TRACK | MD_TRACK_ALLOCS)

#define MD_MIN_ALIGN 16
#define MD_FILL_ALLOC_VALUE 0xeb
#define MD_FILL_FREE_VALUE 0xef
#define MD_FRONT_GUARD_VALUE 0xaa
#define MD_REAR_GUARD_VALUE 0xbb
#define MD_DEFAULT_GUARD_BYTES 32
#define MD_MAX_GUARD_BYTES 16384
#define MD_DEFAULT_BACKTRACE_FRAMES 16
#define MD_MAX_BACKTRACE_FRAMES 256
#define MD_DEFAULT_EXPAND_BYTES 16
#define MD_MAX_EXPAND_BYTES 16384
#define MD_DEFAULT_FREE_TRACK_ALLOCATIONS 100
#define MD_MAX_FREE_TRACK_ALLOCATIONS 16384
#define MD_DEFAULT_RECORD_ALLOCS 8000000
#define MD_MAX_RECORD_ALLOCS 50000000
#define MD_DEFAULT_BACKTRACE_DUMP_PREFIX "/tmp/backtrace_heap"
#define MD_DEFAULT_RECORD_ALLOCS_FILE "/tmp/record_allocs.txt"

/* Longest string option value kept; longer values are cut. */
#define MD_PATH_MAX 4096
/* Longest option error message. */
#define MD_ERR_MAX 512

/* md_config is the parsed option string. It holds no pointers to the heap. */
struct md_config {
	uint64_t options;
	size_t front_guard_bytes;
	size_t rear_guard_bytes;
	size_t backtrace_frames;
	bool backtrace_enabled;
	bool backtrace_enable_on_signal;
	bool backtrace_dump_on_exit;
	char backtrace_dump_prefix[MD_PATH_MAX];
	size_t backtrace_min_size_bytes;
	size_t backtrace_max_size_bytes;
	size_t fill_on_alloc_bytes;
	size_t fill_on_free_bytes;
	size_t expand_alloc_bytes;
	size_t free_track_allocations;
	size_t free_track_backtrace_num_frames;
	size_t record_allocs_num_entries;
	char record_allocs_file[MD_PATH_MAX];
	bool record_allocs_on_exit;
	/* verify_pointers itself was given (other options imply its bit too). */
	bool verify_pointers;
};

/*
 * md_config_parse parses an option string with Android's rules. It always
 * starts from the default state. On failure it returns false and writes the
 * first error message, without the program-name prefix, to err. It neither
 * allocates nor writes anything, so it is safe inside malloc.
 */
bool md_config_parse(const char *str, struct md_config *cfg, char *err, size_t errlen);

/* Usage lines logged after an option error. */
#define MD_USAGE_LINE1 "For malloc debug option descriptions go to:"
#define MD_USAGE_LINE2 "  https://android.googlesource.com/platform/bionic/+/main/libc/malloc_debug/README.md"

/*
 * md_vformat is an async-signal-safe vsnprintf (format.c) for %d %i %u %o
 * %x %X %c %s %p %% with the hh h l ll j z t modifiers, the - 0 + space #
 * flags, width and precision (digits or '*'). It always NUL-terminates when
 * len > 0 and returns the length the whole output would have.
 */
int md_vformat(char *buf, size_t len, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));

/* md_format is md_vformat with the arguments given directly. */
int md_format(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/*
 * md_log writes one logcat-style line to stderr with a single write(2):
 * "MM-DD HH:MM:SS.mmm  PID  TID P malloc_debug: MESSAGE". prio is 'E' or 'I'.
 */
void md_log(char prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * md_log_fd is where log lines go: standard error, or the descriptor named
 * by MDSHIM_LOG_FD (mdtrace passes its --log file), read by md_log_init.
 */
extern int md_log_fd;
void md_log_init(void);

/*
 * md_backtrace walks frame pointers from fp (the frame of an exported hook)
 * and stores up to max return addresses minus one, skipping the library's
 * own code. Each frame pointer is checked against the thread's stack bounds.
 */
size_t md_backtrace(void *fp, uintptr_t *frames, size_t max);

/*
 * md_stack_bounds gives the thread's stack, [lo, hi), looked up once per
 * thread (pthread_getattr_np, which allocates: call it as an internal
 * call); false if it is not known.
 */
bool md_stack_bounds(uintptr_t *lo, uintptr_t *hi);

/* md_backtrace_log logs frames in Android's backtrace format. */
void md_backtrace_log(const uintptr_t *frames, size_t n);

/* Longest function name md_symbolize gives, with its NUL; longer ones are cut. */
#define MD_SYM_NAME_MAX 512

/* md_sym is what md_symbolize finds out about a pc. */
#define MD_SYM_PATH_MAX 512

struct md_sym {
	/*
	 * The object's file: its path as the kernel names the mapping (as in
	 * /proc/PID/maps), else as dladdr gives it; may be "".
	 */
	const char *path;
	char path_buf[MD_SYM_PATH_MAX];
	uintptr_t rel_pc; /* pc minus dladdr's base of the object */
	bool named;       /* name and offset are known */
	char name[MD_SYM_NAME_MAX]; /* the function, as in the symbol table (not demangled) */
	uintptr_t offset; /* pc minus the function's start */
};

/*
 * md_symbolize names the function holding pc from the full symbol table of
 * its object (.symtab, then .dynsym; symbols.c), falling back to dladdr's
 * answer, which it keeps when dladdr names a function at the same start.
 * It returns false if no loaded object holds pc. It never calls malloc,
 * keeps errno, and must not be called from a signal handler.
 */
bool md_symbolize(uintptr_t pc, struct md_sym *out);

/*
 * The calls reported at the probe sites (site.c), numbered as in mdtrace's
 * BPF programs (enum call in bpf/mdtrace.bpf.c).
 */
enum md_site_call {
	MD_CALL_MALLOC = 1,
	MD_CALL_CALLOC = 2,   /* a0: count, a1: element size */
	MD_CALL_REALLOC = 3,  /* a0: old pointer, a1: size */
	MD_CALL_MEMALIGN = 5, /* a0: alignment, a1: size */
	MD_CALL_FREE = 9,     /* a0: the freed pointer */
};

/*
 * mdshim_site_alloc follows every allocation the program makes, failed ones
 * too, with its result, the call, its arguments and, when mdtrace records
 * calls (MDSHIM_RECORD), the CLOCK_MONOTONIC time the call started (else 0).
 * While recording it also follows every free, as MD_CALL_FREE. realloc's
 * old block is reported to mdshim_site_free before the real realloc.
 *
 * mdshim_site_free precedes every free of a non-NULL pointer (call
 * MD_CALL_FREE) and realloc of one (MD_CALL_REALLOC), before the block can
 * be handed out again.
 *
 * Sampling (MDSHIM_SAMPLE_BYTES), only the sampled blocks reach the sites:
 * a block's free or realloc calls mdshim_site_free only if the block was
 * reported. A realloc of a reported block whose new block is not sampled
 * calls mdshim_site_alloc only if it fails, with a NULL result, so that
 * the old block comes back; one of an unreported block whose new block is
 * sampled reports the new block as MD_CALL_MALLOC.
 */
/*
 * md_site_probed reports whether mdtrace probes a site: a probe replaces
 * its first byte, the start of a 5-byte NOP (0f 1f 44 00 00). A site that
 * is not probed costs nothing to skip. md_sites_dead is set in a fork
 * child whose sites could not be made safe to call (md_sites_after_fork).
 */
extern int md_sites_dead __attribute__((visibility("hidden")));
void md_sites_after_fork(void);

static inline bool md_site_probed(const void *site)
{
	return *(const volatile uint8_t *)site != 0x0f && !md_sites_dead;
}

void mdshim_site_alloc(void *ret, unsigned long call, unsigned long a0, unsigned long a1,
		       uint64_t start_ns) __attribute__((visibility("protected")));
void mdshim_site_free(void *ptr, unsigned long call) __attribute__((visibility("protected")));

/*
 * Batched sites (batch.c). With MDSHIM_BATCH=depth, the hooks of a shim
 * without checks hand allocations and frees over a buffer at a time, with
 * up to depth frames each, through mdshim_site_batch(b, used, epoch,
 * flags). struct md_batch is shared with mdtrace's probes and mdtrace
 * itself (bpf/mdtrace.bpf.c, tracer/batch.go): seq is odd while the buffer
 * is being handed over and emptied; used words of events follow, each
 * event a word of kind, frame count and epoch, then the block's address,
 * and for an allocation its size and its frames. REGISTER tells the probes
 * of a thread's new buffer, RETIRE of its end, INHERITED that a fork child
 * hands over calls made before the fork (its blocks are not a zygote
 * child's own).
 */
#define MD_BATCH_WORDS 440
#define MD_BATCH_HELD 48
#define MD_BATCH_HELD_BYTES (256 * 1024)
#define MD_BATCH_MAX_DEPTH 256
#define MD_BATCH_ALLOC 1
#define MD_BATCH_FREE 2
#define MD_BATCH_FRAMES_SHIFT 8
#define MD_BATCH_EPOCH_SHIFT 20
#define MD_BATCH_REGISTER 1
#define MD_BATCH_RETIRE 2
#define MD_BATCH_INHERITED 4

struct md_batch {
	uint64_t seq;
	uint64_t used;
	uint64_t words[MD_BATCH_WORDS];
};

/* A thread's buffer and what goes with it, in a page of its own. */
struct md_batch_thread {
	struct md_batch b;
	uintptr_t lo, hi; /* the thread's stack */
	struct md_batch_thread *prev, *next;
	unsigned nheld;
	int busy; /* inside a batched call: a nested one goes unbatched */
	size_t held_bytes;
	void *held[MD_BATCH_HELD];
};
_Static_assert(sizeof(struct md_batch_thread) <= 4096, "a thread's batch outgrew its page");

void mdshim_site_batch(struct md_batch *b, uint64_t used, uint64_t epoch, uint64_t flags)
	__attribute__((visibility("protected")));

/*
 * md_batch_on tells whether the hooks batch, md_batch_depth the frames an
 * allocation holds; md_batch_init reads them from MDSHIM_BATCH, and takes
 * the allocator's malloc_usable_size, which bounds the bytes a thread
 * holds. md_batch_alloc and md_batch_free add
 * an event, fp being the hook's frame; false means the call goes to the
 * unbatched sites. md_batch_sync hands over the thread's events before an
 * unbatched call.
 */
extern bool md_batch_on __attribute__((visibility("hidden")));
extern unsigned md_batch_depth __attribute__((visibility("hidden")));
void md_batch_init(size_t (*usable_size)(void *));
bool md_batch_alloc(void *fp, void *ptr, size_t size);
bool md_batch_free(void *fp, void *ptr);
void md_batch_sync(void);

/*
 * Sampling (sample.c). md_sample_bytes is the mean interval, in bytes,
 * between the allocations reported at the probe sites, 0 when every one is
 * (MDSHIM_SAMPLE_BYTES unset); md_sample_init reads it. md_sample_alloc
 * decides whether an allocation of size bytes is sampled; md_sample_mark
 * notes a sampled block (false if there was no memory for it: the block
 * must then not be reported), and md_sample_take reports whether a block
 * is a sampled one, forgetting it. Use them only with md_sample_bytes set.
 */
extern uint64_t md_sample_bytes __attribute__((visibility("hidden")));
void md_sample_init(void);
bool md_sample_alloc(size_t size);
bool md_sample_mark(const void *p);
bool md_sample_take(const void *p);

/*
 * md_internal_begin and md_internal_end bracket the library's own use of
 * code that may allocate (stdio, dlsym): calls made in between go straight
 * to glibc and are neither checked nor reported. They nest.
 */
void md_internal_begin(void);
void md_internal_end(void);

/* md_mix64 is MurmurHash3's 64-bit finalizer: every bit of h reaches every bit. */
static inline uint64_t md_mix64(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

/*
 * md_ptrtab maps pointers to a word (ptrtab.c): the live blocks of
 * verify_pointers and the blocks free_track holds. Lookups and updates are
 * O(1) on average; each shard has its own spin lock, taken inside the calls,
 * and its storage comes from mmap, so nothing here calls malloc. Initialize
 * a table with MD_PTRTAB_INITIALIZER. Around fork, call fork_prepare before
 * and fork_parent or fork_child after.
 */
#define MD_PTRTAB_SHARD_BITS 4
#define MD_PTRTAB_SHARDS (1 << MD_PTRTAB_SHARD_BITS)

struct md_ptrtab_slot {
	uintptr_t key; /* the pointer inverted; 0: empty */
	uintptr_t value;
};

struct md_ptrtab_shard {
	int lock; /* a spin lock: 0 free, 1 held */
	struct md_ptrtab_slot *slots;
	size_t cap; /* a power of two, or 0 before the first put */
	size_t count;
};

struct md_ptrtab {
	struct md_ptrtab_shard shards[MD_PTRTAB_SHARDS];
};

#define MD_PTRTAB_INITIALIZER \
	{ .shards = { [0 ... MD_PTRTAB_SHARDS - 1] = { .lock = 0 } } }

/* md_ptrtab_put adds ptr or updates its value; false if there was no memory for it. */
bool md_ptrtab_put(struct md_ptrtab *t, const void *ptr, uintptr_t value);

/* md_ptrtab_get reports whether ptr is in the table and, if value is not NULL, its value. */
bool md_ptrtab_get(struct md_ptrtab *t, const void *ptr, uintptr_t *value);

/* md_ptrtab_take is md_ptrtab_get that also removes ptr, in the same step. */
bool md_ptrtab_take(struct md_ptrtab *t, const void *ptr, uintptr_t *value);

void md_ptrtab_fork_prepare(struct md_ptrtab *t);
void md_ptrtab_fork_parent(struct md_ptrtab *t);
void md_ptrtab_fork_child(struct md_ptrtab *t);

/*
 * The control channel to mdtrace and Android's signals (ctl.c).
 *
 * md_ctl_init installs the handlers of the signals the options in cfg ask
 * for (45 to 49, SIGRTMAX-19 to SIGRTMAX-15), logging Android's "Run:
 * 'kill ...'" lines when verbose. Call it once, after the options are
 * parsed and before "malloc debug enabled" is logged. Under mdtrace
 * (MDSHIM_CTL set) the handlers of 45 to 48 pass the signal on to mdtrace.
 *
 * md_ctl_poll acts on the signals that arrived since the last call (the
 * allocator stats of 49, or the line saying a signal was ignored without
 * mdtrace). Call it from the malloc and free hooks: with nothing pending it
 * costs one relaxed atomic load. It keeps errno.
 */
void md_ctl_init(const struct md_config *cfg);

/*
 * md_ctl_adopt, in a fork child that nothing traces, asks mdtrace to follow
 * it and waits until it does or declines (bounded): ptrace reports only the
 * forks of the threads mdtrace traces, the main ones. It does nothing
 * without mdtrace or when the child is traced already.
 */
void md_ctl_adopt(void);

extern unsigned int md_ctl_pending __attribute__((visibility("hidden")));
void md_ctl_poll_slow(void) __attribute__((visibility("hidden")));

static inline void md_ctl_poll(void)
{
	if (__builtin_expect(__atomic_load_n(&md_ctl_pending, __ATOMIC_RELAXED) != 0, 0))
		md_ctl_poll_slow();
}

#endif
