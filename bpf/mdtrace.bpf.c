//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * mdtrace's allocation tracker: uprobes on the allocator's entry points and
 * uretprobes on their returns keep a table of the live allocations of the
 * traced processes, with the backtrace of each allocation.
 *
 * Every place that can lose data counts it in the counters map, which user
 * space reports: nothing is dropped silently.
 *
 * The programs are all in this file; what they share is in the headers,
 * one concern each, included in the order they build on each other. They
 * define maps and variables, and are for this one file.
 */
#include "common.h"	/* limits, knobs, counters, a block's key, processes, threads */
#include "table.h"	/* the live table */
#include "stack.h"	/* backtraces */
#include "sample.h"	/* sampling in the probes */
#include "record.h"	/* record_allocs */
#include "free.h"	/* the free path, verify_pointers' errors */
#include "alloc.h"	/* the allocation path, the calls in flight */
#include "batch.h"	/* the shim's batches */
#include "libs.h"	/* the loader's list of libraries */
#include "exec.h"	/* program mode's exec events */
#include "watch.h"	/* the end of a process attached to without ptrace */
#include "mappings.h"	/* the allocator's own mappings */

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/*
 * The one entry probe of every allocator function. Its attach cookie names
 * the function (enum call); the arguments are read by position.
 */
static __always_inline int entry(struct pt_regs *ctx, u64 cookie)
{
	u32 call = (u32)cookie & CALL_MASK;
	u64 a0 = PT_REGS_PARM1(ctx);

	if (ignored())
		return 0;
	if (quiet_on && bpf_map_lookup_elem(&quiet_threads, &(u32){ (u32)bpf_get_current_pid_tgid() }))
		return 0;
	/* Every call trapped, a free's too. */
	if (count_calls)
		count_call();
	switch (call) {
	case CALL_FREE:
		/*
		 * free needs no return probe: the block leaves the table
		 * before the allocator can reuse its address. free(NULL) is
		 * nothing.
		 */
		if (!a0)
			return 0;
		/*
		 * With record_allocs, free has a return probe for its end
		 * time; with verify_pointers, a free inside realloc(p, 0) must
		 * be told apart from the program's own.
		 */
		if (record || verify)
			break;
		if (have_deletes && nested(ctx))
			return 0;
		remove_alloc(ctx, a0, 0, FN_FREE, true);
		return 0;
	case CALL_DELETE:
		/*
		 * An operator delete has a return probe: a free it calls is
		 * inside it, and counts once.
		 */
		if (!a0)
			return 0;
		break;
	case CALL_RUNTIME_NEW:
		return runtime_new(ctx, cookie);
	case CALL_THREAD_END: {
		u64 id = bpf_get_current_pid_tgid();
		struct thread_state *ts;

		/* exit() calls it too, in the thread that calls exit. */
		if ((u32)id == id >> 32)
			return 0;
		ts = thread_state();
		if (ts)
			ts->ending = 1;
		return 0;
	}
	case CALL_USABLE_SIZE:
		count(COUNTER_USABLE_SIZE);
		if (verify && a0) {
			struct alloc_key key = block_key(a0);

			if (!table_find(&key))
				pointer_error(ctx, &key, FN_USABLE_SIZE);
		}
		return 0;
	}
	return enter(ctx, call, a0, PT_REGS_PARM2(ctx), PT_REGS_PARM3(ctx));
}

SEC("uprobe")
int alloc_entry(struct pt_regs *ctx)
{
	return entry(ctx, bpf_get_attach_cookie(ctx));
}

