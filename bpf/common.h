/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * What every part of mdtrace's BPF program shares: the knobs user space
 * sets, the key and entry of a block, the processes traced and each
 * thread's call in flight. What the probes share with the shim and with
 * mdtrace (the allocator calls, the counters, the record types, the
 * batches' layout) is in abi/mdtrace_abi.h.
 */
#ifndef MDTRACE_COMMON_H
#define MDTRACE_COMMON_H

#include "headers/mdtrace_types.h"
#include "headers/bpf_helpers.h"
#include "headers/bpf_tracing.h"
#include "../abi/mdtrace_abi.h"

/*
 * The most processes traced at once (the traced, gens, zygotes and rdebug
 * maps, whose entries take memory as they come; their buckets take 16
 * bytes per process room): four times the processes mdtrace follows at
 * once (tracer/process.go, maxFollowedProcess).
 */
#define MAX_PROCESSES 16384

/* Knobs, set by user space before loading. */
const volatile u32 stack_depth = 16;		 /* frames per backtrace; 0: no backtraces */
const volatile u64 bt_min_size = 0;		 /* backtrace only sizes in [bt_min_size, bt_max_size] */
const volatile u64 bt_max_size = ~0ULL;
const volatile u64 page_size = 4096;

const volatile u32 record = 0;			 /* record_allocs: send every call to user space */
const volatile u64 record_wakeup_bytes = 0;	 /* wake the records' reader once this much waits */
const volatile u32 alloc_backtraces = 1;	 /* allocations get backtraces (the backtrace option) */
const volatile u32 verify = 0;			 /* verify_pointers: report bad pointers */
const volatile u32 unknown_is_error = 0;	 /* every block is known (launch mode): unknown pointers are errors */
/*
 * abort_on_error: the thread that passed a bad pointer gets SIGABRT once its
 * error is in the errors ring buffer (see pointer_error). Only
 * verify_pointers finds errors here, so without verify this does nothing;
 * leaks never abort.
 */
const volatile u32 abort_on_error = 0;
/*
 * The kernel may preempt a running BPF program (preempt=full, lazy, RT):
 * the stack walk keeps preemption off while it uses per-CPU scratch space.
 */
const volatile u32 preemptible = 1;

/*
 * Program mode (--program NAME): the probes have no PID filter, and only
 * the processes in the traced map count. A process enters it when it
 * executes a program whose file name contains program_name, as Android
 * enables malloc debug where strstr(getprogname(), program) matches, and
 * when a traced process forks; it leaves it when it executes another.
 */
const volatile u32 only_traced = 0;
const volatile u32 program_len = 0;
/*
 * --all: every process's exec starts a new gen (see exec_gen), and a new
 * process starts with none (program_fork), as traced processes do.
 */
const volatile u32 gens_all = 0;
/*
 * --all --inject: each process's calls are counted in proc_calls, and a
 * process whose count reaches busy_calls is told once on busy (0: never).
 * mdtrace sets busy_calls again once it has measured what a probe hit
 * costs here (tracer.MeasureTrapCost). A process whose count reaches
 * soon_calls first, or that runs a program marked eager (its count starts
 * near busy_calls), is told on busy with BUSY_SOON in the tgid's place:
 * mdtrace then probes the shim's sites for it ahead, which takes a grace
 * period of the kernel's.
 */
const volatile u32 count_calls = 0;
volatile u32 busy_calls = 0;
volatile u32 soon_calls = 0;
#define BUSY_SOON (1U << 31)
const volatile char program_name[PROGRAM_NAME_MAX] = {};

/*
 * --all --inject: the threads of processes mdtrace is loading its shim
 * into, while they make mdtrace's calls (dlopen, the shim's start): the
 * allocator calls they make are the injection's, not the program's, and
 * are passed over. User space sets quiet_on while the map has any.
 * Value: 1.
 */
volatile u32 quiet_on = 0;
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, u32);
	__type(value, u32);
} quiet_threads SEC(".maps");

/* Toggled at run time by user space (signal 45): backtraces are taken while non-zero. */
volatile u32 backtrace_on = 1;
/* Cleared by user space when record_allocs has all the entries it may keep. */
volatile u32 record_on = 1;
/* Set by user space once a process is in the zygotes map. */
volatile u32 have_zygotes = 0;
/*
 * Set once an allocation could not be tracked (the live table was full):
 * from then on an unknown pointer may be a block the table missed, which
 * user space does not report and abort_on_error does not abort for.
 */
volatile u32 table_full = 0;

