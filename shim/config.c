// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The malloc debug option parser, with Android's syntax, limits, defaults,
 * order-dependent combinations and error messages. It runs inside the first
 * malloc call, so it uses no heap and no locale-dependent functions.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "format.h"

/* A parsed option: name and value as written. */
struct opt {
	const char *name;
	size_t name_len;
	const char *value;
	size_t value_len;
};

static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static void set_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	md_vformat(err, errlen, fmt, ap);
	va_end(ap);
}

static const char *errno_text(int e)
{
	if (e == ERANGE)
		return "Numerical result out of range";
	if (e == EINVAL)
		return "Invalid argument";
	return "Unknown error";
}

/* Parser state shared by the setters. */
struct parser {
	struct md_config *cfg;
	char name[MD_ERR_MAX / 2];
	char value[MD_PATH_MAX];
	bool has_value;
	char *err;
	size_t errlen;
};

/* parse_required parses a value that must be present, Android's 4-argument ParseValue. */
static bool parse_required(struct parser *p, size_t min, size_t max, size_t *out)
{
	const char *v = p->value;
	char *end;
	long n;

	errno = 0;
	n = strtol(v, &end, 10);
	if (errno != 0) {
		set_err(p->err, p->errlen, "bad value for option '%s': %s", p->name, errno_text(errno));
		return false;
	}
	if (end == v) {
		set_err(p->err, p->errlen, "bad value for option '%s'", p->name);
		return false;
	}
	if (*end != '\0') {
		set_err(p->err, p->errlen, "bad value for option '%s', non space found after option: %s",
			p->name, end);
		return false;
	}
	if (n < 0) {
		set_err(p->err, p->errlen, "bad value for option '%s', value cannot be negative: %ld",
			p->name, n);
		return false;
	}
	if ((size_t)n < min) {
		set_err(p->err, p->errlen, "bad value for option '%s', value must be >= %zu: %ld", p->name,
			min, n);
		return false;
	}
	if ((size_t)n > max) {
		set_err(p->err, p->errlen, "bad value for option '%s', value must be <= %zu: %ld", p->name,
			max, n);
		return false;
	}
	*out = (size_t)n;
	return true;
}

/* parse_optional parses a value that defaults to def when empty. */
static bool parse_optional(struct parser *p, size_t def, size_t min, size_t max, size_t *out)
{
	if (!p->has_value) {
		*out = def;
		return true;
	}
	return parse_required(p, min, max, out);
}

static bool no_value(struct parser *p)
{
	if (p->has_value) {
		set_err(p->err, p->errlen, "value set for option '%s' which does not take a value",
			p->name);
		return false;
	}
	return true;
}

static size_t align_up(size_t n, size_t a)
{
	return (n + a - 1) & ~(a - 1);
}

static void copy_str(char *dst, const char *src)
{
	size_t n = strlen(src);

	if (n >= MD_PATH_MAX)
		n = MD_PATH_MAX - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
}

static bool set_guard(struct parser *p)
{
	if (!parse_optional(p, MD_DEFAULT_GUARD_BYTES, 1, MD_MAX_GUARD_BYTES, &p->cfg->rear_guard_bytes))
		return false;
	p->cfg->front_guard_bytes = align_up(p->cfg->rear_guard_bytes, MD_MIN_ALIGN);
	return true;
}

static bool set_front_guard(struct parser *p)
{
	if (!parse_optional(p, MD_DEFAULT_GUARD_BYTES, 1, MD_MAX_GUARD_BYTES,
			    &p->cfg->front_guard_bytes))
		return false;
	p->cfg->front_guard_bytes = align_up(p->cfg->front_guard_bytes, MD_MIN_ALIGN);
	return true;
}

static bool set_rear_guard(struct parser *p)
{
	return parse_optional(p, MD_DEFAULT_GUARD_BYTES, 1, MD_MAX_GUARD_BYTES,
			      &p->cfg->rear_guard_bytes);
}

static bool set_backtrace_size(struct parser *p)
{
	if (!parse_required(p, 1, SIZE_MAX, &p->cfg->backtrace_min_size_bytes))
		return false;
	p->cfg->backtrace_max_size_bytes = p->cfg->backtrace_min_size_bytes;
	return true;
}

static bool set_backtrace_min_size(struct parser *p)
{
	return parse_required(p, 1, SIZE_MAX, &p->cfg->backtrace_min_size_bytes);
}

static bool set_backtrace_max_size(struct parser *p)
{
	return parse_required(p, 1, SIZE_MAX, &p->cfg->backtrace_max_size_bytes);
}

static bool set_backtrace(struct parser *p)
{
	p->cfg->backtrace_enabled = true;
	return parse_optional(p, MD_DEFAULT_BACKTRACE_FRAMES, 1, MD_MAX_BACKTRACE_FRAMES,
			      &p->cfg->backtrace_frames);
}

