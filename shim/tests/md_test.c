// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Workloads for the libmdshim.so tests, one per subcommand, run by run.sh
 * under LD_PRELOAD with the matching LIBC_DEBUG_MALLOC_OPTIONS.
 *
 * A workload prints "NAME=POINTER" lines on stdout so that run.sh can put
 * the names in place of the pointers in the library's messages, and
 * "FAIL: ..." on stderr for any expectation of its own that does not hold.
 * Built with frame pointers and -rdynamic so backtraces name its functions.
 * This file has the helpers and main; the workloads are in md_test_*.c, by
 * feature.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "md_test.h"

int failures;

/* Keep the compiler from reasoning about freed or out-of-bounds memory. */
static void *volatile sink;
void *opaque(void *p)
{
	sink = p;
	return sink;
}

/* An opaque size, so the compiler does not reject the huge requests. */
size_t sz(size_t v)
{
	volatile size_t x = v;

	return x;
}

void name_ptr(const char *name, void *p)
{
	printf("%s=%p\n", name, p);
	fflush(stdout);
}

int all_bytes(const void *p, int value, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i] != (uint8_t)value)
			return 0;
	return 1;
}

static const struct {
	const char *name;
	int (*fn)(void);
} tests[] = {
	{ "front_guard_corrupted", test_front_guard_corrupted },
	{ "rear_guard_corrupted", test_rear_guard_corrupted },
	{ "rear_guard_shrink", test_rear_guard_shrink },
	{ "both_guards_corrupted", test_both_guards_corrupted },
	{ "tag_corrupted", test_tag_corrupted },
	{ "guard_realloc", test_guard_realloc },
	{ "guard_realloc_shrink", test_guard_realloc_shrink },
	{ "usable_calloc", test_usable_calloc },
	{ "calloc_overrun", test_calloc_overrun },
	{ "huge", test_huge },
	{ "fill_on_alloc", test_fill_on_alloc },
	{ "fill_on_alloc_partial", test_fill_on_alloc_partial },
	{ "fill_on_free", test_fill_on_free },
	{ "fill_on_free_partial", test_fill_on_free_partial },
	{ "expand_alloc", test_expand_alloc },
	{ "free_track_use_after_free", test_free_track_use_after_free },
	{ "free_track_finalize", test_free_track_finalize },
	{ "free_track_double_free", test_free_track_double_free },
	{ "free_track_realloc_freed", test_free_track_realloc_freed },
	{ "free_track_header_tag_corrupted", test_free_track_header_tag_corrupted },
	{ "free_track_modified_partial", test_free_track_modified_partial },
	{ "abort", test_abort },
	{ "alignment", test_alignment },
	{ "threads", test_threads },
	{ "fork", test_fork },
	{ "plain", test_plain },
	{ "verify_pointers", test_verify_pointers },
	{ "verify_pointers_interior", test_verify_pointers_interior },
	{ "verify_wild", test_verify_wild },
	{ "verify_pointers_realloc_moved", test_verify_pointers_realloc_moved },
	{ "guard_forged_header", test_guard_forged_header },
	{ "guard_every_byte", test_guard_every_byte },
	{ "fill_every_size", test_fill_every_size },
	{ "free_track_double_free_churn", test_free_track_double_free_churn },
	{ "verify_clean", test_verify_clean },
	{ "verify_stress", test_verify_stress },
	{ "ctl_pid", test_ctl_pid },
	{ "ctl_signals", test_ctl_signals },
	{ "ctl_stats", test_ctl_stats },
	{ "ctl_wait", test_ctl_wait },
};

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s TEST\n", argv[0]);
		return 2;
	}
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		if (strcmp(argv[1], tests[i].name) == 0) {
			tests[i].fn();
			return failures == 0 ? 0 : 1;
		}
	}
	fprintf(stderr, "unknown test %s\n", argv[1]);
	return 2;
}