/*
 * Set by user space once it probes an allocator's C++ operator delete, which
 * may call free: a free inside a call in flight is then not counted again.
 */
volatile u32 have_deletes = 0;

/*
 * A live allocation: which process, which program it runs, which pointer.
 * gen is the kernel's count of the execs of the process's thread
 * (task_struct.self_exec_id), which an exec increments: the blocks of the
 * program a process ran before its exec keep their old gen, and the probes
 * no longer see them, until user space drops them.
 */
struct alloc_key {
	u32 tgid;
	u32 gen;
	u64 ptr;
};

/*
 * What mdtrace knows of a live allocation: the size the program asked for,
 * with ALLOC_ZYGOTE in its top bit (no allocation is that large), and its
 * backtrace.
 */
struct alloc_info {
	u64 size;
	u64 stack_id; /* key into the stacks map; 0: no backtrace */
};

/*
 * A set of processes, or a u32 for each: the key is the process's tgid,
 * the value what the map says. Entries are allocated as processes come.
 */
struct process_map {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MAX_PROCESSES);
	__type(key, u32);
	__type(value, u32);
};

/* The same, with a u64 for each process. */
struct process_map64 {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MAX_PROCESSES);
	__type(key, u32);
	__type(value, u64);
};

/*
 * Zygote children: processes forked, without an exec, from a traced one.
 * What they allocate after the fork carries ALLOC_ZYGOTE. Value: 1.
 */
struct process_map zygotes SEC(".maps");

/*
 * The processes being traced, for the thread exit and exec tracepoints,
 * and in program mode for every probe. Value: 1.
 */
struct process_map traced SEC(".maps");

/*
 * The gen (see struct alloc_key) of each traced process that executed a
 * program since it was traced: its blocks of another gen are from the
 * program before. A process without an entry has one gen in the table.
 * Value: the gen.
 */
struct process_map gens SEC(".maps");

/*
 * A program file: its inode and its device, in the kernel's encoding.
 */
struct program_file {
	u64 ino;
	u32 dev;
	u32 pad;
};

/*
 * With count_calls, each process's calls of the allocator seen at its
 * entry probes since its exec (or since the audit began), from head (0, or
 * eager_head short of busy_calls), 64 bits for the atomic add that returns
 * it, and its program file as the kernel has it (all 0 if unread):
 * mdtrace reads the counts to pick the processes whose calls its shim
 * should take (--all --inject), and marks the program file of each it
 * took eager.
 */
struct proc_count {
	u64 calls;
	u64 head;
	struct program_file file;
};
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MAX_PROCESSES);
	__type(key, u32);
	__type(value, struct proc_count);
} proc_calls SEC(".maps");

/*
 * The program files of processes mdtrace gave its shim to (--all
 * --inject): a new run of one starts its count eager_head calls short of
 * busy_calls, so that it is told after eager_head calls, the program
 * having shown it calls the allocator much. Value: 1.
 */
const volatile u32 eager_head = 0;

struct super_block___md {
	u32 s_dev;
} __attribute__((preserve_access_index));
struct inode___md {
	unsigned long i_ino;
	struct super_block___md *i_sb;
} __attribute__((preserve_access_index));
struct file___md {
	struct inode___md *f_inode;
} __attribute__((preserve_access_index));
struct mm_struct___md {
	struct file___md *exe_file;
} __attribute__((preserve_access_index));

/*
 * program_file_of sets *f to the program file's identity as the kernel has
 * it: user space's stat can give another device (a file of an overlayfs's
 * lower layer, the upper on another file system). It reports whether it
 * could read it.
 */
static __always_inline bool program_file_of(struct file___md *file, struct program_file *f)
{
	struct inode___md *inode;
	struct super_block___md *sb;

	return file &&
	       bpf_probe_read_kernel(&inode, sizeof(inode), &file->f_inode) == 0 && inode &&
	       bpf_probe_read_kernel(&f->ino, sizeof(f->ino), &inode->i_ino) == 0 &&
	       bpf_probe_read_kernel(&sb, sizeof(sb), &inode->i_sb) == 0 && sb &&
	       bpf_probe_read_kernel(&f->dev, sizeof(f->dev), &sb->s_dev) == 0;
}
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct program_file);
	__type(value, u32);
} eager_programs SEC(".maps");

/*
 * The processes whose count of calls reached busy_calls, each once per
 * program (an exec starts its count anew): their tgids. One full loses
 * an event, which mdtrace's scan of proc_calls each second makes up for.
 */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} busy SEC(".maps");

