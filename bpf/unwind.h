/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Unwinding without frame pointers: the tables mdtrace extracts from each
 * file's .eh_frame and .debug_frame (unwind/ in Go), and one step of a walk
 * that follows them. A table is a sorted run of entries in one array shared
 * by every traced process; each process has the list of its executable file
 * mappings, with where each file's run is.
 */
#ifndef MDTRACE_UNWIND_H
#define MDTRACE_UNWIND_H

#include "common.h"

/*
 * An entry: from pc (an address as the file gives it) to the next entry's,
 * the rule to find the caller (tracer/unwind.go packs it):
 *   bits 0-2   base: UNWIND_RSP, UNWIND_RBP (CFA = the register + offset),
 *              UNWIND_PLT (a PLT stub), UNWIND_STOP, UNWIND_SIGNAL
 *   bits 3-5   with UNWIND_STOP, why; UNWIND_END_OF_STACK: the last frame
 *   bits 6-21  the CFA's offset (a PLT stub: the pc's low-bits threshold)
 *   bits 22-29 where rbp is saved, in 8-byte words below the CFA; 0 when
 *              rbp is unchanged
 * The return address is at CFA-8 (other rules are stops).
 */
struct unwind_entry {
	u32 pc;
	u32 rule;
};

#define UNWIND_RSP 0
#define UNWIND_RBP 1
#define UNWIND_PLT 2
#define UNWIND_STOP 3
#define UNWIND_SIGNAL 4
#define UNWIND_BASE(r) ((r) & 7)
#define UNWIND_WHY(r) (((r) >> 3) & 7)
#define UNWIND_END_OF_STACK 1
#define UNWIND_NO_FDE 2
#define UNWIND_OFFSET(r) (((r) >> 6) & 0xffff)
#define UNWIND_RBP_WORDS(r) (((r) >> 22) & 0xff)

/*
 * A file's table: an array of exactly its entries, made by user space when
 * the file is first mapped by a traced process (the inner map's size is the
 * file's, BPF_F_INNER_MAP letting each be another), and shared by every
 * process that maps the file. unwind_tables holds them by number, from 1.
 */
struct file_unwind_table {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_INNER_MAP);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(u32));
	/* A size, not a type: a type two pointers deep in a map's
	 * definition reaches BTF only as a declaration (struct unwind_regs
	 * holds one, for user space's type). */
	__uint(value_size, sizeof(struct unwind_entry));
};

#define MAX_UNWIND_TABLES 8192
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, MAX_UNWIND_TABLES);
	__type(key, u32);
	__array(values, struct file_unwind_table);
} unwind_tables SEC(".maps");

/*
 * A process's executable file mapping: [start, end), the difference between
 * its addresses and the file's (bias), and its file's table: its number in
 * unwind_tables and its count of entries; count 0 when the file has none.
 */
struct unwind_mapping {
	u64 start, end, bias;
	u32 table, count;
	/* The dynamic loader's, whose start has no FDE and zeroes rbp. */
	u32 loader;
	u32 unused;
};

#define MAX_UNWIND_MAPPINGS 128
/*
 * A process's executable file mappings: sorted by address as user space
 * writes them from /proc/PID/maps; in the loader's order, unsorted, as
 * the loader's notice writes them (libraries_changed) until user space
 * has read the notice. notices is the process's count of the loader's
 * notices (unwind_notices) when user space read the maps it wrote the list
 * from: a notice since, whose list user space's write replaced, may have
 * a library the list lacks (may_defer). Under --all, which watches no
 * loader, stale_second and stale_walks bound the walks a second that stop
 * outside the list and are left to mdtrace, which writes it again.
 */
struct unwind_proc {
	u32 n;
	u32 unsorted;
	u64 notices;
	u32 stale_second;
	u32 stale_walks;
	struct unwind_mapping m[MAX_UNWIND_MAPPINGS];
};

