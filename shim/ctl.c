// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The shim's control channel to mdtrace, and Android's malloc debug signals.
 *
 * mdtrace keeps the live allocations of the process it traces, so Android's
 * get_malloc_leak_info asks it for them: it connects to the unix
 * socket that MDSHIM_CTL names, sends a 16-byte request (all little endian:
 * u32 magic "mdt1", u32 op, u32 arg, u32 0) and reads the answer, a 40-byte
 * header (u32 magic, u32 status, u64 overall_size, info_size, total_memory,
 * backtrace_size) followed by overall_size bytes in Android's buffer format.
 * The protocol's numbers and layouts (CTL_*, struct md_ctl_request and
 * struct md_ctl_answer) are in abi/mdtrace_abi.h, which mdtrace reads too.
 *
 * The signals of the options that are on get Android's handlers, installed
 * by md_ctl_init with Android's verbose lines. Under mdtrace, the handlers
 * of 45 (toggle backtraces), 46 (write the records), 47 (dump the heap) and
 * 48 (check for unreachable memory) pass the signal on to mdtrace, which
 * does the work: socket, connect, send, a bounded wait for mdtrace's
 * acknowledgement and close, nothing else, so that they are
 * async-signal-safe. Without mdtrace those signals are only noted
 * (their default action would kill the process) and the next malloc or free
 * logs that they were ignored. 49 (log allocator stats) is the shim's own,
 * as on Android: the next malloc or free logs glibc's malloc_info.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <malloc.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#include "../abi/mdtrace_abi.h"
#include "config.h"
#include "ctl.h"
#include "debug.h"
#include "log.h"
#include "real.h"

/* How long get_malloc_leak_info waits on mdtrace for each send and receive. */
#define CTL_TIMEOUT_SECONDS 30

#define NOT_TRACKED \
	"get_malloc_leak_info: Allocations not being tracked, to enable set the option 'backtrace'."

/* Android's signals, numbered from SIGRTMAX - 19; bit i of the masks is signal first + i. */
enum {
	SIG_BACKTRACE_ENABLE,   /* SIGRTMAX - 19 */
	SIG_RECORD_DUMP,        /* SIGRTMAX - 18 */
	SIG_BACKTRACE_DUMP,     /* SIGRTMAX - 17 */
	SIG_CHECK_UNREACHABLE,  /* SIGRTMAX - 16 */
	SIG_LOG_STATS,          /* SIGRTMAX - 15 */
	SIG_COUNT,
};

/*
 * md_ctl_pending: bits 0-4, a signal waits for md_ctl_poll (allocator stats
 * to log, or a signal to report as ignored); bits 8-12, passing the signal
 * on to mdtrace failed with g_notify_errno.
 */
unsigned int md_ctl_pending;
#define NOTIFY_FAILED_SHIFT 8
/*
 * Bit 31 (ADOPT_PENDING) is mdtrace's, in a shim it loaded into a running
 * process: the blocks sampled before the route wait in the adopt area
 * (md_inject_adopt). mdtrace finds the word by this name.
 */
extern unsigned int mdshim_ctl_pending __attribute__((visibility("default"), alias("md_ctl_pending")));

static int g_notify_errno[SIG_COUNT];

/* Set once by md_ctl_init, before any handler is installed. */
static int g_ctl_ready;
static uint64_t g_ctl_options;
static struct sockaddr_un g_ctl_addr;
static socklen_t g_ctl_addrlen; /* 0: no mdtrace */
static char g_ctl_name[sizeof(g_ctl_addr.sun_path)];
/* mdtrace checks for unreachable memory at exit: asked for at the last destructor. */
static bool g_exit_check;

static int first_signal(void)
{
	return SIGRTMAX - 19;
}

