// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * An x86-64 unwinder from .eh_frame, for backtraces through code built
 * without frame pointers (Debian's and RHEL's packages, every default -O2
 * build). It runs inside malloc: it allocates nothing, takes no lock, and
 * is safe in a signal handler and under concurrent threads.
 *
 * A return address is looked up in a direct-mapped cache of rules, one
 * word a pc; a miss asks cfi.c for the rule from the object's .eh_frame.
 * Each frame then gives its caller's: CFA = rsp or rbp plus an offset,
 * the return address at CFA - 8, rbp restored if it was saved, rsp = CFA;
 * at the sigreturn trampoline the registers the signal stopped come from
 * the ucontext; code without an FDE takes one frame-pointer step if rbp
 * holds a record on the stack. Every stop is counted by its reason. A
 * thread's walk that meets its last walk's frames with the same registers
 * checks the stack words that walk used and takes the rest from it (the
 * memo, below): a hot call site costs a compare a frame, not a lookup.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ucontext.h>
#include <pthread.h>

#include "cfi.h"
#include "unwind.h"

/* glibc 2.35 and later (cfi.c); without it the loader is not known. */
extern __typeof__(_dl_find_object) _dl_find_object __attribute__((weak));
/* A function of the dynamic loader's own (libc has _dl_find_object). */
extern void *__tls_get_addr(void *) __attribute__((weak));

/* This library's image, provided by the linker. */
extern const char __ehdr_start[] __attribute__((visibility("hidden")));
extern const char _end[] __attribute__((visibility("hidden")));

/* ---- the cache of rules ---- */

/*
 * The cache: a slot per hash of a pc, holding the rule and a check word,
 * the pc's hash xor the rule. Slots are written and read a word at a time
 * with no lock; a read that mixes two writes (two threads, or a signal
 * handler, filling a slot at once) fails the check, but for odds of 2^-51.
 */
#define CACHE_BITS 13
#define HASH_MUL 0x9e3779b97f4a7c15ULL

struct slot {
	uint64_t check, rule;
};
static struct slot cache[1 << CACHE_BITS];

/*
 * The generation of the code mapped: dlclose moves it on, and with it the
 * check word of every slot and memo, so that a library mapped later where
 * an unloaded one was is never walked by the old one's rules.
 */
static uint64_t g_gen;

static inline union md_rule lookup(uintptr_t pc)
{
	uint64_t h = (uint64_t)pc * HASH_MUL;
	struct slot *s = &cache[h >> (64 - CACHE_BITS)];
	union md_rule r;

	h ^= __atomic_load_n(&g_gen, __ATOMIC_ACQUIRE);
	r.word = __atomic_load_n(&s->rule, __ATOMIC_RELAXED);
	if (__builtin_expect((__atomic_load_n(&s->check, __ATOMIC_RELAXED) ^ r.word) == h && r.kind != MD_RULE_NONE, 1))
		return r;
	r = md_cfi_rule(pc);
	if (r.kind != MD_RULE_BAD_RA) {
		__atomic_store_n(&s->rule, r.word, __ATOMIC_RELAXED);
		__atomic_store_n(&s->check, h ^ r.word, __ATOMIC_RELAXED);
	}
	return r;
}

/*
 * batch.c's md_early_hold, for dlclose; absent where this file is built
 * without it (its tests).
 */
void md_early_hold_dlclose(void) __attribute__((weak, visibility("hidden")));

/*
 * dlclose, then a new generation: the unloaded library's rules are dropped.
 * In an early start a library is unloaded only once mdtrace is ready
 * (md_early_hold): mdtrace reads the process's maps then, and names the
 * frames of the calls held from them; a library gone by then would leave
 * its frames unnamed.
 */
__attribute__((visibility("default"))) int dlclose(void *handle)
{
	static int (*next)(void *);
	int (*f)(void *) = __atomic_load_n(&next, __ATOMIC_RELAXED);
	int ret;

	if (md_early_hold_dlclose != NULL)
		md_early_hold_dlclose();

	if (f == NULL) {
		f = (int (*)(void *))dlsym(RTLD_NEXT, "dlclose");
		if (f == NULL)
			return -1;
		__atomic_store_n(&next, f, __ATOMIC_RELAXED);
	}
	ret = f(handle);
	__atomic_fetch_add(&g_gen, 1, __ATOMIC_RELEASE);
	return ret;
}