static __always_inline int leave(struct pt_regs *ctx, u64 ret)
{
	struct thread_state *ts;
	u64 size, ptr = ret, n, rsize, rarg = 0, end;
	u32 call, type;

	if (ignored())
		return 0;
	ts = thread_state();
	if (!ts || ts->call == CALL_NONE)
		return 0;
	/* A nested call returns with the stack below the outer call's entry. */
	if (PT_REGS_SP(ctx) <= ts->entry_sp)
		return 0;
	call = ts->call;
	ts->call = CALL_NONE;
	/*
	 * Not sampled: nothing to add. A realloc that failed still puts
	 * back its old block, which its entry took out of the table.
	 */
	if (ts->unsampled && !(ret == 0 && ts->old_valid)) {
		/* A sampled block a realloc moved: for --stats' records, its free. */
		if (record && ts->old_valid)
			emit_present(RECORD_FREE, ts->args[0], 0, 0, ts->start_ns, ts->present);
		return 0;
	}

	switch (call) {
	case CALL_FREE:
	case CALL_DELETE:
		emit_present(RECORD_FREE, ts->args[0], 0, 0, ts->start_ns, ts->present);
		return 0;
	case CALL_MALLOC:
		size = ts->args[0];
		type = RECORD_MALLOC;
		rsize = size;
		break;
	case CALL_NEW_ALIGNED:
		size = ts->args[0];
		type = RECORD_MEMALIGN;
		rsize = size;
		rarg = ts->args[1];
		break;
	case CALL_VALLOC:
		size = ts->args[0];
		type = RECORD_MEMALIGN;
		rsize = size;
		rarg = page_size;
		break;
	case CALL_CALLOC:
		size = ts->args[0] * ts->args[1];
		type = RECORD_CALLOC;
		rsize = ts->args[1];
		rarg = ts->args[0];
		break;
	case CALL_MEMALIGN:
		size = ts->args[1];
		type = RECORD_MEMALIGN;
		rsize = size;
		rarg = ts->args[0];
		break;
	case CALL_PVALLOC:
		size = (ts->args[0] + page_size - 1) & ~(page_size - 1);
		if (size == 0)
			size = page_size;
		type = RECORD_MEMALIGN;
		rsize = size;
		rarg = page_size;
		break;
	case CALL_POSIX_MEMALIGN:
		ptr = 0;
		if (ret == 0 && bpf_probe_read_user(&ptr, sizeof(ptr), (void *)ts->args[0]) != 0)
			ptr = 0;
		size = ts->args[2];
		type = RECORD_MEMALIGN;
		rsize = size;
		rarg = ts->args[1];
		break;
	case CALL_REALLOC:
	case CALL_REALLOCARRAY:
		size = ts->args[1];
		if (call == CALL_REALLOCARRAY) {
			n = ts->args[1];
			size = n * ts->args[2];
			/* The barrier keeps clang from turning the check into a 128-bit multiply. */
			barrier_var(size);
			if (n != 0 && size / n != ts->args[2]) {
				/* Overflow: reallocarray failed, the block is untouched. */
				ptr = 0;
				size = ~0ULL;
			}
		}
		if (ptr == 0) {
			/* An overflowing reallocarray never reaches realloc: no record. */
			if (size != ~0ULL)
				emit_present(RECORD_REALLOC, ptr, size, ts->args[0], ts->start_ns, ts->present);
			/* realloc(p, 0) freed p; a failed realloc keeps it. */
			if (size != 0 && ts->old_valid)
				keep_block(ts->args[0], &ts->old);
			return 0;
		}
		end = recording() ? bpf_ktime_get_ns() : 0;
		/*
		 * Sampled from a block that was not: for --stats' records it
		 * is a new block, as the free of the old one had no record.
		 */
		emit_stack(RECORD_REALLOC, ptr, size, sample_bytes && !ts->old_valid ? 0 : ts->args[0], ts->start_ns,
			   ts->present, add_alloc(ctx, ptr, size, ts->from_new ? AT_NEW : AT_RETURN, ts), end);
		return 0;
	default:
		return 0;
	}
	if (!ptr) {
		emit(type, ptr, rsize, rarg, ts->start_ns);
		return 0;
	}
	/* The record carries the new block's backtrace, and the call's end before the walk. */
	end = recording() ? bpf_ktime_get_ns() : 0;
	emit_stack(type, ptr, rsize, rarg, ts->start_ns, 0, add_alloc(ctx, ptr, size, ts->from_new ? AT_NEW : AT_RETURN, ts), end);
	return 0;
}

