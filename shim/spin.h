// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Spin locks for critical sections of a few dozen instructions inside the
 * allocator's hooks, where a mutex's lock and unlock cost more than the
 * work: a waiter spins, then yields its CPU, so that a preempted holder
 * gets it. A lock is an int, 0 free and 1 held.
 */
#ifndef MD_SPIN_H
#define MD_SPIN_H

#include <sched.h>

static inline void md_spin_lock(int *l)
{
	for (unsigned spins = 0;; spins++) {
		if (__atomic_load_n(l, __ATOMIC_RELAXED) == 0 && !__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE))
			return;
		if (spins < 64)
			__builtin_ia32_pause();
		else
			sched_yield();
	}
}

static inline void md_spin_unlock(int *l)
{
	__atomic_store_n(l, 0, __ATOMIC_RELEASE);
}

#endif