/* ---- the walk ---- */

/* Stop counts, in stripes that threads pick by the address of their TLS, so that they seldom share a line. */
#define STRIPES 16
static struct {
	uint64_t n[MD_UNWIND_STOPS];
} __attribute__((aligned(64))) g_stops[STRIPES];
static __thread char t_stripe __attribute__((tls_model("initial-exec")));

static size_t stop(enum md_unwind_stop why, size_t n)
{
	unsigned s = (unsigned)(((uintptr_t)&t_stripe * HASH_MUL) >> 60);

	__atomic_fetch_add(&g_stops[s].n[why], 1, __ATOMIC_RELAXED);
	return n;
}

void md_unwind_stops(uint64_t counts[MD_UNWIND_STOPS])
{
	for (int i = 0; i < MD_UNWIND_STOPS; i++) {
		counts[i] = 0;
		for (int s = 0; s < STRIPES; s++)
			counts[i] += __atomic_load_n(&g_stops[s].n[i], __ATOMIC_RELAXED);
	}
}

/* The walk's registers: a frame's return address (or interrupted pc + 1), rsp and rbp. */
struct regs {
	uintptr_t ra, sp, bp;
	bool bp_lost; /* rbp's value is not known */
	bool exact;   /* ra - 1 is where the frame stopped, not a call: a signal came there */
	bool guess;   /* a frame-pointer record was taken for a frame: what follows may not be frames */
};

/*
 * The memo of a thread's last walk: the registers at each frame, the stack
 * words each step read, and how the walk ended. A walk that comes to a
 * frame of the memo with the same registers (the same return address at
 * the same rsp: a hot call site, or its callers) checks that those words
 * still hold what they held, a load each and no chain of lookups, and
 * takes the memo's frames from there (bytehound's shadow stack, checked).
 * Code without frame pointers keeps data in rbp, which its callees save:
 * a saved rbp, and rbp itself, are checked only where a later step used
 * rbp's value. The memo holds the first MEMO_FRAMES frames; a walk goes
 * on from its end. Two per thread: the last walk's, and the one being
 * written.
 */
#define MEMO_FRAMES 32
#define MEMO_WORDS 64
/* The low bits of a word's address: it holds a saved rbp; no step used that value (not checked). */
#define WORD_BP 2
#define WORD_SOFT 1

struct memo_frame {
	struct regs r;
	uint16_t word;   /* the first of the words its step read */
	bool trampoline; /* the sigreturn trampoline: it stopped where ra is */
	bool bp_used;    /* a step from here on used r.bp */
};

struct memo {
	uintptr_t lo, hi; /* the stack it was read in */
	uint64_t gen;     /* the generation of the code it was read with */
	unsigned nframes, nwords;
	int why;          /* the last frame's step stopped the walk for why; or -1 */
	struct regs last; /* with -1: the registers the walk stopped at, or went on from */
	struct memo_frame frames[MEMO_FRAMES];
	struct {
		uintptr_t addr, val;
	} words[MEMO_WORDS];
};

/*
 * The two memos of a thread are in pages of their own, made at its first
 * walk and unmapped at its end: in static TLS they took 4.7 KB, more than
 * the loader keeps for a library loaded into a running process
 * (--inject). NO_MEMOS marks a thread that goes without them.
 */
static __thread struct memo *t_memo __attribute__((tls_model("initial-exec")));
#define NO_MEMOS ((struct memo *)1)
static pthread_key_t g_memo_key;
static pthread_once_t g_memo_once = PTHREAD_ONCE_INIT;
static bool g_memo_keyed;

/*
 * The library's mark of a thread inside it (debug.c), weak: the unwinder's
 * own tests link it alone. pthread_setspecific may allocate.
 */
extern void md_internal_begin(void) __attribute__((weak, visibility("hidden")));
extern void md_internal_end(void) __attribute__((weak, visibility("hidden")));

static void memos_done(void *m)
{
	t_memo = NO_MEMOS;
	munmap(m, 2 * sizeof(struct memo));
}

