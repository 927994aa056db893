/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The end of a process attached to without ptrace (-p): how it ended, which
 * only its parent could otherwise learn, and only by reaping it.
 */
#ifndef MDTRACE_WATCH_H
#define MDTRACE_WATCH_H

#include "common.h"

/* The kernel's flag of a process ended as a whole (exit_group, a fatal signal). */
#define SIGNAL_GROUP_EXIT 0x00000004

/*
 * A process watched: user space enters it with zeros and reads it once the
 * process is gone. Codes are in wait(2)'s encoding.
 */
struct watch_state {
	u32 leader_code; /* the main thread's exit code, once it has ended */
	u32 code;	 /* the process's exit status, once ended is set */
	u32 ended;	 /* its last thread has ended */
	u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PROCESSES);
	__type(key, u32);
	__type(value, struct watch_state);
} watched SEC(".maps");

struct signal_struct___md {
	struct {
		int counter;
	} live;
	unsigned int flags;
	int group_exit_code;
} __attribute__((preserve_access_index));

struct task_struct___exit {
	int exit_code;
	struct signal_struct___md *signal;
} __attribute__((preserve_access_index));

#endif /* MDTRACE_WATCH_H */
