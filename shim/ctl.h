// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The control channel to mdtrace and Android's signals (ctl.c). */
#ifndef MD_CTL_H
#define MD_CTL_H

struct md_config;

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
/*
 * md_inject_adopt takes the blocks mdtrace left in the adopt area
 * (ADOPT_PENDING), once, the calls of other threads waiting for it
 * (inject.c).
 */
void md_inject_adopt(void) __attribute__((visibility("hidden")));

static inline void md_ctl_poll(void)
{
	if (__builtin_expect(__atomic_load_n(&md_ctl_pending, __ATOMIC_RELAXED) != 0, 0))
		md_ctl_poll_slow();
}

#endif
