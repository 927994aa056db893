// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* What the workloads of md_test share: the checks, the helpers and the workloads themselves. */
#ifndef MD_TEST_H
#define MD_TEST_H

#include <stddef.h>
#include <stdio.h>

/* The workloads use freed blocks on purpose: free_track keeps them mapped. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic ignored "-Wuse-after-free"
#endif

extern int failures;

#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "FAIL: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
			failures++;                                                  \
		}                                                                    \
	} while (0)

/* The helpers (md_test.c). */
void *opaque(void *p);
size_t sz(size_t v);
void name_ptr(const char *name, void *p);
int all_bytes(const void *p, int value, size_t n);

/* md_test_guard.c */
int test_front_guard_corrupted(void);
int test_rear_guard_corrupted(void);
int test_rear_guard_shrink(void);
int test_both_guards_corrupted(void);
int test_tag_corrupted(void);
int test_guard_realloc(void);
int test_guard_realloc_shrink(void);
int test_usable_calloc(void);
int test_calloc_overrun(void);
int test_abort(void);
int test_alignment(void);
int test_guard_forged_header(void);
int test_guard_every_byte(void);

/* md_test_fill.c */
int test_huge(void);
int test_fill_on_alloc(void);
int test_fill_on_alloc_partial(void);
int test_fill_on_free(void);
int test_fill_on_free_partial(void);
int test_expand_alloc(void);
int test_fill_every_size(void);

/* md_test_free_track.c */
int test_free_track_use_after_free(void);
int test_free_track_finalize(void);
int test_free_track_double_free(void);
int test_free_track_realloc_freed(void);
int test_free_track_header_tag_corrupted(void);
int test_free_track_modified_partial(void);
int test_free_track_double_free_churn(void);

/* md_test_verify.c */
int test_verify_pointers(void);
int test_verify_pointers_interior(void);
int test_verify_pointers_realloc_moved(void);
int test_verify_wild(void);
int test_verify_clean(void);
int test_verify_stress(void);

/* md_test_process.c */
int test_threads(void);
int test_fork(void);
int test_plain(void);
int test_ctl_pid(void);
int test_ctl_signals(void);
int test_ctl_stats(void);
int test_ctl_wait(void);

#endif
