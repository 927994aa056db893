/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Program mode's exec events, and its match of a program's file name.
 */
#ifndef MDTRACE_EXEC_H
#define MDTRACE_EXEC_H

#include "common.h"

/* The longest executable path program mode looks at. */
#define EXEC_NAME_LEN 256
/* --all: the bytes of a program's path kept for each process, and the processes kept (exec_names). */
#define EXEC_PATH_LEN 128
#define EXEC_NAMES 16384

/* Program mode: processes that start to be traced (struct exec_event). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 16);
} execs SEC(".maps");

/* A process that program mode traces from its exec, or its fork, on. */
struct exec_event {
	u32 tgid;
	u32 parent;		  /* a fork: the traced process that forked it; 0 for an exec */
	char name[EXEC_NAME_LEN]; /* an exec: the path it executed */
};

/* Names struct exec_event in BTF, so that Go gets the type. */
const struct exec_event unused_exec_event __attribute__((unused)) = {};

/* The path being matched, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct exec_event);
} exec_scratch SEC(".maps");

struct linux_binprm___md {
	const char *filename;
} __attribute__((preserve_access_index));

/* A search of program_name in the file name: base and len bound it. */
struct name_match {
	u32 base;
	u32 len;
	u32 found;
};

/* One step of the scan for the file name: is the character at i a slash? */
static long find_base(u64 i, void *data)
{
	struct name_match *m = data;
	u32 zero = 0;
	struct exec_event *e = bpf_map_lookup_elem(&exec_scratch, &zero);

	if (!e || i >= m->len)
		return 1;
	if (e->name[i & (EXEC_NAME_LEN - 1)] == '/')
		m->base = i + 1;
	return 0;
}

/* One step of the search: does program_name start at base + i? */
static long match_at(u64 i, void *data)
{
	struct name_match *m = data;
	u32 zero = 0, start = m->base + (u32)i, j;
	struct exec_event *e = bpf_map_lookup_elem(&exec_scratch, &zero);

	if (!e || start + program_len > m->len)
		return 1;
	for (j = 0; j < PROGRAM_NAME_MAX && j < program_len; j++) {
		if (e->name[(start + j) & (EXEC_NAME_LEN - 1)] != program_name[j])
			return 0;
	}
	m->found = 1;
	return 1;
}

#endif /* MDTRACE_EXEC_H */
