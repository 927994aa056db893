// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The async-signal-safe formatter of the log lines and option errors (format.c). */
#ifndef MD_FORMAT_H
#define MD_FORMAT_H

#include <stdarg.h>
#include <stddef.h>

/*
 * md_vformat is an async-signal-safe vsnprintf (format.c) for %d %i %u %o
 * %x %X %c %s %p %% with the hh h l ll j z t modifiers, the - 0 + space #
 * flags, width and precision (digits or '*'). It always NUL-terminates when
 * len > 0 and returns the length the whole output would have.
 */
int md_vformat(char *buf, size_t len, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));

/* md_format is md_vformat with the arguments given directly. */
int md_format(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
