// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The malloc debug options (config.c): their bits, values and limits, and
 * the parsed option string.
 */
#ifndef MD_CONFIG_H
#define MD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Option bits, the same values as Android's malloc debug. */
#define MD_FRONT_GUARD 0x1
#define MD_REAR_GUARD 0x2
#define MD_BACKTRACE 0x4
#define MD_FILL_ON_ALLOC 0x8
#define MD_FILL_ON_FREE 0x10
#define MD_EXPAND_ALLOC 0x20
#define MD_FREE_TRACK 0x40
#define MD_TRACK_ALLOCS 0x80
#define MD_LEAK_TRACK 0x100
#define MD_RECORD_ALLOCS 0x200
#define MD_BACKTRACE_FULL 0x400
#define MD_ABORT_ON_ERROR 0x800
#define MD_VERBOSE 0x1000
#define MD_CHECK_UNREACHABLE_ON_SIGNAL 0x2000
#define MD_BACKTRACE_SPECIFIC_SIZES 0x4000
#define MD_LOG_ALLOCATOR_STATS_ON_SIGNAL 0x8000
#define MD_LOG_ALLOCATOR_STATS_ON_EXIT 0x10000

/* The options the shim acts on by rewriting or checking blocks. */
#define MD_SHIM_OPTIONS                                                                          \
	(MD_FRONT_GUARD | MD_REAR_GUARD | MD_FILL_ON_ALLOC | MD_FILL_ON_FREE | MD_EXPAND_ALLOC | \
	 MD_FREE_TRACK | MD_TRACK_ALLOCS)

#define MD_MIN_ALIGN 16
#define MD_FILL_ALLOC_VALUE 0xeb
#define MD_FILL_FREE_VALUE 0xef
#define MD_FRONT_GUARD_VALUE 0xaa
#define MD_REAR_GUARD_VALUE 0xbb
#define MD_DEFAULT_GUARD_BYTES 32
#define MD_MAX_GUARD_BYTES 16384
#define MD_DEFAULT_BACKTRACE_FRAMES 16
#define MD_MAX_BACKTRACE_FRAMES 256
#define MD_DEFAULT_EXPAND_BYTES 16
#define MD_MAX_EXPAND_BYTES 16384
#define MD_DEFAULT_FREE_TRACK_ALLOCATIONS 100
#define MD_MAX_FREE_TRACK_ALLOCATIONS 16384
#define MD_DEFAULT_RECORD_ALLOCS 8000000
#define MD_MAX_RECORD_ALLOCS 50000000
#define MD_DEFAULT_BACKTRACE_DUMP_PREFIX "/tmp/backtrace_heap"
#define MD_DEFAULT_RECORD_ALLOCS_FILE "/tmp/record_allocs.txt"

/* Longest string option value kept; longer values are cut. */
#define MD_PATH_MAX 4096
/* Longest option error message. */
#define MD_ERR_MAX 512

/* md_config is the parsed option string. It holds no pointers to the heap. */
struct md_config {
	uint64_t options;
	size_t front_guard_bytes;
	size_t rear_guard_bytes;
	size_t backtrace_frames;
	bool backtrace_enabled;
	bool backtrace_enable_on_signal;
	bool backtrace_dump_on_exit;
	char backtrace_dump_prefix[MD_PATH_MAX];
	size_t backtrace_min_size_bytes;
	size_t backtrace_max_size_bytes;
	size_t fill_on_alloc_bytes;
	size_t fill_on_free_bytes;
	size_t expand_alloc_bytes;
	size_t free_track_allocations;
	size_t free_track_backtrace_num_frames;
	size_t record_allocs_num_entries;
	char record_allocs_file[MD_PATH_MAX];
	bool record_allocs_on_exit;
	/* verify_pointers itself was given (other options imply its bit too). */
	bool verify_pointers;
};

/*
 * md_config_parse parses an option string with Android's rules. It always
 * starts from the default state. On failure it returns false and writes the
 * first error message, without the program-name prefix, to err. It neither
 * allocates nor writes anything, so it is safe inside malloc.
 */
bool md_config_parse(const char *str, struct md_config *cfg, char *err, size_t errlen);

/* Usage lines logged after an option error. */
#define MD_USAGE_LINE1 "For malloc debug option descriptions go to:"
#define MD_USAGE_LINE2 "  https://android.googlesource.com/platform/bionic/+/main/libc/malloc_debug/README.md"

#endif