/* The one return probe of every allocating entry point. */
SEC("uretprobe")
int BPF_KRETPROBE(alloc_return, u64 ret)
{
	return leave(ctx, ret);
}

/*
 * Where the kernel has uprobe sessions (6.13), one link runs this program
 * at the entry of each allocator function and, unless the entry says not
 * to, at its return: the return probe of every call its entry left nothing
 * in flight for (a free; a call passed over) is not made, nor that of a
 * malloc or calloc of glibc's the sampling passed over (no other probed
 * function is called inside them). A return probe costs about a fifth of
 * an audited call (sqlite3 under --all: 115 ms without them, 139 ms with).
 * It is loaded only where the kernel's BTF has the attach type of uprobe
 * sessions; elsewhere the entry and return probes are made as before
 * (tracer/session.go).
 */
extern bool bpf_session_is_return(void) __ksym;

SEC("uprobe.session")
int alloc_session(struct pt_regs *ctx)
{
	u64 cookie = bpf_get_attach_cookie(ctx);
	u32 call = (u32)cookie & CALL_MASK;
	struct thread_state *ts;

	if (bpf_session_is_return())
		return leave(ctx, PT_REGS_RC(ctx));
	entry(ctx, cookie);
	if (!(cookie & CALL_RETURN))
		return 1;
	ts = thread_state_if_any();
	if (!ts || ts->call == CALL_NONE)
		return 1;
	if ((cookie & CALL_NO_NESTING) && ts->unsampled && ts->call == call && ts->entry_sp == PT_REGS_SP(ctx)) {
		ts->call = CALL_NONE;
		return 1;
	}
	return 0;
}

/*
 * The one program of the shim's probe sites (shim/site.c). The shim calls
 * them with everything in registers: one probe per call, no return probe,
 * no per-thread state except across a realloc. Sizes are the ones the
 * program asked for, whatever guards the shim adds.
 */
SEC("uprobe")
int alloc_site(struct pt_regs *ctx)
{
	u64 ptr = PT_REGS_PARM1(ctx), size, rsize, rarg = 0, end;
	u32 call = PT_REGS_PARM2(ctx), type;
	u64 a0 = PT_REGS_PARM3(ctx), a1 = PT_REGS_PARM4(ctx), start = PT_REGS_PARM5(ctx);
	u64 present = ctx->r9; /* the sixth argument: this bpf_tracing.h has no PT_REGS_PARM6 */
	struct thread_state *ts;

	if (ignored())
		return 0;
	if (bpf_get_attach_cookie(ctx) == SITE_BATCH) {
		batch_site(ctx);
		return 0;
	}
	if (bpf_get_attach_cookie(ctx) == SITE_FREE) {
		if (call == CALL_REALLOC) {
			/* The old block comes back if the realloc fails. */
			ts = thread_state();
			if (ts && a0)
				site_realloc_batched(ptr, a0, ts);
			else if (ts)
				remove_alloc(ctx, ptr, ts, FN_REALLOC, false);
			return 0;
		}
		if (a0)
			site_free_batched(ptr, a0);
		else
			remove_alloc(ctx, ptr, 0, FN_FREE, false);
		return 0;
	}
	switch (call) {
	case CALL_FREE:
		/* Only while recording: the end of a free. */
		emit_present(RECORD_FREE, a0, 0, 0, start, present);
		return 0;
	case CALL_MALLOC:
		size = a0;
		type = RECORD_MALLOC;
		rsize = size;
		break;
	case CALL_CALLOC:
		size = a0 * a1;
		type = RECORD_CALLOC;
		rsize = a1;
		rarg = a0;
		break;
	case CALL_MEMALIGN:
		size = a1;
		type = RECORD_MEMALIGN;
		rsize = size;
		rarg = a0;
		break;
	case CALL_REALLOC:
		size = a1;
		if (!ptr)
			emit_present(RECORD_REALLOC, ptr, size, a0, start, a0 ? present : 0);
		if (a0 != 0) {
			ts = thread_state();
			if (ts) {
				/* realloc(p, 0) freed p; a failed realloc keeps it. */
				if (ptr == 0 && size != 0 && ts->old_valid)
					keep_block(a0, &ts->old);
				else if (ptr == 0 && size != 0 && (ts->old_epoch || ts->old_gone))
					realloc_failed_batched(a0, ts);
				ts->old_valid = 0;
				ts->old_epoch = 0;
				ts->old_gone = 0;
			}
		}
		if (ptr && site_sampled(size)) {
			end = recording() ? bpf_ktime_get_ns() : 0;
			emit_stack(RECORD_REALLOC, ptr, size, a0, start, a0 ? present : 0, add_alloc(ctx, ptr, size, AT_SITE, 0), end);
		}
		return 0;
	default:
		return 0;
	}
	if (!ptr) {
		emit(type, ptr, rsize, rarg, start);
		return 0;
	}
	if (!site_sampled(size))
		return 0;
	/* The record carries the new block's backtrace, and the call's end before the walk. */
	end = recording() ? bpf_ktime_get_ns() : 0;
	emit_stack(type, ptr, rsize, rarg, start, 0, add_alloc(ctx, ptr, size, AT_SITE, 0), end);
	return 0;
}

