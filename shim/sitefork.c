// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The probe sites in a fork child (site.c has the sites themselves).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ctl.h"
#include "site.h"

/*
 * A fork child copies its parent's memory, sites included, but not the
 * page the kernel's optimized probes call into ([uprobes-trampoline]): a
 * site the kernel had turned into a call there crashes a child that
 * mdtrace does not trace (forked by a thread mdtrace does not follow, or
 * by a process mdtrace attached to without --follow-forks). A traced
 * child has the page: mdtrace probes it before it runs. So in a child,
 * before anything else of the shim's runs, a site that calls a page that
 * is not there gets its NOP back, or, where the code cannot be written,
 * the sites are not called again in this process. Then, under mdtrace, a
 * child that nothing traces asks mdtrace to follow it (md_ctl_adopt).
 */
int md_sites_dead;
static int g_fork_from_thread;

static void site_after_fork(uint8_t *site)
{
	static const uint8_t nop5[5] = { 0x0f, 0x1f, 0x44, 0x00, 0x00 };
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), target, from, to;
	unsigned char vec;
	int32_t rel;

	if (site[0] != 0xe8)
		return;
	memcpy(&rel, site + 1, sizeof(rel));
	target = (uintptr_t)site + 5 + (intptr_t)rel;
	if (mincore((void *)(target & ~(page - 1)), 1, &vec) == 0 || errno != ENOMEM)
		return;
	from = (uintptr_t)site & ~(page - 1);
	to = ((uintptr_t)site + 5 + page - 1) & ~(page - 1);
	if (mprotect((void *)from, to - from, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) {
		md_sites_dead = 1;
		return;
	}
	memcpy(site, nop5, sizeof(nop5));
	if (mprotect((void *)from, to - from, PROT_READ | PROT_EXEC) != 0)
		md_sites_dead = 1;
}

void md_sites_after_fork(void)
{
	static pid_t done;
	int saved = errno;
	pid_t self = getpid();

	/* Once per process: the batches' handler calls it too. */
	if (done == self)
		return;
	done = self;
	site_after_fork((uint8_t *)(uintptr_t)mdshim_site_alloc);
	site_after_fork((uint8_t *)(uintptr_t)mdshim_site_free);
	site_after_fork((uint8_t *)(uintptr_t)mdshim_site_batch);
	/*
	 * A child mdtrace did not hear of asks to be followed: ptrace reports
	 * the forks of the main thread, which mdtrace traces, not the others'.
	 */
	if (g_fork_from_thread)
		md_ctl_adopt();
	errno = saved;
}

/* Whether the thread that forks is not its process's main thread. */
static void sites_before_fork(void)
{
	g_fork_from_thread = gettid() != getpid();
}

/* Registered first of the shim's fork handlers: see md_sites_after_fork. */
__attribute__((constructor(101))) static void sites_start(void)
{
	pthread_atfork(sites_before_fork, NULL, md_sites_after_fork);
}
