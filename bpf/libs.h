/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The loader's list of libraries, reported to user space each time it
 * changes.
 */
#ifndef MDTRACE_LIBS_H
#define MDTRACE_LIBS_H

#include "common.h"
#include "unwind.h"

/* The largest library path reported. */
#define LIB_NAME_LEN 256
/* The most libraries walked in one list. */
#define MAX_LIBS 512

/* A library in the loader's list: where it is loaded and its path. */
struct lib_event {
	u32 tgid;
	u32 pad;
	u64 base; /* l_addr: the load bias */
	char name[LIB_NAME_LEN];
};

_Static_assert(LIB_NAME_LEN == sizeof(struct lib_path), "path_hash reads a notice's whole name");

/* Names struct lib_event in BTF, so that Go gets the type. */
const struct lib_event unused_lib_event __attribute__((unused)) = {};

/* The libraries of a process, after it loaded or unloaded some (struct lib_event). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} notify SEC(".maps");

/* Where the loader's r_debug is in each traced process. */
struct process_map64 rdebug SEC(".maps");

/* The walk of the loader's list, one library per step of bpf_loop. */
struct lib_walk {
	u64 lm; /* the next struct link_map */
	u32 tgid;
	u32 n;			/* the mappings given to up so far */
	struct unwind_proc *up; /* the process's unwind mappings, or NULL */
};

static long report_library(u64 i, void *data)
{
	struct lib_walk *w = data;
	struct lib_event *e;
	u64 name = 0;

	if (!w->lm)
		return 1;
	/* struct link_map: l_addr (0), l_name (8), l_ld (16), l_next (24). */
	if (bpf_probe_read_user(&name, sizeof(name), (void *)(w->lm + 8)) != 0)
		return 1;
	e = bpf_ringbuf_reserve(&notify, sizeof(*e), 0);
	if (!e) {
		count(COUNTER_NOTIFY_LOST);
		return 1;
	}
	e->tgid = w->tgid;
	e->pad = 0;
	e->name[0] = 0;
	if (bpf_probe_read_user(&e->base, sizeof(e->base), (void *)w->lm) != 0)
		e->base = 0;
	if (name)
		bpf_probe_read_user_str(e->name, sizeof(e->name), (void *)name);
	/* The stack walk can go through the library now, not once user
	 * space has read the notice. */
	if (unwind_library(w->up, w->n, w->tgid, e->name, e->base))
		w->n++;
	bpf_ringbuf_submit(e, 0);
	if (bpf_probe_read_user(&w->lm, sizeof(w->lm), (void *)(w->lm + 24)) != 0)
		return 1;
	return 0;
}

#endif /* MDTRACE_LIBS_H */