/*
 * The drain at the entry of do_exit, where the thread's memory is still
 * there on every kernel. The sched_process_exit tracepoint comes after the
 * kernel lets go of it on older kernels (6.1); it is the drain where
 * kprobes cannot be used.
 */
SEC("kprobe/do_exit")
int batch_drain_kprobe(void *ctx)
{
	drain_thread();
	return 0;
}

SEC("raw_tp/sched_process_exit")
int batch_drain(void *ctx)
{
	drain_thread();
	return 0;
}

/*
 * A thread of a traced process ends: record_allocs writes "TID: thread_done".
 * The process's main thread ends with the process and gets no line, as in
 * Android, where the line comes from a thread-local destructor.
 */
SEC("raw_tp/sched_process_exit")
int thread_exit(void *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32;

	if (!record || (u32)id == tgid || !bpf_map_lookup_elem(&traced, &tgid))
		return 0;
	emit(RECORD_THREAD_DONE, 0, 0, 0, 0);
	return 0;
}

/*
 * A thread of a watched process ends. The kernel has set its exit code and
 * counted it out of the live threads: the last one to end tells how the
 * process ended, as its parent's wait will. That is the group's exit code
 * when the process ended as a whole (exit_group, a fatal signal), the main
 * thread's own otherwise (every thread called exit).
 */
SEC("raw_tp/sched_process_exit")
int watch_exit(void *ctx)
{
	struct task_struct___exit *t = (void *)bpf_get_current_task_btf();
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32;
	struct watch_state *w = bpf_map_lookup_elem(&watched, &tgid);
	u32 code, group;

	if (!w)
		return 0;
	if ((u32)id == tgid)
		w->leader_code = t->exit_code;
	if (t->signal->live.counter != 0)
		return 0;
	/* Both read apart: one load may not take the task's pointer and the map's. */
	code = w->leader_code;
	group = t->signal->group_exit_code;
	barrier_var(group);
	if (t->signal->flags & SIGNAL_GROUP_EXIT)
		code = group;
	w->code = code;
	w->ended = 1;
	return 0;
}

/*
 * The dynamic loader calls _dl_debug_state around every change of its list
 * of libraries (the debuggers' hook). Once the list is consistent again,
 * this walks it and reports every library with its load address, so that
 * user space can name the frames of a library unloaded (dlclose) before
 * the report, however quickly that happens.
 */