static void memo_key(void)
{
	g_memo_keyed = pthread_key_create(&g_memo_key, memos_done) == 0;
}

/* memos returns the thread's two memos, made on its first walk, or NULL. */
static struct memo *memos(void)
{
	void *m;

	if (__builtin_expect(t_memo != NULL, 1))
		return t_memo == NO_MEMOS ? NULL : t_memo;
	t_memo = NO_MEMOS;
	if (md_internal_begin)
		md_internal_begin();
	pthread_once(&g_memo_once, memo_key);
	m = g_memo_keyed ? mmap(NULL, 2 * sizeof(struct memo), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
			 : MAP_FAILED;
	if (m != MAP_FAILED && pthread_setspecific(g_memo_key, m) != 0) {
		munmap(m, 2 * sizeof(struct memo));
		m = MAP_FAILED;
	}
	if (md_internal_end)
		md_internal_end();
	if (m == MAP_FAILED)
		return NULL;
	t_memo = m;
	return t_memo;
}
static __thread unsigned t_memo_last __attribute__((tls_model("initial-exec")));
/* A walk is using the memos: one in a signal handler goes without. */
static __thread bool t_memo_busy __attribute__((tls_model("initial-exec")));
__thread unsigned long md_unwind_replays __attribute__((tls_model("initial-exec")));
__thread unsigned long md_unwind_walks __attribute__((tls_model("initial-exec")));
/*
 * The last walk with the memos: its frame limit (0: none yet), flags,
 * frames and stop, whose memo is t_memo[t_memo_last].
 */
static __thread size_t t_last_max, t_last_n __attribute__((tls_model("initial-exec")));
static __thread unsigned t_last_flags __attribute__((tls_model("initial-exec")));
static __thread enum md_unwind_stop t_last_why __attribute__((tls_model("initial-exec")));

/*
 * A walk: the stack, where its frames go, the memo that will be its own
 * (NULL when it has none) and the one it writes to (NULL once written),
 * and where rbp's value came from there.
 */
struct walk {
	uintptr_t lo, hi;
	uintptr_t alt_lo, alt_hi; /* the signal stack the walk starts on, or none */
	uintptr_t *out;
	size_t n, max;
	unsigned flags;
	struct memo *memo, *rec;
	bool full;         /* rec had no room for a word */
	int bp_word;       /* the word of rec rbp was read from, or -1 */
	unsigned bp_frame; /* the first frame of rec that holds that rbp */
};

/* on_alt reports whether addr lies in the walk's signal stack. */
static inline bool on_alt(const struct walk *w, uintptr_t addr)
{
	return addr >= w->alt_lo && addr + sizeof(uintptr_t) <= w->alt_hi;
}

/* load reads the word at addr if it lies in the stack [lo, hi) (or the signal stack), and notes it in the memo. */
static inline bool load(struct walk *w, uintptr_t addr, uintptr_t *v)
{
	if ((addr < w->lo || addr > w->hi - sizeof(uintptr_t) || (addr & 7) != 0) && ((addr & 7) != 0 || !on_alt(w, addr)))
		return false;
	*v = *(const uintptr_t *)addr;
	if (w->rec != NULL) {
		if (w->rec->nwords < MEMO_WORDS) {
			w->rec->words[w->rec->nwords].addr = addr;
			w->rec->words[w->rec->nwords++].val = *v;
		} else {
			w->full = true;
		}
	}
	return true;
}

/* load_bp loads the caller's rbp from addr: checked once a step uses it. */
static inline bool load_bp(struct walk *w, uintptr_t addr, struct regs *r)
{
	if (!load(w, addr, &r->bp))
		return false;
	r->bp_lost = false;
	if (w->rec != NULL && !w->full) {
		w->bp_word = (int)w->rec->nwords - 1;
		w->rec->words[w->bp_word].addr |= WORD_BP | WORD_SOFT;
		w->bp_frame = w->rec->nframes;
	}
	return true;
}

/* use_bp notes that a step uses rbp's value: the word it came from, and the frames that hold it, are checked. */
static void use_bp(struct walk *w)
{
	if (w->rec == NULL)
		return;
	if (w->bp_word >= 0)
		w->rec->words[w->bp_word].addr &= ~(uintptr_t)WORD_SOFT;
	for (unsigned i = w->bp_frame; i < w->rec->nframes; i++)
		w->rec->frames[i].bp_used = true;
	w->bp_word = -1;
	w->bp_frame = w->rec->nframes;
}

/* fp_step steps over a frame record at rbp, on the stack above rsp. */
static bool fp_step(struct walk *w, struct regs *r)
{
	uintptr_t bp = r->bp;

	use_bp(w);
	if (r->bp_lost || bp < r->sp || !load(w, bp + 8, &r->ra) || !load_bp(w, bp, r))
		return false;
	r->sp = bp + 16;
	r->exact = false;
	r->guess = true;
	return true;
}

/* in_loader reports whether pc is in the dynamic loader, where __tls_get_addr is. */
static bool in_loader(uintptr_t pc)
{
	static uintptr_t start, end;
	struct dl_find_object obj;

	if (__atomic_load_n(&end, __ATOMIC_RELAXED) == 0) {
		if (_dl_find_object == NULL || __tls_get_addr == NULL || _dl_find_object((void *)__tls_get_addr, &obj) != 0)
			return false;
		__atomic_store_n(&start, (uintptr_t)obj.dlfo_map_start, __ATOMIC_RELAXED);
		__atomic_store_n(&end, (uintptr_t)obj.dlfo_map_end, __ATOMIC_RELAXED);
	}
	return pc >= __atomic_load_n(&start, __ATOMIC_RELAXED) && pc < __atomic_load_n(&end, __ATOMIC_RELAXED);
}

/*
 * step moves r from a frame to its caller by rule; it returns the reason
 * to stop, or MD_UNWIND_STOPS to go on.
 */
static enum md_unwind_stop step(struct walk *w, struct regs *r, union md_rule rule)
{
	uintptr_t cfa, ra;