static bool set_backtrace_enable_on_signal(struct parser *p)
{
	p->cfg->backtrace_enable_on_signal = true;
	return parse_optional(p, MD_DEFAULT_BACKTRACE_FRAMES, 1, MD_MAX_BACKTRACE_FRAMES,
			      &p->cfg->backtrace_frames);
}

static bool set_backtrace_dump_on_exit(struct parser *p)
{
	if (!no_value(p))
		return false;
	p->cfg->backtrace_dump_on_exit = true;
	return true;
}

static bool set_backtrace_dump_prefix(struct parser *p)
{
	copy_str(p->cfg->backtrace_dump_prefix, p->has_value ? p->value : MD_DEFAULT_BACKTRACE_DUMP_PREFIX);
	return true;
}

static bool set_fill(struct parser *p)
{
	if (!parse_optional(p, SIZE_MAX, 1, SIZE_MAX, &p->cfg->fill_on_alloc_bytes))
		return false;
	p->cfg->fill_on_free_bytes = p->cfg->fill_on_alloc_bytes;
	return true;
}

static bool set_fill_on_alloc(struct parser *p)
{
	return parse_optional(p, SIZE_MAX, 1, SIZE_MAX, &p->cfg->fill_on_alloc_bytes);
}

static bool set_fill_on_free(struct parser *p)
{
	return parse_optional(p, SIZE_MAX, 1, SIZE_MAX, &p->cfg->fill_on_free_bytes);
}

static bool set_expand_alloc(struct parser *p)
{
	return parse_optional(p, MD_DEFAULT_EXPAND_BYTES, 1, MD_MAX_EXPAND_BYTES,
			      &p->cfg->expand_alloc_bytes);
}

static bool set_free_track(struct parser *p)
{
	if (!parse_optional(p, MD_DEFAULT_FREE_TRACK_ALLOCATIONS, 1, MD_MAX_FREE_TRACK_ALLOCATIONS,
			    &p->cfg->free_track_allocations))
		return false;
	if (p->cfg->fill_on_free_bytes == 0)
		p->cfg->fill_on_free_bytes = SIZE_MAX;
	if (p->cfg->free_track_backtrace_num_frames == 0)
		p->cfg->free_track_backtrace_num_frames = MD_DEFAULT_BACKTRACE_FRAMES;
	return true;
}

static bool set_free_track_backtrace_num_frames(struct parser *p)
{
	return parse_optional(p, MD_DEFAULT_BACKTRACE_FRAMES, 0, MD_MAX_BACKTRACE_FRAMES,
			      &p->cfg->free_track_backtrace_num_frames);
}

static bool set_record_allocs(struct parser *p)
{
	if (!parse_optional(p, MD_DEFAULT_RECORD_ALLOCS, 1, MD_MAX_RECORD_ALLOCS,
			    &p->cfg->record_allocs_num_entries))
		return false;
	if (p->cfg->record_allocs_file[0] == '\0')
		copy_str(p->cfg->record_allocs_file, MD_DEFAULT_RECORD_ALLOCS_FILE);
	return true;
}

static bool set_record_allocs_file(struct parser *p)
{
	copy_str(p->cfg->record_allocs_file, p->has_value ? p->value : MD_DEFAULT_RECORD_ALLOCS_FILE);
	return true;
}

static bool set_record_allocs_on_exit(struct parser *p)
{
	if (!no_value(p))
		return false;
	p->cfg->record_allocs_on_exit = true;
	return true;
}

static bool set_flag(struct parser *p)
{
	return no_value(p);
}

static bool set_verify_pointers(struct parser *p)
{
	p->cfg->verify_pointers = true;
	return no_value(p);
}