SEC("uprobe")
int libraries_changed(struct pt_regs *ctx)
{
	struct lib_walk w = { .tgid = bpf_get_current_pid_tgid() >> 32 };
	u64 *rd = bpf_map_lookup_elem(&rdebug, &w.tgid);
	int state = -1;

	if (!rd)
		return 0;
	/* struct r_debug: int r_version; link_map *r_map (8); r_brk (16); r_state (24). */
	if (bpf_probe_read_user(&state, sizeof(state), (void *)(*rd + 24)) != 0 || state != 0)
		return 0;
	if (bpf_probe_read_user(&w.lm, sizeof(w.lm), (void *)(*rd + 8)) != 0)
		return 0;
	w.up = bpf_map_lookup_elem(&unwind_procs, &w.tgid);
	/*
	 * Counted before the list is touched: user space, which writes the
	 * whole list from the process's maps, reads the count after its
	 * write and makes the list again if it moved. Counted after, a
	 * notice whose program was preempted between its write and its
	 * count let user space's list, read before the library was mapped,
	 * stand as up to date: the walks through the library then stopped
	 * instead of being left to mdtrace.
	 */
	if (w.up)
		count_notice(w.tgid);
	/* A callback the verifier checks once, where a loop would be checked MAX_LIBS times. */
	bpf_loop(MAX_LIBS, report_library, &w, 0);
	if (w.up && w.n > 0) {
		w.up->n = w.n;
		w.up->unsorted = 1;
	}
	return 0;
}

/*
 * A process executed a program: in program mode it is traced from its
 * first instruction when the file name (after the last slash) contains
 * program_name, and user space hears of it; otherwise it is not traced.
 */
SEC("raw_tp/sched_process_exec")
int program_exec(u64 *ctx)
{
	struct linux_binprm___md *bprm = (void *)ctx[2];
	u32 tgid = bpf_get_current_pid_tgid() >> 32, zero = 0, one = 1;
	struct name_match m = {};
	struct exec_event *s, *e;
	const char *filename;
	long n;

	if (!program_len)
		return 0;
	s = bpf_map_lookup_elem(&exec_scratch, &zero);
	if (!s)
		return 0;
	if (bpf_probe_read_kernel(&filename, sizeof(filename), &bprm->filename) != 0)
		return 0;
	n = bpf_probe_read_kernel_str(s->name, sizeof(s->name), filename);
	if (n <= 1)
		return 0;
	m.len = n - 1;
	bpf_loop(EXEC_NAME_LEN, find_base, &m, 0);
	bpf_loop(EXEC_NAME_LEN, match_at, &m, 0);
	/* A new program is no zygote child. */
	bpf_map_delete_elem(&zygotes, &tgid);
	if (!m.found) {
		bpf_map_delete_elem(&traced, &tgid);
		return 0;
	}
	if (bpf_map_update_elem(&traced, &tgid, &one, BPF_ANY) != 0) {
		count(COUNTER_PROGRAM_LOST);
		return 0;
	}
	e = bpf_ringbuf_reserve(&execs, sizeof(*e), 0);
	if (!e) {
		/* Traced, but user space will not hear of it. */
		count(COUNTER_PROGRAM_LOST);
		return 0;
	}
	e->tgid = tgid;
	e->parent = 0;
	__builtin_memcpy(e->name, s->name, sizeof(e->name));
	bpf_ringbuf_submit(e, 0);
	return 0;
}

struct linux_binprm___file {
	struct file___md *file;
} __attribute__((preserve_access_index));