	switch (rule.kind) {
	case MD_RULE_CFA:
		if (rule.cfa_bp) {
			if (r->bp_lost)
				return MD_UNWIND_UNSUPPORTED;
			use_bp(w);
		}
		cfa = (rule.cfa_bp ? r->bp : r->sp) + (intptr_t)rule.cfa_off;
		if (rule.deref && !load(w, cfa, &cfa))
			return MD_UNWIND_STACK_BOUNDS;
		if (cfa <= r->sp || !load(w, cfa + (intptr_t)rule.ra_off, &ra))
			return MD_UNWIND_STACK_BOUNDS;
		if (rule.bp_saved) {
			if (!load_bp(w, cfa + (intptr_t)rule.bp_off, r))
				return MD_UNWIND_STACK_BOUNDS;
		} else if (rule.bp_lost) {
			r->bp_lost = true;
		}
		r->ra = ra;
		r->sp = cfa;
		r->exact = false;
		return MD_UNWIND_STOPS;
	case MD_RULE_SIGNAL: {
		/* rsp points at the ucontext the kernel pushed under the handler's frame. */
		uintptr_t gregs = r->sp + offsetof(ucontext_t, uc_mcontext.gregs), rip, sp;

		/* From a signal stack the interrupted code's stack may lie anywhere. */
		if (!load(w, gregs + REG_RIP * 8, &rip) || !load(w, gregs + REG_RSP * 8, &sp) ||
		    (sp <= r->sp && !(on_alt(w, r->sp) && !on_alt(w, sp))) || !load_bp(w, gregs + REG_RBP * 8, r))
			return MD_UNWIND_STACK_BOUNDS;
		r->ra = rip + 1;
		r->sp = sp;
		r->exact = true;
		return MD_UNWIND_STOPS;
	}
	case MD_RULE_NO_FDE:
		/* Where a signal stopped code without an FDE, a PLT stub's: the return address on top. */
		if (r->exact && load(w, r->sp, &ra) && lookup(ra - 1).kind != MD_RULE_BAD_RA) {
			r->ra = ra;
			r->sp += 8;
			r->exact = false;
			return MD_UNWIND_STOPS;
		}
		if (fp_step(w, r))
			return MD_UNWIND_STOPS;
		/*
		 * The dynamic loader's start (_dl_start_user, which calls the
		 * libraries' constructors) has no FDE and zeroes rbp to mark the
		 * outermost frame: the stack ends there.
		 */
		return !r->bp_lost && r->bp == 0 && in_loader(r->ra - 1) ? MD_UNWIND_END : MD_UNWIND_NO_FDE;
	case MD_RULE_END:
		return MD_UNWIND_END;
	default:
		return MD_UNWIND_UNSUPPORTED;
	}
}

static inline bool in_self(uintptr_t pc)
{
	return pc >= (uintptr_t)__ehdr_start && pc < (uintptr_t)_end;
}

/*
 * emit stores a frame's return address, or its pc with MD_UNWIND_PC (the
 * trampoline's frame is where it stopped: one more); false at the frame
 * limit. A frame in the shim is skipped with MD_UNWIND_NO_SELF.
 */
static inline bool emit(struct walk *w, uintptr_t ra, bool trampoline)
{
	if ((w->flags & MD_UNWIND_NO_SELF) && in_self(ra - 1))
		return true;
	if (w->n == w->max)
		return false;
	w->out[w->n++] = ra - (w->flags & MD_UNWIND_PC ? 1 : 0) + trampoline;
	return true;
}

/*
 * rec_end ends the memo being written: the walk stopped there for why, or
 * (why -1) stopped or goes on unwritten at r, whose rbp a step may use.
 */
static void rec_end(struct walk *w, const struct regs *r, int why)
{
	if (w->rec == NULL)
		return;
	if (why < 0) {
		use_bp(w);
		w->rec->last = *r;
	}
	w->rec->why = why;
	w->rec = NULL;
}

/* frame takes one frame at r and steps to its caller; it returns the reason to stop, or MD_UNWIND_STOPS. */
static enum md_unwind_stop frame(struct walk *w, struct regs *r)
{
	struct regs at = *r;
	int bp_word = w->bp_word;
	unsigned bp_frame = w->bp_frame;
	struct memo *m;
	union md_rule rule;
	enum md_unwind_stop why;

