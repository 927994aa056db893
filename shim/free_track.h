// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* free_track: freed blocks held back, filled, and checked when they leave (free_track.c). */
#ifndef MD_FREE_TRACK_H
#define MD_FREE_TRACK_H

#include <stdbool.h>
#include <stddef.h>

/*
 * md_free_track_init allocates the list of held blocks, once the options
 * are parsed; without memory for it free_track is off, and without memory
 * for the backtraces of the frees they are not kept.
 */
void md_free_track_init(void) __attribute__((visibility("hidden")));

/*
 * md_free_track keeps a freed block of bytes usable bytes with the
 * backtrace of its free; returns the block to really free, if any. Out of
 * line, so that free's own frame stays small.
 */
void *md_free_track(void *ptr, void *orig, size_t bytes) __attribute__((noinline, visibility("hidden")));

/* md_free_track_holds reports whether free_track holds the block ptr. Lock held. */
bool md_free_track_holds(void *ptr) __attribute__((visibility("hidden")));

/*
 * md_free_track_log_free logs the backtrace of the free of ptr, if
 * free_track holds the block and kept one. Lock held.
 */
void md_free_track_log_free(void *ptr) __attribute__((visibility("hidden")));

/* Around fork, after the lock is taken and before the table of live blocks (debug.c). */
void md_free_track_fork_prepare(void) __attribute__((visibility("hidden")));
void md_free_track_fork_parent(void) __attribute__((visibility("hidden")));
void md_free_track_fork_child(void) __attribute__((visibility("hidden")));

#endif