/* count_from_exec starts process tgid's count of calls for its new program. */
static __always_inline void count_from_exec(u32 tgid, struct linux_binprm___file *bprm)
{
	struct proc_count c = {};
	struct file___md *file;
	u32 soon;

	if (bpf_probe_read_kernel(&file, sizeof(file), &bprm->file) != 0 || !program_file_of(file, &c.file)) {
		bpf_map_delete_elem(&proc_calls, &tgid);
		return;
	}
	if (eager_head && eager_head < busy_calls && bpf_map_lookup_elem(&eager_programs, &c.file)) {
		c.calls = c.head = busy_calls - eager_head;
		/* Its eager_head calls come too soon for the sites' probes. */
		soon = tgid | BUSY_SOON;
		bpf_ringbuf_output(&busy, &soon, sizeof(soon), BPF_RB_FORCE_WAKEUP);
	}
	bpf_map_update_elem(&proc_calls, &tgid, &c, BPF_ANY);
}

/*
 * --all: each process's program, as it executed it (and a fork child's,
 * its parent's, or only its command name when the parent executed its
 * program before the audit), which names a process that ended before
 * mdtrace's scan looked at it. The oldest entries go first.
 */
struct exec_name {
	u64 cgroup; /* its cgroup's id (cgroup v2) */
	char comm[16];
	char path[EXEC_PATH_LEN];
};
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, EXEC_NAMES);
	__type(key, u32);
	__type(value, struct exec_name);
} exec_names SEC(".maps");

/* Names struct exec_name in BTF, so that Go gets the type. */
const struct exec_name unused_exec_name __attribute__((unused)) = {};

static __always_inline void name_exec(u32 tgid, struct linux_binprm___md *bprm)
{
	struct exec_name n = {};
	const char *filename;

	n.cgroup = bpf_get_current_cgroup_id();
	bpf_get_current_comm(n.comm, sizeof(n.comm));
	if (bpf_probe_read_kernel(&filename, sizeof(filename), &bprm->filename) == 0)
		bpf_probe_read_kernel_str(n.path, sizeof(n.path), filename);
	bpf_map_update_elem(&exec_names, &tgid, &n, BPF_ANY);
}

/*
 * A traced process executed a program: the gen of its blocks from now on.
 * (Program mode also decides here whether the process is traced; a process
 * it starts to trace has no blocks yet.)
 */
SEC("raw_tp/sched_process_exec")
int exec_gen(u64 *ctx)
{
	u32 tgid = bpf_get_current_pid_tgid() >> 32, tid = bpf_get_current_pid_tgid(), old = ctx[1], gen;
	struct batch_space *sp;

	if (!gens_all && !bpf_map_lookup_elem(&traced, &tgid))
		return 0;
	/*
	 * The old program's batch went with its memory (its calls with its
	 * blocks); the thread may have had another id before the exec.
	 */
	sp = bpf_task_storage_get(&batch_spaces, bpf_get_current_task_btf(), 0, 0);
	if (sp && sp->addr) {
		sp->addr = 0;
		bpf_map_delete_elem(&batch_threads, &tid);
		bpf_map_delete_elem(&batch_threads, &old);
	}
	gen = current_gen();
	if (bpf_map_update_elem(&gens, &tgid, &gen, BPF_ANY) != 0)
		count(COUNTER_GEN_LOST);
	/*
	 * A new program's calls are counted from none (--all --inject), or
	 * from eager_head short of busy_calls for a program whose runs were
	 * taken before.
	 */
	if (count_calls)
		count_from_exec(tgid, (void *)ctx[2]);
	if (gens_all) {
		name_exec(tgid, (void *)ctx[2]);
		/* A new program: its first walks are left to mdtrace again. */
		bpf_map_delete_elem(&defer_new, &tgid);
	}
	/* The allocator's mappings went with the old program's memory. */
	if (gens_all ? bpf_map_lookup_elem(&traced, &tgid) != 0 : true)
		mapping_event(tgid, MAPPING_RESET, 0, 0);
	return 0;
}

/*
 * Program mode: a child forked by a traced process is traced too, as a
 * zygote child. (A vfork child shares its parent's memory until it
 * executes a program, which ends it as a zygote child.) With --all, a new
 * process only loses the gen a process gone had under its PID.
 */
