// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The report of a corrupted guard (guard.h has the header, the guards and their checks). */
#include <stddef.h>
#include <stdint.h>

#include "backtrace.h"
#include "config.h"
#include "debug.h"
#include "guard.h"
#include "log.h"

void md_report_guard(void *ptr, size_t size, const char *which, const uint8_t *guard, size_t len,
		     long first_index, uint8_t expected, size_t i)
{
	uintptr_t frames[MD_MAX_BACKTRACE_FRAMES];
	size_t n;

	n = md_backtrace(md_tls.fp, frames, MD_MAX_BACKTRACE_FRAMES);
	md_lock();
	md_log('E', "%s", MD_LOG_DIVIDER);
	md_log('E', "+++ ALLOCATION %p SIZE %zu HAS A CORRUPTED %s GUARD", ptr, size, which);
	for (; i < len; i++)
		if (guard[i] != expected)
			md_log('E', "  allocation[%d] = 0x%02x (expected 0x%02x)", (int)(first_index + (long)i),
			       guard[i], expected);
	md_log('E', "Backtrace at time of failure:");
	md_backtrace_log_or_failure(frames, n);
	md_log('E', "%s", MD_LOG_DIVIDER);
	md_maybe_abort();
	md_unlock();
}