/*
 * A file's table, and the file's executable addresses [text_start,
 * text_end) as the file gives them: what the loader's notice needs to
 * give a library just loaded its mapping, before user space hears of it.
 */
struct unwind_file {
	u64 text_start, text_end;
	u32 table, count;
	u32 loader; /* as in struct unwind_mapping */
	u32 unused;
};

/*
 * The loader's notices that rewrote each process's list: user space reads
 * the count before it reads the process's maps and after it writes the
 * list from them, and does it again if a notice came between, whose
 * library its list would lack.
 */
struct process_map64 unwind_notices SEC(".maps");

static __always_inline void count_notice(u32 tgid)
{
	u64 *n = bpf_map_lookup_elem(&unwind_notices, &tgid), one = 1;

	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&unwind_notices, &tgid, &one, BPF_ANY);
}

/* Files' tables by the FNV-1a hash of their path as the loader names
 * them (l_name), loaded ahead by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, u64);
	__type(value, struct unwind_file);
} unwind_files SEC(".maps");

/* Each traced process's executable's table (the loader names it ""). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MAX_PROCESSES);
	__type(key, u32);
	__type(value, struct unwind_file);
} unwind_exes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MAX_PROCESSES);
	__type(key, u32);
	__type(value, struct unwind_proc);
} unwind_procs SEC(".maps");

/* Where glibc's signal frame keeps the interrupted registers, from rsp: the
 * ucontext's uc_mcontext.gregs[REG_RBP, REG_RSP, REG_RIP]. */
#define SIGNAL_RBP 120
#define SIGNAL_RSP 160
#define SIGNAL_RIP 168

/* What a step of the walk did. */
enum unwind_step {
	STEP_ON = 0,	 /* a caller found: go on */
	STEP_DONE,	 /* the outermost frame: the stack is complete */
	STEP_STOP,	 /* the walk cannot go on (the caller counts it) */
	STEP_NO_TABLE,	 /* the pc's file has no table: try its frame pointer */
	STEP_UNKNOWN,	 /* the pc is in no file the list has: try its frame pointer */
	STEP_NO_FDE,	 /* the pc is in code its file's table does not cover: its frame pointer */
};

/*
 * The state of a walk the tables' step reads and moves on: the frame's ip,
 * sp and rbp, whether ip is where the frame stands (a function's entry, an
 * interrupted instruction) rather than a return address, whose call is the
 * instruction before it, and the bounds of a binary search. It lives in a
 * map, so that the verifier knows nothing of its values and checks each
 * search step once, not once per outcome.
 */
struct unwind_regs {
	u64 ip, sp, fp;
	u32 exact;
	u32 lo, hi;
	/* 1 + the index of the mapping that holds ip, when known; 0 if not. */
	u32 hint;
	/* The entry of the step's rule. */
	struct unwind_entry entry;
};

/* A look through an unsorted list of mappings, a step of bpf_loop each. */
struct mapping_scan {
	struct unwind_proc *up;
	u64 pc;
	int found;
};

/*
 * Whether mapping i holds the pc: the step is checked once, where a loop
 * over MAX_UNWIND_MAPPINGS was checked mapping by mapping.
 */
static long scan_mapping(u64 i, void *data)
{
	struct mapping_scan *c = data;
	struct unwind_mapping *m = &c->up->m[i & (MAX_UNWIND_MAPPINGS - 1)];

	if (m->start <= c->pc && c->pc < m->end) {
		c->found = i;
		return 1;
	}
	return 0;
}

/*
 * The index of the process's executable file mapping that holds pc, -1
 * if none: a global function, checked once by the verifier, used for each
 * frame's lookup and to check each return address found.
 */