	if (r->ra < 4096 || r->ra >= (1ULL << 47) || (rule = lookup(r->ra - 1)).kind == MD_RULE_BAD_RA) {
		rec_end(w, r, -1);
		/*
		 * A return address found by rules alone, with no frame-pointer
		 * record taken on the way, is a caller's, in code no object
		 * describes (generated at run time): its frame is kept, as the
		 * probes keep it, and the walk ends there.
		 */
		if (!r->guess && r->ra >= 4096 && r->ra < (1ULL << 47) && !emit(w, r->ra, false))
			return MD_UNWIND_FRAME_LIMIT;
		return MD_UNWIND_BAD_RA;
	}
	if (!emit(w, r->ra, rule.kind == MD_RULE_SIGNAL)) {
		rec_end(w, r, -1);
		return MD_UNWIND_FRAME_LIMIT;
	}
	if (w->rec != NULL && w->rec->nframes == MEMO_FRAMES)
		rec_end(w, r, -1);
	m = w->rec;
	if (m != NULL)
		m->frames[m->nframes++] = (struct memo_frame){at, (uint16_t)m->nwords, rule.kind == MD_RULE_SIGNAL, false};
	why = step(w, r, rule);
	if (w->full) {
		/* The frame's words did not fit: the memo ends before it. */
		m->nwords = m->frames[--m->nframes].word;
		w->full = false;
		w->bp_word = bp_word;
		w->bp_frame = bp_frame;
		rec_end(w, &at, -1);
	}
	if (why != MD_UNWIND_STOPS)
		rec_end(w, NULL, (int)why);
	return why;
}

static bool same_regs(const struct memo_frame *f, const struct regs *r)
{
	return f->r.ra == r->ra && f->r.sp == r->sp && f->r.bp_lost == r->bp_lost && f->r.exact == r->exact &&
	       (!f->bp_used || r->bp_lost || f->r.bp == r->bp);
}

/*
 * checked reports whether the stack words the memo's frames from k on used
 * still hold what they held. Every word is read, a soft one too (it lies
 * in the stack, where the walk read it), and its difference masked: a
 * branch on each word's softness, which varies from word to word, would be
 * mispredicted where this loop runs at every allocation.
 */
static bool checked(const struct memo *m, unsigned k)
{
	uintptr_t diff = 0;

	for (unsigned i = m->frames[k].word; i < m->nwords; i++) {
		uintptr_t addr = m->words[i].addr;

		diff |= (*(const uintptr_t *)(addr & ~(uintptr_t)7) ^ m->words[i].val) & ((addr & WORD_SOFT) - 1);
	}
	return diff == 0;
}

/* copy_frame appends the last walk's frame i, and its words, to the memo being written. */
static void copy_frame(struct walk *w, const struct memo *last, unsigned i)
{
	const struct memo_frame *f = &last->frames[i];
	unsigned end = i + 1 < last->nframes ? last->frames[i + 1].word : last->nwords;
	struct memo *m = w->rec;

	if (m->nframes == MEMO_FRAMES || m->nwords + (end - f->word) > MEMO_WORDS) {
		rec_end(w, &f->r, -1);
		return;
	}
	m->frames[m->nframes] = *f;
	m->frames[m->nframes++].word = (uint16_t)m->nwords;
	for (unsigned j = f->word; j < end; j++) {
		if (last->words[j].addr & WORD_BP) {
			w->bp_word = (int)m->nwords;
			w->bp_frame = m->nframes;
		}
		m->words[m->nwords++] = last->words[j];
	}
}

/*
 * replay takes the frames of the last walk's memo from k on, the stack
 * being as it was there, and returns why that walk stopped, or
 * MD_UNWIND_STOPS with r where it went on. The memo being written takes
 * them too; where the walk is the same from its first frame, the last
 * memo becomes its own.
 */
static enum md_unwind_stop replay(struct walk *w, struct memo *last, unsigned k, struct regs *r)
{
	md_unwind_replays++;
	if (last->frames[k].bp_used)
		use_bp(w);
	if (w->rec != NULL && w->rec->nframes == 0 && k == 0) {
		w->memo = w->rec = last;
		w->bp_frame = last->nframes;
	}
	for (unsigned i = k; i < last->nframes; i++) {
		const struct memo_frame *f = &last->frames[i];

		if (w->rec == last) {
			/*
			 * The memo is the walk's own: its frames go out as
			 * they are, the count in a register (a store through
			 * out could be to w->n, for all the compiler knows).
			 */
			size_t n = w->n;

			if (!(w->flags & MD_UNWIND_NO_SELF)) {
				uintptr_t adj = w->flags & MD_UNWIND_PC ? 1 : 0;

				for (; i < last->nframes && n < w->max; i++)
					w->out[n++] = last->frames[i].r.ra - adj + last->frames[i].trampoline;
				w->n = n;
				if (i == last->nframes)
					break;
				f = &last->frames[i];
			}
		}
		if (!emit(w, f->r.ra, f->trampoline)) {
			/* Ended here for this walk: the last memo stays as it was. */
			if (w->rec == last)
				w->rec = NULL;
			rec_end(w, &f->r, -1);
			return MD_UNWIND_FRAME_LIMIT;
		}
		if (w->rec != NULL && w->rec != last)
			copy_frame(w, last, i);
	}
	if (last->why >= 0) {
		if (w->rec != last)
			rec_end(w, NULL, last->why);
		w->rec = NULL;
		return (enum md_unwind_stop)last->why;
	}
	*r = last->last;
	return MD_UNWIND_STOPS;
}

size_t md_unwind(uintptr_t fp, uintptr_t lo, uintptr_t hi, uintptr_t *out, size_t max, unsigned flags,
		 enum md_unwind_stop *why_out)
{
	return md_unwind_alt(fp, lo, hi, 0, 0, out, max, flags, why_out);
}

size_t md_unwind_alt(uintptr_t fp, uintptr_t lo, uintptr_t hi, uintptr_t alt_lo, uintptr_t alt_hi, uintptr_t *out,
		     size_t max, unsigned flags, enum md_unwind_stop *why_out)
{
	struct walk w = {lo, hi, alt_lo, alt_hi, out, 0, max, flags, NULL, NULL, false, -1, 0};
	struct memo *last = NULL, *mine = NULL;
	enum md_unwind_stop why;
	struct regs r = {0};
	unsigned k = 0;

	if (why_out != NULL)
		*why_out = MD_UNWIND_STACK_BOUNDS;
	if ((fp < lo || fp > hi - 16 || (fp & 7) != 0) && ((fp & 7) != 0 || !on_alt(&w, fp) || !on_alt(&w, fp + 8)))
		return stop(MD_UNWIND_STACK_BOUNDS, 0);
	r.bp = ((const uintptr_t *)fp)[0];
	r.ra = ((const uintptr_t *)fp)[1];
	r.sp = fp + 16;
	/* A walk from a signal stack goes without the memos, which are of one stack. */
	if (!t_memo_busy && alt_hi == 0) {
		t_memo_busy = true;
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		mine = memos();
		if (mine == NULL) {
			__atomic_signal_fence(__ATOMIC_SEQ_CST);
			t_memo_busy = false;
		}
	}
	if (mine != NULL) {
		uint64_t gen = __atomic_load_n(&g_gen, __ATOMIC_ACQUIRE);

		last = &mine[t_memo_last];
		if (last->lo != lo || last->hi != hi || last->gen != gen)
			last->nframes = 0;
		w.memo = w.rec = &mine[t_memo_last ^ 1];
		w.rec->lo = lo;
		w.rec->hi = hi;
		w.rec->gen = gen;
		w.rec->nframes = w.rec->nwords = 0;
		w.rec->why = -1;
	}
	for (;;) {
		/* The memo's frames are in the order of their rsp, as the walk's are. */
		while (last != NULL && k < last->nframes && last->frames[k].r.sp < r.sp)
			k++;
		if (last != NULL && k < last->nframes && same_regs(&last->frames[k], &r)) {
			/* One check a walk: if the stack changed there, it will have changed above. */
			if (checked(last, k)) {
				why = replay(&w, last, k, &r);
				if (why != MD_UNWIND_STOPS)
					break;
			}
			last = NULL;
			continue;
		}
		why = frame(&w, &r);
		if (why != MD_UNWIND_STOPS)
			break;
	}
	if (w.memo != NULL) {
		if (w.memo != &mine[t_memo_last])
			t_memo_last ^= 1;
		t_last_max = max;
		t_last_n = w.n;
		t_last_flags = flags;
		t_last_why = why;
		md_unwind_walks++;
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		t_memo_busy = false;
	}
	if (why_out != NULL)
		*why_out = why;
	return stop(why, w.n);
}

bool md_unwind_same(uintptr_t fp, uintptr_t lo, uintptr_t hi, size_t max, unsigned flags, size_t *n,
		    enum md_unwind_stop *why)
{
	const struct memo *m;
	struct regs r = {0};
	bool same;