/* Loss and event counters, per CPU, summed by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, u32);
	__type(value, u64);
} counters SEC(".maps");

/*
 * The allocator call a thread is in, saved by the entry probe for the return
 * probe. Task storage goes away with the thread, so nothing is left over
 * when a thread exits in the middle of a call.
 */
struct thread_state {
	u64 args[3];	     /* the call's arguments */
	u64 start_ns;	     /* time of the entry, for record_allocs */
	u64 entry_sp;	     /* stack pointer at the entry: tells nested calls and the outer return apart */
	struct alloc_info old; /* realloc: the old block's entry, restored if the realloc fails */
	/*
	 * The outermost C++ runtime operator new the thread is in, if any:
	 * its stack pointer at the entry (0: none), the return address there
	 * and the frame pointer. The next allocation call takes them: with
	 * from_new, it is inside that new.
	 */
	u64 new_sp, new_ret, new_fp;
	u32 from_new;
	u32 call;	     /* enum call; CALL_NONE when no call is in flight */
	u32 old_valid;
	u32 ending;	     /* a thread other than the main one has begun to end */
	/*
	 * realloc at the shim's unbatched site of a block whose allocation is
	 * still in another thread's batch: old_epoch is the epoch its free is
	 * kept aside with (0: none), old_gone that the allocation came as the
	 * free was kept, and went with it.
	 */
	u32 old_gone;
	u64 old_epoch;
	u64 present;	     /* record_allocs: the old block's PRESENT_BYTES plus one; 0: none */
	/*
	 * Sampling (sample.h): the bytes the thread may still allocate before
	 * its next sample (0 or less: none drawn yet), and that the call in
	 * flight was not sampled, so that its return probe only ends it.
	 */
	s64 sample_left;
	u32 unsampled;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct thread_state);
} threads SEC(".maps");

/*
 * Counts an event on this CPU. Where a probe can be preempted, another
 * thread of the CPU may count between the load and the store: the add is
 * atomic there.
 */
static __always_inline void count_by(u32 idx, u64 n)
{
	u64 *v = bpf_map_lookup_elem(&counters, &idx);

	if (!v)
		return;
	if (preemptible)
		__sync_fetch_and_add(v, n);
	else
		*v += n;
}

static __always_inline void count(u32 idx)
{
	count_by(idx, 1);
}

/* The fields read from the kernel's structures, relocated by CO-RE. */
struct task_struct___md {
	int tgid;
	u64 self_exec_id;
	struct mm_struct___md *mm;
	void *vfork_done;
	struct task_struct___md *real_parent;
} __attribute__((preserve_access_index));

/*
 * The process whose heap the current thread uses: its own, or, for a child
 * of vfork (or posix_spawn) until it executes or exits (while the kernel
 * keeps its vfork_done), its parent's. They share one address space, and
 * the probes, which the kernel filters by address space, fire in both: a
 * block the child allocates there is the parent's, which dash frees in the
 * parent once the child has executed. Keyed by the child, such a block was
 * an unknown pointer to the parent, an error with verify_pointers.
 */
static __always_inline u32 heap_tgid(void)
{
	struct task_struct___md *t = (void *)bpf_get_current_task_btf();

	if (t->vfork_done)
		return t->real_parent->tgid;
	return bpf_get_current_pid_tgid() >> 32;
}

/* In program mode, whether the current process is one of the traced. */
static __always_inline bool ignored(void)
{
	u32 tgid;

	if (!only_traced)
		return false;
	tgid = heap_tgid();
	return !bpf_map_lookup_elem(&traced, &tgid);
}

/* The gen of the current process's program (see struct alloc_key). */
static __always_inline u32 current_gen(void)
{
	struct task_struct___md *t = (void *)bpf_get_current_task_btf();

	return (u32)t->self_exec_id;
}

/* The key of the current process's block at ptr. */
static __always_inline struct alloc_key block_key(u64 ptr)
{
	struct alloc_key key = {
		.tgid = heap_tgid(),
		.gen = current_gen(),
		.ptr = ptr,
	};

	return key;
}

/* The current thread's state, made at its first call; null (counted) if it cannot be. */
static __always_inline struct thread_state *thread_state(void)
{
	struct thread_state *ts;

	ts = bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0,
				  BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!ts)
		count(COUNTER_STATE_ERROR);
	return ts;
}

/*
 * live_size is the size a block is tracked with: a request of 0 bytes
 * gives a block of 1, as Android's malloc debug tracks it (record_allocs
 * keeps the 0 asked for).
 */
static __always_inline u64 live_size(u64 size)
{
	return size ? size : 1;
}

#endif /* MDTRACE_COMMON_H */