__noinline int find_mapping(struct unwind_proc *up, struct unwind_regs *r, u64 pc)
{
	u32 n, i, mid, lo, hi;

	if (!up || !r)
		return -1;
	n = up->n;
	if (n > MAX_UNWIND_MAPPINGS)
		n = MAX_UNWIND_MAPPINGS;
	if (up->unsorted) {
		struct mapping_scan c = { .up = up, .pc = pc, .found = -1 };

		bpf_loop(n, scan_mapping, &c, 0);
		return c.found;
	}
	/*
	 * The last that starts at or before pc. The bounds are read back
	 * from memory at each step: kept in registers, their ranges differ
	 * along each path, and the verifier checked the search's 256 paths
	 * one by one.
	 */
	r->lo = 0;
	r->hi = n;
	for (i = 0; i < 8; i++) {
		lo = *(volatile u32 *)&r->lo;
		hi = *(volatile u32 *)&r->hi;
		if (lo >= hi)
			break;
		mid = (lo + hi) / 2;
		if (up->m[mid & (MAX_UNWIND_MAPPINGS - 1)].start <= pc)
			r->lo = mid + 1;
		else
			r->hi = mid;
	}
	lo = *(volatile u32 *)&r->lo;
	if (lo == 0)
		return -1;
	i = (lo - 1) & (MAX_UNWIND_MAPPINGS - 1);
	if (pc >= up->m[i].end)
		return -1;
	return i;
}

/*
 * One frame of a walk by the tables, from the frame at r->ip to its
 * caller's. A global function: the verifier checks it once, whatever calls
 * it. Returns an enum unwind_step.
 */
__noinline int unwind_step(struct unwind_proc *up, struct unwind_regs *r)
{
	struct unwind_mapping *m = 0;
	struct unwind_entry *e;
	void *table;
	u64 cfa, ra, saved[2], pc;
	u32 rule, off, words, i, mid, key, tab;
	int idx;

	if (!up || !r)
		return STEP_STOP;
	/* The mapping that holds ip: the one the last check found, or a search. */
	idx = -1;
	key = r->hint;
	r->hint = 0;
	if (key > 0) {
		key = (key - 1) & (MAX_UNWIND_MAPPINGS - 1);
		if (up->m[key].start <= r->ip && r->ip < up->m[key].end)
			idx = key;
	}
	if (idx < 0)
		idx = find_mapping(up, r, r->ip);
	if (idx >= 0)
		m = &up->m[idx & (MAX_UNWIND_MAPPINGS - 1)];
	/*
	 * A file not in the list yet (a library dlopen'ed a moment ago,
	 * whose table user space is still loading), code outside any file
	 * (generated at run time), or a file without a table: its frame
	 * pointer may go on, to a return address in a file known.
	 */
	if (!m)
		return STEP_UNKNOWN;
	if (m->count == 0)
		return STEP_NO_TABLE;
	pc = r->ip - m->bias - (r->exact ? 0 : 1);
	if (pc >> 32)
		return STEP_NO_TABLE;
	/* The key from the stack: 6.1 refuses one in a global function's argument. */
	tab = m->table;
	table = bpf_map_lookup_elem(&unwind_tables, &tab);
	if (!table)
		return STEP_NO_TABLE;
	/* The rule: the last entry of the file's table at or before pc. */
	r->lo = 0;
	r->hi = m->count;
	for (i = 0; i < 21; i++) {
		if (r->lo >= r->hi)
			break;
		mid = r->lo + (r->hi - r->lo) / 2;
		e = bpf_map_lookup_elem(table, &mid);
		if (!e)
			return STEP_NO_TABLE;
		if (e->pc <= (u32)pc)
			r->lo = mid + 1;
		else
			r->hi = mid;
	}
	if (r->lo == 0)
		return STEP_NO_TABLE;
	key = r->lo - 1;
	e = bpf_map_lookup_elem(table, &key);
	if (!e)
		return STEP_NO_TABLE;
	r->entry = *e;
	rule = r->entry.rule;
	off = UNWIND_OFFSET(rule);
	switch (UNWIND_BASE(rule)) {
	case UNWIND_RSP:
		cfa = r->sp + off;
		break;
	case UNWIND_RBP:
		cfa = r->fp + off;
		break;
	case UNWIND_PLT:
		cfa = r->sp + 8 + ((r->ip & 15) >= off ? 8 : 0);
		break;
	case UNWIND_SIGNAL:
		/* The interrupted code's registers, in the ucontext at sp. */
		if (bpf_probe_read_user(saved, sizeof(saved), (void *)(r->sp + SIGNAL_RSP)) != 0 ||
		    bpf_probe_read_user(&ra, sizeof(ra), (void *)(r->sp + SIGNAL_RBP)) != 0) {
			return STEP_STOP;
		}
		r->fp = ra;
		r->sp = saved[0];
		r->ip = saved[1];
		r->exact = 1;
		return STEP_ON;
	default:
		if (UNWIND_WHY(rule) == UNWIND_END_OF_STACK)
			return STEP_DONE;
		/* Code no frame description covers (hand-written, generated): its frame pointer may go on. */
		if (UNWIND_WHY(rule) == UNWIND_NO_FDE) {
			/*
			 * The dynamic loader's start (_dl_start_user, which calls
			 * the libraries' constructors) zeroes rbp to mark the
			 * outermost frame: the stack ends there.
			 */
			if (m->loader && r->fp == 0)
				return STEP_DONE;
			return STEP_NO_FDE;
		}
		return STEP_STOP;
	}
	if (UNWIND_WHY(rule) == UNWIND_END_OF_STACK)
		return STEP_DONE;
	words = UNWIND_RBP_WORDS(rule);
	if (words == 2) {
		/* The usual frame: rbp pushed right below the return address. */
		if (bpf_probe_read_user(saved, sizeof(saved), (void *)(cfa - 16)) != 0) {
			return STEP_STOP;
		}
		r->fp = saved[0];
		ra = saved[1];
	} else {
		if (bpf_probe_read_user(&ra, sizeof(ra), (void *)(cfa - 8)) != 0) {
			return STEP_STOP;
		}
		if (words != 0 && bpf_probe_read_user(saved, sizeof(u64), (void *)(cfa - 8 * (u64)words)) != 0) {
			return STEP_STOP;
		}
		if (words != 0)
			r->fp = saved[0];
	}
	if (ra == 0)
		return STEP_DONE;
	r->ip = ra;
	r->sp = cfa;
	r->exact = 0;
	return STEP_ON;
}

