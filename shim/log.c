// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Log lines in logcat's threadtime format on stderr, and frame-pointer
 * backtraces, their functions named by md_symbolize (symbols.c). Each line
 * is formatted into a fixed buffer on the stack and written with a single
 * write(2); nothing here allocates.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "mdshim.h"

#define LINE_MAX_BYTES 1024

/* Start and end of this library's image, provided by the linker. */
extern const char __ehdr_start[] __attribute__((visibility("hidden")));
extern const char _end[] __attribute__((visibility("hidden")));

/* civil_from_days converts days since 1970-01-01 to a UTC month and day. */
static void civil_from_days(long z, int *month, int *day)
{
	long era, doe, yoe, doy, mp;

	z += 719468;
	era = (z >= 0 ? z : z - 146096) / 146097;
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	*day = (int)(doy - (153 * mp + 2) / 5 + 1);
	*month = (int)(mp < 10 ? mp + 3 : mp - 9);
}

void md_log(char prio, const char *fmt, ...)
{
	char line[LINE_MAX_BYTES];
	struct timespec ts;
	int month, day, n, m;
	long secs, sod;
	va_list ap;

	clock_gettime(CLOCK_REALTIME, &ts);
	secs = (long)ts.tv_sec;
	sod = secs % 86400;
	if (sod < 0)
		sod += 86400;
	civil_from_days((secs - sod) / 86400, &month, &day);
	n = md_format(line, sizeof(line), "%02d-%02d %02ld:%02ld:%02ld.%03ld %5d %5d %c malloc_debug: ",
		      month, day, sod / 3600, (sod / 60) % 60, sod % 60, ts.tv_nsec / 1000000,
		      (int)getpid(), (int)syscall(SYS_gettid), prio);
	if (n < 0)
		return;
	va_start(ap, fmt);
	m = md_vformat(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	n += m;
	if ((size_t)n > sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	ssize_t r = write(md_log_fd, line, (size_t)n);
	(void)r;
}

int md_log_fd = STDERR_FILENO;

void md_log_init(void)
{
	const char *s = getenv("MDSHIM_LOG_FD");
	char *end;
	long fd;
	int fl;

	if (s == NULL || s[0] == '\0')
		return;
	fd = strtol(s, &end, 10);
	if (*end != '\0' || fd <= 2 || fd >= 1024)
		return;
	/* Only a descriptor that is open for writing is used. */
	fl = fcntl((int)fd, F_GETFL);
	if (fl != -1 && (fl & O_ACCMODE) != O_RDONLY)
		md_log_fd = (int)fd;
}

/* Thread stack bounds, looked up once per thread. */
static __thread uintptr_t t_stack_lo __attribute__((tls_model("initial-exec")));
static __thread uintptr_t t_stack_hi __attribute__((tls_model("initial-exec")));
static __thread int t_stack_known __attribute__((tls_model("initial-exec")));

static void stack_bounds(void)
{
	pthread_attr_t attr;
	void *addr;
	size_t size;

	if (t_stack_known)
		return;
	t_stack_known = 1;
	if (pthread_getattr_np(pthread_self(), &attr) != 0)
		return;
	if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
		t_stack_lo = (uintptr_t)addr;
		t_stack_hi = (uintptr_t)addr + size;
	}
	pthread_attr_destroy(&attr);
}

bool md_stack_bounds(uintptr_t *lo, uintptr_t *hi)
{
	stack_bounds();
	*lo = t_stack_lo;
	*hi = t_stack_hi;
	return t_stack_hi != 0;
}

static int in_library(uintptr_t pc)
{
	return pc >= (uintptr_t)__ehdr_start && pc < (uintptr_t)_end;
}

size_t md_backtrace(void *fp, uintptr_t *frames, size_t max)
{
	uintptr_t cur = (uintptr_t)fp;
	size_t n = 0;

	stack_bounds();
	if (t_stack_hi == 0)
		return 0;
	while (n < max) {
		uintptr_t next, ra;

		if (cur < t_stack_lo || cur > t_stack_hi - 2 * sizeof(uintptr_t) || (cur & 15) != 0)
			break;
		next = ((const uintptr_t *)cur)[0];
		ra = ((const uintptr_t *)cur)[1];
		if (ra < 4096)
			break;
		if (!in_library(ra))
			frames[n++] = ra - 1;
		if (next <= cur)
			break;
		cur = next;
	}
	return n;
}

void md_backtrace_log(const uintptr_t *frames, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uintptr_t pc = frames[i];
		struct md_sym sym;

		if (md_symbolize(pc, &sym)) {
			const char *name = sym.path[0] != '\0' ? sym.path : "<unknown>";

			if (sym.named)
				md_log('E', "          #%02zd  pc %016lx  %s (%s+%lu)", (ssize_t)i,
				       (unsigned long)sym.rel_pc, name, sym.name,
				       (unsigned long)sym.offset);
			else
				md_log('E', "          #%02zd  pc %016lx  %s", (ssize_t)i,
				       (unsigned long)sym.rel_pc, name);
		} else {
			md_log('E', "          #%02zd  pc %016lx  <unknown>", (ssize_t)i,
			       (unsigned long)pc);
		}
	}
}
