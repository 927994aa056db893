// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Log lines in logcat's threadtime format (log.c). */
#ifndef MD_LOG_H
#define MD_LOG_H

/* The line that opens and closes each error report, as Android's. */
#define MD_LOG_DIVIDER "*** *** *** *** *** *** *** *** *** *** *** *** *** *** *** ***"

/*
 * md_log writes one logcat-style line to stderr with a single write(2):
 * "MM-DD HH:MM:SS.mmm  PID  TID P malloc_debug: MESSAGE". prio is 'E' or 'I'.
 */
void md_log(char prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * md_log_fd is where log lines go: standard error, or the descriptor named
 * by MDSHIM_LOG_FD (mdtrace passes its --log file), read by md_log_init.
 */
extern int md_log_fd;
void md_log_init(void);

#endif
