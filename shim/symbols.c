// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Function names for backtrace frames from the full symbol table of the
 * object that holds a pc (.symtab, then .dynsym), the way addr2line and
 * Android's unwinder name them, and the way mdtrace itself does (package
 * stacks). dladdr sees only .dynsym, so it cannot name the functions of a
 * program linked without -rdynamic, nor static functions anywhere.
 *
 * dladdr1 finds the object holding a pc, its name and load bias, and
 * symfile.c finds the object's file and indexes its functions.
 *
 * Nothing here calls malloc or stdio: this runs inside the allocator. Up
 * to CACHE_SLOTS objects stay indexed, least recently used evicted first,
 * each under its load address and a hash of its name, PT_LOAD headers and
 * build-id, so an object unloaded and replaced by another at the same
 * address is not taken for it. The cache lock is held
 * only around the cache and the file reads, never around anything that may
 * call malloc or take the loader's lock; dladdr1 takes only the loader's
 * dl_load_lock, which glibc resets in a forked child (dl_iterate_phdr's
 * lock it does not).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "symbols.h"
#include "symfile.h"

#define CACHE_SLOTS 32

/* entry is one cached object; ix.nsyms 0 caches that it has no names. */
struct entry {
	bool ready;
	uintptr_t bias;     /* the object's load bias (l_addr) */
	uintptr_t base;     /* where its first page is mapped (dli_fbase) */
	uint64_t key;       /* hash of its name, PT_LOAD headers and build-id */
	unsigned long used; /* for least-recently-used eviction */
	struct md_symindex ix;
};

static struct entry cache[CACHE_SLOTS];
static unsigned long cache_clock;

/*
 * The cache lock holds the thread id of its holder, 0 when free. A holder
 * that is not a thread of this process is gone for good (the lock was held
 * when the process forked, or its thread was cancelled in a file read), and
 * its lock is taken over; entries it was building were never marked ready,
 * and are dropped. A waiter yields, then sleeps a millisecond at a time.
 */
static pid_t cache_owner;

static void cache_lock(void)
{
	pid_t me = (pid_t)syscall(SYS_gettid);
	pid_t pid = getpid();

	for (unsigned tries = 0;; tries++) {
		pid_t owner = 0;

		if (__atomic_compare_exchange_n(&cache_owner, &owner, me, false, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			return;
		if (syscall(SYS_tgkill, pid, owner, 0) != 0 && errno == ESRCH &&
		    __atomic_compare_exchange_n(&cache_owner, &owner, me, false, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED)) {
			for (size_t i = 0; i < CACHE_SLOTS; i++)
				if (!cache[i].ready)
					memset(&cache[i], 0, sizeof(cache[i]));
			return;
		}
		if (tries < 64) {
			sched_yield();
		} else {
			struct timespec ts = { 0, 1000000 };

			nanosleep(&ts, NULL);
		}
	}
}

static void cache_unlock(void)
{
	__atomic_store_n(&cache_owner, 0, __ATOMIC_RELEASE);
}

static void drop_entry(struct entry *e)
{
	md_symindex_free(&e->ix);
	memset(e, 0, sizeof(*e));
}

/* cache_get returns the ready entry of o, indexing its file first if need be. Lock held. */
static struct entry *cache_get(const struct md_object *o, const char *dl_name)
{
	struct entry *e = NULL;

	cache_clock++;
	for (size_t i = 0; i < CACHE_SLOTS; i++)
		if (cache[i].ready && cache[i].bias == o->bias && cache[i].base == o->base &&
		    cache[i].key == o->key) {
			cache[i].used = cache_clock;
			return &cache[i];
		}
	/* A free slot, else the least recently used. */
	for (size_t i = 0; i < CACHE_SLOTS; i++) {
		if (!cache[i].ready) {
			e = &cache[i];
			break;
		}
		if (e == NULL || cache[i].used < e->used)
			e = &cache[i];
	}
	if (e->ready)
		drop_entry(e);
	md_symindex_load(&e->ix, o, dl_name);
	/* Found or not, the answer stands for as long as the same object is there. */
	e->bias = o->bias;
	e->base = o->base;
	e->key = o->key;
	e->used = cache_clock;
	e->ready = true;
	return e;
}

bool md_symbolize(uintptr_t pc, struct md_sym *out)
{
	int saved_errno = errno;
	struct link_map *lm = NULL;
	struct md_object o;
	Dl_info info;
	uintptr_t start;
	char name[MD_SYM_NAME_MAX];
	const struct entry *e;
	bool found;

	out->path = NULL;
	out->rel_pc = pc;
	out->named = false;
	out->name[0] = '\0';
	out->offset = 0;
	if (dladdr1((void *)pc, &info, (void **)&lm, RTLD_DL_LINKMAP) == 0 ||
	    info.dli_fname == NULL)
		return false;
	out->path = info.dli_fname;
	out->rel_pc = pc - (uintptr_t)info.dli_fbase;
	if (info.dli_sname != NULL && info.dli_saddr != NULL) {
		size_t n = strnlen(info.dli_sname, sizeof(out->name) - 1);

		memcpy(out->name, info.dli_sname, n);
		out->name[n] = '\0';
		out->named = true;
		out->offset = pc - (uintptr_t)info.dli_saddr;
	}
	if (lm == NULL || !md_object_read(&o, &info, lm))
		goto out;
	cache_lock();
	e = cache_get(&o, info.dli_fname);
	found = md_symindex_lookup(&e->ix, pc - o.bias, name, sizeof(name), &start);
	if (e->ix.path[0] != '\0') {
		memcpy(out->path_buf, e->ix.path, sizeof(out->path_buf));
		out->path = out->path_buf;
	}
	cache_unlock();
	/* dladdr's answer stands when it names the same function. */
	if (found && !(out->named && (uintptr_t)info.dli_saddr == o.bias + start)) {
		memcpy(out->name, name, sizeof(name));
		out->named = true;
		out->offset = pc - o.bias - start;
	}
out:
	errno = saved_errno;
	return true;
}
