// What testdata/leakinfo.c (get_malloc_leak_info from the shim, found with
// dlsym) and testdata/leakapi.c (the same call linked from libmdtrace)
// share: the blocks they keep live (3 x 100 bytes from one call of
// alloc_small, 1 x 200 from alloc_medium, 1 x 9000 from alloc_large),
// output with write(2) only, so that stdio allocates nothing, and the
// printing of get_malloc_leak_info's answer:
//
//   overall_size=N info_size=N total_memory=N backtrace_size=N entries=N[NOTE]
//   size=N num=N first_frame=NAME      (one line per entry, in buffer order)
//
// NAME is dladdr's name for the entry's first frame, or "?" (build with
// -rdynamic).
#ifndef LEAKINFO_H
#define LEAKINFO_H

#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static void *volatile sink[8];
static int nsink;

static void keep(void *p)
{
	sink[nsink++] = p;
}

NOINLINE void alloc_small(void) { keep(malloc(100)); }
NOINLINE void alloc_medium(void) { keep(malloc(200)); }
NOINLINE void alloc_large(void) { keep(malloc(9000)); }

/* The blocks kept live, from three call sites. */
static void alloc_all(void)
{
	for (int i = 0; i < 3; i++)
		alloc_small(); /* one call site: one entry of 3 */
	alloc_medium();
	alloc_large();
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void say(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line))
		n = sizeof(line) - 1;
	write(1, line, (size_t)n);
}

static const char *frame_name(uintptr_t pc)
{
	Dl_info info;

	if (pc == 0 || dladdr((void *)pc, &info) == 0 || info.dli_sname == NULL)
		return "?";
	return info.dli_sname;
}

/* Prints get_malloc_leak_info's answer, note at the end of its first line. */
static void print_leak_info(const uint8_t *info, size_t overall, size_t info_size, size_t total, size_t bt,
			    const char *note)
{
	say("overall_size=%zu info_size=%zu total_memory=%zu backtrace_size=%zu entries=%zu%s\n", overall,
	    info_size, total, bt, info_size != 0 ? overall / info_size : 0, note);
	for (size_t off = 0; info != NULL && info_size != 0 && off + info_size <= overall; off += info_size) {
		size_t e[2];
		uintptr_t first = 0;

		memcpy(e, info + off, sizeof(e));
		if (bt > 0)
			memcpy(&first, info + off + sizeof(e), sizeof(first));
		say("size=%zu num=%zu first_frame=%s\n", e[0], e[1], frame_name(first));
	}
}

#endif