	if (t_memo_busy || t_last_max == 0 || t_last_max != max || t_last_flags != flags || fp < lo || fp > hi - 16 ||
	    (fp & 7) != 0)
		return false;
	t_memo_busy = true;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	m = &t_memo[t_memo_last];
	r.bp = ((const uintptr_t *)fp)[0];
	r.ra = ((const uintptr_t *)fp)[1];
	r.sp = fp + 16;
	/*
	 * The last walk's frames all came from its memo: max of them, the
	 * memo reaching that far (the walk was cut there, or ended, for a
	 * reason the words checked decide), or all of the memo's, which
	 * recorded where the walk stopped. Each of its frames gave one (no
	 * MD_UNWIND_NO_SELF, which skips some).
	 */
	same = m->lo == lo && m->hi == hi && m->gen == __atomic_load_n(&g_gen, __ATOMIC_ACQUIRE) && m->nframes > 0 &&
	       !(flags & MD_UNWIND_NO_SELF) &&
	       (t_last_n == max ? m->nframes >= max : m->why >= 0 && t_last_n == m->nframes) &&
	       same_regs(&m->frames[0], &r) && checked(m, 0);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	t_memo_busy = false;
	if (!same)
		return false;
	md_unwind_replays++;
	*n = t_last_n;
	*why = t_last_why;
	stop(t_last_why, 0);
	return true;
}