SEC("raw_tp/sched_process_fork")
int program_fork(u64 *ctx)
{
	struct task_struct___md *child = (void *)ctx[1];
	u32 tgid = bpf_get_current_pid_tgid() >> 32, one = 1;
	struct exec_event *e;
	int child_tgid = 0;

	if (gens_all) {
		/* A new process, whose PID may be an old one's: no gen yet. */
		if (bpf_probe_read_kernel(&child_tgid, sizeof(child_tgid), &child->tgid) == 0 && (u32)child_tgid != tgid) {
			struct exec_name *n = bpf_map_lookup_elem(&exec_names, &tgid), c = {};

			bpf_map_delete_elem(&gens, &child_tgid);
			/* Its first walks are left to mdtrace, whatever an old one's were. */
			bpf_map_delete_elem(&defer_new, &child_tgid);
			if (!n) {
				/* A parent that executed its program before: its command name alone. */
				c.cgroup = bpf_get_current_cgroup_id();
				bpf_get_current_comm(c.comm, sizeof(c.comm));
				n = &c;
			}
			bpf_map_update_elem(&exec_names, &child_tgid, n, BPF_ANY);
		}
		return 0;
	}
	if (!program_len || !bpf_map_lookup_elem(&traced, &tgid))
		return 0;
	if (bpf_probe_read_kernel(&child_tgid, sizeof(child_tgid), &child->tgid) != 0 || (u32)child_tgid == tgid)
		return 0;
	if (bpf_map_update_elem(&traced, &child_tgid, &one, BPF_ANY) != 0) {
		count(COUNTER_PROGRAM_LOST);
		return 0;
	}
	/* A zygote child from its first allocation (have_zygotes is set). */
	if (bpf_map_update_elem(&zygotes, &child_tgid, &one, BPF_ANY) != 0)
		count(COUNTER_PROGRAM_LOST);
	/* User space follows it, unless it follows it already through its parent. */
	e = bpf_ringbuf_reserve(&execs, sizeof(*e), 0);
	if (!e) {
		count(COUNTER_PROGRAM_LOST);
		return 0;
	}
	e->tgid = child_tgid;
	e->parent = tgid;
	e->name[0] = 0;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/*
 * The end of every system call: for mmap, mremap and munmap of a traced
 * process, what the allocator mapped for itself and what anyone unmapped
 * or mapped over (bpf/mappings.h). The user's registers still hold the
 * arguments. A raw tracepoint, as kprobes and BPF trampolines may not be
 * there; user space attaches it only for processes whose allocator is not
 * glibc's, whose own memory the check knows by its shape.
 */
SEC("raw_tp/sys_exit")
int mappings_exit(u64 *ctx)
{
	const struct pt_regs *regs = (const void *)ctx[0];
	u64 ret = ctx[1], nr, len, flags;
	u32 tgid = traced_tgid();

	if (!tgid || ret >= (u64)-4095)
		return 0;
	nr = syscall_arg(&regs->orig_ax);
	switch (nr) {
	case NR_MMAP:
		len = syscall_arg(&regs->si);
		flags = syscall_arg(&regs->r10);
		if ((flags & MAP_ANONYMOUS) && in_allocator(thread_state_if_any(), regs))
			mapping_event(tgid, MAPPING_ALLOCATOR, ret, len);
		else if (flags & MAP_FIXED)
			/* A fixed mapping replaced whatever was there. */
			mapping_event(tgid, MAPPING_GONE, ret, len);
		break;
	case NR_MREMAP:
		mapping_event(tgid, MAPPING_GONE, syscall_arg(&regs->di), syscall_arg(&regs->si));
		mapping_event(tgid, in_allocator(thread_state_if_any(), regs) ? MAPPING_ALLOCATOR : MAPPING_GONE, ret,
			      syscall_arg(&regs->dx));
		break;
	case NR_MUNMAP:
		mapping_event(tgid, MAPPING_GONE, syscall_arg(&regs->di), syscall_arg(&regs->si));
		break;
	}
	return 0;
}