/* The option table: name, bits OR-ed in on success, setter. */
static const struct option_def {
	const char *name;
	uint64_t bits;
	bool (*set)(struct parser *p);
} options_table[] = {
	{ "guard", MD_FRONT_GUARD | MD_REAR_GUARD | MD_TRACK_ALLOCS, set_guard },
	{ "front_guard", MD_FRONT_GUARD | MD_TRACK_ALLOCS, set_front_guard },
	{ "rear_guard", MD_REAR_GUARD | MD_TRACK_ALLOCS, set_rear_guard },
	{ "backtrace_size", MD_BACKTRACE_SPECIFIC_SIZES, set_backtrace_size },
	{ "bt_sz", MD_BACKTRACE_SPECIFIC_SIZES, set_backtrace_size },
	{ "backtrace_min_size", MD_BACKTRACE_SPECIFIC_SIZES, set_backtrace_min_size },
	{ "bt_min_sz", MD_BACKTRACE_SPECIFIC_SIZES, set_backtrace_min_size },
	{ "backtrace_max_size", MD_BACKTRACE_SPECIFIC_SIZES, set_backtrace_max_size },
	{ "bt_max_sz", MD_BACKTRACE_SPECIFIC_SIZES, set_backtrace_max_size },
	{ "backtrace", MD_BACKTRACE | MD_TRACK_ALLOCS, set_backtrace },
	{ "bt", MD_BACKTRACE | MD_TRACK_ALLOCS, set_backtrace },
	{ "backtrace_enable_on_signal", MD_BACKTRACE | MD_TRACK_ALLOCS, set_backtrace_enable_on_signal },
	{ "bt_en_on_sig", MD_BACKTRACE | MD_TRACK_ALLOCS, set_backtrace_enable_on_signal },
	{ "backtrace_dump_on_exit", 0, set_backtrace_dump_on_exit },
	{ "bt_dmp_on_ex", 0, set_backtrace_dump_on_exit },
	{ "backtrace_dump_prefix", 0, set_backtrace_dump_prefix },
	{ "bt_dmp_pre", 0, set_backtrace_dump_prefix },
	{ "backtrace_full", MD_BACKTRACE_FULL, set_flag },
	{ "bt_full", MD_BACKTRACE_FULL, set_flag },
	{ "fill", MD_FILL_ON_ALLOC | MD_FILL_ON_FREE, set_fill },
	{ "fill_on_alloc", MD_FILL_ON_ALLOC, set_fill_on_alloc },
	{ "fill_on_free", MD_FILL_ON_FREE, set_fill_on_free },
	{ "expand_alloc", MD_EXPAND_ALLOC, set_expand_alloc },
	{ "free_track", MD_FREE_TRACK | MD_FILL_ON_FREE | MD_TRACK_ALLOCS, set_free_track },
	{ "free_track_backtrace_num_frames", 0, set_free_track_backtrace_num_frames },
	{ "leak_track", MD_LEAK_TRACK | MD_TRACK_ALLOCS, set_flag },
	{ "record_allocs", MD_RECORD_ALLOCS, set_record_allocs },
	{ "record_allocs_file", 0, set_record_allocs_file },
	{ "record_allocs_on_exit", 0, set_record_allocs_on_exit },
	{ "verify_pointers", MD_TRACK_ALLOCS, set_verify_pointers },
	{ "abort_on_error", MD_ABORT_ON_ERROR, set_flag },
	{ "verbose", MD_VERBOSE, set_flag },
	{ "check_unreachable_on_signal", MD_CHECK_UNREACHABLE_ON_SIGNAL, set_flag },
	{ "log_allocator_stats_on_signal", MD_LOG_ALLOCATOR_STATS_ON_SIGNAL, set_flag },
	{ "log_allocator_stats_on_exit", MD_LOG_ALLOCATOR_STATS_ON_EXIT, set_flag },
};

/* next_option reads one "name[=value]" item; false at the end of the string. */
static bool next_option(const char **cur, struct opt *o)
{
	const char *c = *cur;

	while (is_space(*c))
		c++;
	if (*c == '\0') {
		*cur = c;
		return false;
	}
	o->name = c;
	while (*c != '\0' && *c != '=' && !is_space(*c))
		c++;
	o->name_len = (size_t)(c - o->name);
	while (is_space(*c))
		c++;
	o->value = c;
	o->value_len = 0;
	if (*c == '=') {
		c++;
		while (is_space(*c))
			c++;
		o->value = c;
		while (*c != '\0' && !is_space(*c))
			c++;
		o->value_len = (size_t)(c - o->value);
	}
	*cur = c;
	return true;
}

static void init_defaults(struct md_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	copy_str(cfg->backtrace_dump_prefix, MD_DEFAULT_BACKTRACE_DUMP_PREFIX);
	cfg->backtrace_max_size_bytes = SIZE_MAX;
}

static void copy_n(char *dst, size_t cap, const char *src, size_t n)
{
	if (n >= cap)
		n = cap - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
}

bool md_config_parse(const char *str, struct md_config *cfg, char *err, size_t errlen)
{
	struct parser p = { .cfg = cfg, .err = err, .errlen = errlen };
	const char *cur = str ? str : "";
	struct opt o;

	init_defaults(cfg);
	if (errlen > 0)
		err[0] = '\0';
	while (next_option(&cur, &o)) {
		const struct option_def *def = NULL;

		copy_n(p.name, sizeof(p.name), o.name, o.name_len);
		copy_n(p.value, sizeof(p.value), o.value, o.value_len);
		p.has_value = o.value_len > 0;
		for (size_t i = 0; i < sizeof(options_table) / sizeof(options_table[0]); i++) {
			if (strlen(options_table[i].name) == o.name_len &&
			    memcmp(options_table[i].name, o.name, o.name_len) == 0) {
				def = &options_table[i];
				break;
			}
		}
		if (def == NULL) {
			set_err(err, errlen, "unknown option %s", p.name);
			return false;
		}
		if (!def->set(&p))
			return false;
		cfg->options |= def->bits;
	}
	return true;
}