static void put_u32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p)
{
	return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

/*
 * make_addr fills addr with the address of name: the path of a socket file
 * when name starts with '/' (as mdtrace gives it: only root and the user
 * the program runs as can connect to it), else an abstract name. It
 * returns the address length, 0 for no name, or -1 if the name does not
 * fit.
 */
static int make_addr(const char *name, struct sockaddr_un *addr)
{
	size_t n;

	if (name == NULL || name[0] == '\0')
		return 0;
	n = strlen(name);
	if (n > sizeof(addr->sun_path) - 1)
		return -1;
	memset(addr, 0, sizeof(*addr));
	addr->sun_family = AF_UNIX;
	if (name[0] == '/') {
		/* A path ends with its NUL, which the length counts. */
		memcpy(addr->sun_path, name, n);
		return (int)(offsetof(struct sockaddr_un, sun_path) + n + 1);
	}
	memcpy(addr->sun_path + 1, name, n);
	return (int)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* send_all sends len bytes; 0 or an errno value. Async-signal-safe. */
static int send_all(int fd, const uint8_t *p, size_t len)
{
	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* recv_all receives len bytes; 0, an errno value, or -1 at end of stream. */
static int recv_all(int fd, uint8_t *p, size_t len)
{
	while (len > 0) {
		ssize_t n = recv(fd, p, len, 0);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno;
		}
		if (n == 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static void make_request(uint8_t *req, uint32_t op, uint32_t arg)
{
	put_u32(req + offsetof(struct md_ctl_request, magic), CTL_MAGIC);
	put_u32(req + offsetof(struct md_ctl_request, op), op);
	put_u32(req + offsetof(struct md_ctl_request, arg), arg);
	put_u32(req + offsetof(struct md_ctl_request, zero), 0);
}

/* ---- signals ---- */

/*
 * notify_mdtrace tells mdtrace of signal sig; 0 or an errno value. It runs
 * in a signal handler: system calls only. The socket does not block, so a
 * full backlog fails at once rather than hanging the handler, and the wait
 * for mdtrace's acknowledgement is bounded.
 */
/* How long a signal handler waits for mdtrace to act on the signal. */
#define CTL_ACK_TIMEOUT_MS 30000

static int notify_op(uint32_t op, uint32_t arg)
{
	uint8_t req[sizeof(struct md_ctl_request)];
	int fd, err = 0;

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return errno;
	while (connect(fd, (const struct sockaddr *)&g_ctl_addr, g_ctl_addrlen) != 0) {
		if (errno != EINTR) {
			err = errno;
			break;
		}
	}
	if (err == 0) {
		make_request(req, op, arg);
		err = send_all(fd, req, sizeof(req));
	}
	if (err == 0) {
		/*
		 * mdtrace acknowledges once it has acted (a heap dump is
		 * written), so the process goes on, or exits, only after.
		 */
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		uint8_t ack[CTL_ACK_SIZE];

		if (poll(&pfd, 1, CTL_ACK_TIMEOUT_MS) == 1 && read(fd, ack, sizeof(ack)) < 0)
			err = errno;
	}
	close(fd);
	return err;
}

static int notify_mdtrace(int sig)
{
	return notify_op(CTL_OP_SIGNAL, (uint32_t)sig);
}

static void signal_handler(int sig, siginfo_t *info, void *ucontext)
{
	int saved_errno = errno;
	int i = sig - first_signal();

	(void)info;
	(void)ucontext;
	if (i < 0 || i >= SIG_COUNT) {
		errno = saved_errno;
		return;
	}
	if (i != SIG_LOG_STATS && g_ctl_addrlen != 0) {
		int err = notify_mdtrace(sig);

		if (err != 0) {
			__atomic_store_n(&g_notify_errno[i], err, __ATOMIC_RELAXED);
			__atomic_fetch_or(&md_ctl_pending, 1U << (NOTIFY_FAILED_SHIFT + i), __ATOMIC_RELEASE);
		}
	} else {
		__atomic_fetch_or(&md_ctl_pending, 1U << i, __ATOMIC_RELEASE);
	}
	errno = saved_errno;
}

/* Android's messages for each signal, and what it asks of mdtrace when the shim runs alone. */
static const struct {
	const char *verbose; /* after "Run: 'kill -N PID' " */
	const char *failure; /* after "Unable to set up " */
	const char *ignored; /* "Signal N ignored: %s" */
} g_sig_text[SIG_COUNT] = {
	[SIG_BACKTRACE_ENABLE] = {
		"to enable backtracing.",
		"backtrace signal enable function",
		"toggling backtraces needs mdtrace "
		"(the backtrace_enable_on_signal option is tracked by mdtrace)",
	},
	[SIG_RECORD_DUMP] = {
		"to dump the allocation records.",
		"record dump signal function",
		"writing the allocation records needs mdtrace "
		"(the record_allocs option is recorded by mdtrace)",
	},
	[SIG_BACKTRACE_DUMP] = {
		"to dump the backtrace.",
		"backtrace dump signal function",
		"dumping the heap needs mdtrace (the backtrace option is tracked by mdtrace)",
	},
	[SIG_CHECK_UNREACHABLE] = {
		"to check for unreachable memory.",
		"check unreachable signal function",
		"checking for unreachable memory needs mdtrace "
		"(the check_unreachable_on_signal option is run by mdtrace)",
	},
	[SIG_LOG_STATS] = { "to log allocator stats.", "log allocator stats signal function", NULL },
};

static void install(const struct md_config *cfg, int i)
{
	struct sigaction act;
	int sig = first_signal() + i;

	memset(&act, 0, sizeof(act));
	act.sa_sigaction = signal_handler;
	act.sa_flags = SA_RESTART | SA_SIGINFO | SA_ONSTACK;
	sigemptyset(&act.sa_mask);
	if (sigaction(sig, &act, NULL) != 0) {
		md_log('E', "Unable to set up %s: %s", g_sig_text[i].failure, strerror(errno));
		return;
	}
	if (cfg->options & MD_VERBOSE)
		md_log('I', "%s: Run: 'kill -%d %d' %s", program_invocation_name, sig, (int)getpid(),
		       g_sig_text[i].verbose);
}

void md_ctl_init(const struct md_config *cfg)
{
	const char *name = getenv(ENV_CTL);
	int len;

	if (__atomic_load_n(&g_ctl_ready, __ATOMIC_ACQUIRE))
		return;
	g_ctl_options = cfg->options;
	len = make_addr(name, &g_ctl_addr);
	if (len < 0)
		md_log('E', ENV_CTL "=%s: the name of mdtrace's socket is too long", name);
	if (len > 0) {
		g_ctl_addrlen = (socklen_t)len;
		memcpy(g_ctl_name, name, strlen(name) + 1);
	}
	g_exit_check = len > 0 && getenv(ENV_EXIT_CHECK) != NULL;
	__atomic_store_n(&g_ctl_ready, 1, __ATOMIC_RELEASE);

	/* Android's order: PointerData, RecordData, LogAllocatorStats, then Unreachable. */
	if (cfg->backtrace_enable_on_signal)
		install(cfg, SIG_BACKTRACE_ENABLE);
	if (cfg->options & MD_BACKTRACE)
		install(cfg, SIG_BACKTRACE_DUMP);
	if (cfg->options & MD_RECORD_ALLOCS)
		install(cfg, SIG_RECORD_DUMP);
	if (cfg->options & MD_LOG_ALLOCATOR_STATS_ON_SIGNAL)
		install(cfg, SIG_LOG_STATS);
	if (cfg->options & MD_CHECK_UNREACHABLE_ON_SIGNAL)
		install(cfg, SIG_CHECK_UNREACHABLE);
}

/* ---- fork children ---- */

/* traced reports whether a debugger traces this process (TracerPid in /proc/self/status). */
static bool traced(void)
{
	char buf[4096], *p;
	ssize_t n = 0, r;
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return true;
	while (n < (ssize_t)sizeof(buf) - 1 && (r = read(fd, buf + n, sizeof(buf) - 1 - (size_t)n)) > 0)
		n += r;
	close(fd);
	buf[n] = '\0';
	p = strstr(buf, "TracerPid:");
	if (p == NULL)
		return true;
	p += strlen("TracerPid:");
	while (*p == ' ' || *p == '\t')
		p++;
	return *p != '0';
}

/* How long a fork child waits for mdtrace to follow it. */
#define CTL_ADOPT_TIMEOUT_MS 10000

void md_ctl_adopt(void)
{
	uint8_t req[sizeof(struct md_ctl_request)], ans[CTL_ADOPT_ANSWER_SIZE];
	struct pollfd pfd;
	int fd;

	if (!__atomic_load_n(&g_ctl_ready, __ATOMIC_ACQUIRE) || g_ctl_addrlen == 0 || traced())
		return;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	while (connect(fd, (const struct sockaddr *)&g_ctl_addr, g_ctl_addrlen) != 0) {
		if (errno != EINTR) {
			close(fd);
			return;
		}
	}
	make_request(req, CTL_OP_ADOPT, 0);
	pfd = (struct pollfd){ .fd = fd, .events = POLLIN };
	if (send_all(fd, req, sizeof(req)) == 0 && poll(&pfd, 1, CTL_ADOPT_TIMEOUT_MS) == 1)
		recv_all(fd, ans, sizeof(ans));
	close(fd);
}

/* ---- allocator stats ---- */

/* stats_lines cuts malloc_info's output into log lines. */
struct stats_lines {
	char line[512];
	size_t len;
};

static void stats_flush(struct stats_lines *s)
{
	md_log('I', "%.*s", (int)s->len, s->line);
	s->len = 0;
}

static ssize_t stats_write(void *cookie, const char *buf, size_t size)
{
	struct stats_lines *s = cookie;

	for (size_t i = 0; i < size; i++) {
		if (buf[i] == '\n') {
			stats_flush(s);
			continue;
		}
		if (s->len == sizeof(s->line))
			stats_flush(s);
		s->line[s->len++] = buf[i];
	}
	return (ssize_t)size;
}

/* log_allocator_stats is Android's LogAllocatorStats::Log, with glibc's malloc_info. */
static void log_allocator_stats(void)
{
	cookie_io_functions_t io = { .write = stats_write };
	struct stats_lines s;
	bool ok = false;
	FILE *fp;

	md_internal_begin();
	s.len = 0;
	md_log('I', "Logging allocator stats...");
	fp = fopencookie(&s, "w", io);
	if (fp != NULL) {
		ok = malloc_info(0, fp) == 0;
		if (fclose(fp) != 0)
			ok = false;
		if (s.len > 0)
			stats_flush(&s);
	}
	if (!ok)
		md_log('E', "malloc_info(0, fp) call failed.");
	md_internal_end();
}

void md_ctl_poll_slow(void)
{
	unsigned int pending;
	int saved_errno = errno;

	/* Before any block is looked for among the shim's samples. */
	if (__atomic_load_n(&md_ctl_pending, __ATOMIC_ACQUIRE) & ADOPT_PENDING)
		md_inject_adopt();
	pending = __atomic_fetch_and(&md_ctl_pending, ADOPT_PENDING, __ATOMIC_ACQUIRE) & ~ADOPT_PENDING;
	if (pending == 0) {
		errno = saved_errno;
		return;
	}
	md_internal_begin();
	for (int i = 0; i < SIG_COUNT; i++) {
		int sig = first_signal() + i;

		if (pending & (1U << (NOTIFY_FAILED_SHIFT + i)))
			md_log('E', "Signal %d not passed to mdtrace (" ENV_CTL "=%s): %s", sig, g_ctl_name,
			       strerror(__atomic_load_n(&g_notify_errno[i], __ATOMIC_RELAXED)));
		if (!(pending & (1U << i)))
			continue;
		if (i == SIG_LOG_STATS)
			log_allocator_stats();
		else
			md_log('E', "Signal %d ignored: %s", sig, g_sig_text[i].ignored);
	}
	md_internal_end();
	errno = saved_errno;
}

/* log_allocator_stats_on_exit, after the shim's other exit checks (destructors run in reverse). */
__attribute__((destructor)) static void md_ctl_fini(void)
{
	if (!__atomic_load_n(&g_ctl_ready, __ATOMIC_ACQUIRE) ||
	    !(g_ctl_options & MD_LOG_ALLOCATOR_STATS_ON_EXIT))
		return;
	log_allocator_stats();
}

/*
 * The check for unreachable memory at exit (--unreachable-first and
 * --unreachable-only): mdtrace takes it now, while every thread of the
 * process still runs, and waits for none of them; at its exit stop,
 * exit_group has ended the other threads and their registers are gone.
 * Priority 101 runs it after the shim's other destructors (batch_exit
 * hands the exiting thread's last calls over first), so the live table is
 * the one the report finds; a process that ends by _exit or a signal has
 * its check at the exit stop only.
 */
__attribute__((destructor(101))) static void md_ctl_exit_check(void)
{
	int err;

	if (!__atomic_load_n(&g_ctl_ready, __ATOMIC_ACQUIRE) || !g_exit_check)
		return;
	err = notify_op(CTL_OP_EXITING, 0);
	if (err != 0)
		md_log('E', "the check for unreachable memory at exit was not passed to mdtrace (" ENV_CTL "=%s): %s",
		       g_ctl_name, strerror(err));
}

/* ---- get_malloc_leak_info ---- */

/*
 * leak_info_options are the options in force: md_ctl_init's, or, before it
 * or when the shim is off, LIBC_DEBUG_MALLOC_OPTIONS parsed here (none if
 * they do not parse: the shim has logged why).
 */
static uint64_t leak_info_options(void)
{
	struct md_config cfg;
	char err[MD_ERR_MAX];
	const char *opts;

	if (__atomic_load_n(&g_ctl_ready, __ATOMIC_ACQUIRE))
		return g_ctl_options;
	opts = getenv(ENV_OPTIONS);
	if (opts == NULL || opts[0] == '\0' || !md_config_parse(opts, &cfg, err, sizeof(err)))
		return 0;
	return cfg.options;
}

/* connect_mdtrace returns a socket connected to mdtrace, -1 without mdtrace, or -2 after an error line. */
static int connect_mdtrace(void)
{
	const char *name = getenv(ENV_CTL);
	struct sockaddr_un addr;
	struct timeval tv = { .tv_sec = CTL_TIMEOUT_SECONDS };
	int len, fd;

	if (__atomic_load_n(&g_ctl_ready, __ATOMIC_ACQUIRE)) {
		if (g_ctl_addrlen == 0)
			return -1;
		name = g_ctl_name;
	}
	len = make_addr(name, &addr);
	if (len == 0)
		return -1;
	if (len < 0) {
		md_log('E', "get_malloc_leak_info: cannot connect to mdtrace (" ENV_CTL "=%s): %s", name,
		       strerror(ENAMETOOLONG));
		return -2;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		while (connect(fd, (const struct sockaddr *)&addr, (socklen_t)len) != 0) {
			if (errno != EINTR) {
				int e = errno;

				close(fd);
				errno = e;
				fd = -1;
				break;
			}
		}
	}
	if (fd < 0) {
		md_log('E', "get_malloc_leak_info: cannot connect to mdtrace (" ENV_CTL "=%s): %s", name,
		       strerror(errno));
		return -2;
	}
	return fd;
}

/* recv_error names the error of send_all or recv_all. */
static const char *recv_error(int err)
{
	if (err == -1 || err == EPIPE || err == ECONNRESET)
		return "mdtrace closed the connection";
	if (err == EAGAIN || err == EWOULDBLOCK)
		return "timed out";
	return strerror(err);
}

/* fetch_leak_info asks mdtrace for the buffer; the outputs are zero on entry. */
static void fetch_leak_info(int fd, uint8_t **info, size_t *overall_size, size_t *info_size,
			    size_t *total_memory, size_t *backtrace_size)
{
	uint8_t req[sizeof(struct md_ctl_request)], ans[sizeof(struct md_ctl_answer)];
	uint64_t overall, isize, total, frames;
	uint32_t magic, status;
	uint8_t *buf;
	int err;

	make_request(req, CTL_OP_LEAK_INFO, 0);
	err = send_all(fd, req, sizeof(req));
	if (err != 0) {
		md_log('E', "get_malloc_leak_info: no answer from mdtrace: %s", recv_error(err));
		return;
	}
	err = recv_all(fd, ans, sizeof(ans));
	if (err != 0) {
		md_log('E', "get_malloc_leak_info: no answer from mdtrace: %s", recv_error(err));
		return;
	}
	magic = get_u32(ans + offsetof(struct md_ctl_answer, magic));
	status = get_u32(ans + offsetof(struct md_ctl_answer, status));
	overall = get_u64(ans + offsetof(struct md_ctl_answer, overall_size));
	isize = get_u64(ans + offsetof(struct md_ctl_answer, info_size));
	total = get_u64(ans + offsetof(struct md_ctl_answer, total_memory));
	frames = get_u64(ans + offsetof(struct md_ctl_answer, backtrace_size));
	if (magic != CTL_MAGIC) {
		md_log('E', "get_malloc_leak_info: bad answer from mdtrace (magic 0x%08x)", magic);
		return;
	}
	if (status == CTL_STATUS_NOT_TRACKED) {
		md_log('E', "%s", NOT_TRACKED);
		return;
	}
	if (status != CTL_STATUS_OK) {
		md_log('E', "get_malloc_leak_info: bad answer from mdtrace (status %u)", status);
		return;
	}
	if (overall == 0)
		return;
	if (frames > MD_MAX_BACKTRACE_FRAMES ||
	    isize != 2 * sizeof(size_t) + sizeof(uintptr_t) * frames || overall % isize != 0 ||
	    overall > SIZE_MAX / 2) {
		md_log('E',
		       "get_malloc_leak_info: bad answer from mdtrace "
		       "(overall_size %llu, info_size %llu, backtrace_size %llu)",
		       (unsigned long long)overall, (unsigned long long)isize, (unsigned long long)frames);
		return;
	}
	/* Straight from glibc: the buffer is the debug library's, not the program's. */
	buf = md_real_malloc((size_t)overall);
	if (buf == NULL) {
		md_log('E', "get_malloc_leak_info: no memory for %llu bytes", (unsigned long long)overall);
		return;
	}
	err = recv_all(fd, buf, (size_t)overall);
	if (err != 0) {
		md_log('E', "get_malloc_leak_info: short answer from mdtrace: %s", recv_error(err));
		md_real_free(buf);
		return;
	}
	*info = buf;
	*overall_size = (size_t)overall;
	*info_size = (size_t)isize;
	*total_memory = (size_t)total;
	*backtrace_size = (size_t)frames;
}

__attribute__((visibility("default"))) void get_malloc_leak_info(uint8_t **info, size_t *overall_size,
								  size_t *info_size, size_t *total_memory,
								  size_t *backtrace_size)
{
	int saved_errno = errno;
	int fd;

	md_internal_begin();
	if (!__atomic_load_n(&g_ctl_ready, __ATOMIC_ACQUIRE))
		md_log_init();
	if (info == NULL || overall_size == NULL || info_size == NULL || total_memory == NULL ||
	    backtrace_size == NULL) {
		md_log('E', "get_malloc_leak_info: At least one invalid parameter.");
		goto out;
	}
	*info = NULL;
	*overall_size = 0;
	*info_size = 0;
	*total_memory = 0;
	*backtrace_size = 0;
	if (!(leak_info_options() & MD_BACKTRACE)) {
		md_log('E', "%s", NOT_TRACKED);
		goto out;
	}
	fd = connect_mdtrace();
	if (fd < 0)
		goto out;
	fetch_leak_info(fd, info, overall_size, info_size, total_memory, backtrace_size);
	close(fd);
out:
	md_internal_end();
	errno = saved_errno;
}

__attribute__((visibility("default"))) void free_malloc_leak_info(uint8_t *info)
{
	md_real_free(info);
}

/*
 * The same two calls by the names libmdtrace looks up (SYM_GET_LEAK_INFO,
 * SYM_FREE_LEAK_INFO): a program linked with libmdtrace.a has its own
 * get_malloc_leak_info, which the loader finds before the shim's.
 */
extern __typeof__(get_malloc_leak_info) md_get_leak_info_export __asm__(SYM_GET_LEAK_INFO)
	__attribute__((alias("get_malloc_leak_info"), visibility("default")));
extern __typeof__(free_malloc_leak_info) md_free_leak_info_export __asm__(SYM_FREE_LEAK_INFO)
	__attribute__((alias("free_malloc_leak_info"), visibility("default")));