/* A library's path, as the loader's notice holds it: NUL-terminated. */
struct lib_path {
	char name[256];
};

/*
 * The FNV-1a hash of a path, as tracer/unwind.go computes it. A global
 * function: the notice's walk is a bpf_loop step, which newer verifiers
 * check a few times over, and the loop over the path's bytes with it.
 */
__noinline u64 path_hash(const struct lib_path *p)
{
	u64 h = 0xcbf29ce484222325ULL;
	u32 i;

	if (!p)
		return h;
	for (i = 0; i < sizeof(p->name); i++) {
		if (p->name[i] == 0)
			break;
		h ^= (u8)p->name[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

/*
 * Gives process tgid's list the mapping of a library the loader lists,
 * loaded at bias, as entry at, when user space loaded its file's table
 * ahead; returns whether it did.
 */
static __always_inline bool unwind_library(struct unwind_proc *up, u32 at, u32 tgid, const char *name, u64 bias)
{
	struct unwind_file *f;
	struct unwind_mapping *m;
	u64 h;

	if (!up || at >= MAX_UNWIND_MAPPINGS)
		return false;
	if (name[0] == 0) {
		f = bpf_map_lookup_elem(&unwind_exes, &tgid);
	} else {
		h = path_hash((const struct lib_path *)name);
		f = bpf_map_lookup_elem(&unwind_files, &h);
	}
	if (!f)
		return false;
	m = &up->m[at & (MAX_UNWIND_MAPPINGS - 1)];
	m->start = bias + f->text_start;
	m->end = bias + f->text_end;
	m->bias = bias;
	m->table = f->table;
	m->count = f->count;
	m->loader = f->loader;
	return true;
}

#endif /* MDTRACE_UNWIND_H */
