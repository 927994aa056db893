// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Log lines in logcat's threadtime format on stderr. Each line is
 * formatted into a fixed buffer on the stack and written with a single
 * write(2); nothing here allocates.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../abi/mdtrace_abi.h"
#include "format.h"
#include "log.h"

#define LINE_MAX_BYTES 1024

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
	const char *s = getenv(ENV_LOG_FD);
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
