// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Runs the C option parser against the shared case file
 * (testdata/options_cases.txt). Usage: config_test CASEFILE
 * Prints every failure, then "N passed, N failed"; exits 1 on failure.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../config.h"

static void unescape(const char *in, char *out)
{
	while (*in != '\0') {
		if (in[0] == '\\' && in[1] == 't') {
			*out++ = '\t';
			in += 2;
		} else if (in[0] == '\\' && in[1] == 'n') {
			*out++ = '\n';
			in += 2;
		} else {
			*out++ = *in++;
		}
	}
	*out = '\0';
}

/* key_value renders a config field as the case file writes it; NULL for an unknown key. */
static const char *key_value(const struct md_config *c, const char *key, char *buf, size_t len)
{
#define NUM(k, v)                                             \
	if (strcmp(key, k) == 0) {                            \
		snprintf(buf, len, "%" PRIu64, (uint64_t)(v)); \
		return buf;                                   \
	}
	if (strcmp(key, "options") == 0) {
		snprintf(buf, len, "0x%" PRIx64, c->options);
		return buf;
	}
	NUM("front_guard_bytes", c->front_guard_bytes);
	NUM("rear_guard_bytes", c->rear_guard_bytes);
	NUM("backtrace_frames", c->backtrace_frames);
	NUM("backtrace_enabled", c->backtrace_enabled);
	NUM("backtrace_enable_on_signal", c->backtrace_enable_on_signal);
	NUM("backtrace_dump_on_exit", c->backtrace_dump_on_exit);
	NUM("backtrace_min_size_bytes", c->backtrace_min_size_bytes);
	NUM("backtrace_max_size_bytes", c->backtrace_max_size_bytes);
	NUM("fill_on_alloc_bytes", c->fill_on_alloc_bytes);
	NUM("fill_on_free_bytes", c->fill_on_free_bytes);
	NUM("expand_alloc_bytes", c->expand_alloc_bytes);
	NUM("free_track_allocations", c->free_track_allocations);
	NUM("free_track_backtrace_num_frames", c->free_track_backtrace_num_frames);
	NUM("record_allocs_num_entries", c->record_allocs_num_entries);
	NUM("record_allocs_on_exit", c->record_allocs_on_exit);
#undef NUM
	if (strcmp(key, "backtrace_dump_prefix") == 0)
		return c->backtrace_dump_prefix;
	if (strcmp(key, "record_allocs_file") == 0)
		return c->record_allocs_file;
	return NULL;
}

int main(int argc, char **argv)
{
	static char line[65536], opts[65536], err[MD_ERR_MAX];
	static struct md_config cfg;
	int passed = 0, failed = 0, lineno = 0, have_opts = 0, opts_line = 0;
	FILE *f;

	if (argc != 2) {
		fprintf(stderr, "usage: %s CASEFILE\n", argv[0]);
		return 2;
	}
	f = fopen(argv[1], "r");
	if (f == NULL) {
		perror(argv[1]);
		return 2;
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		size_t n = strlen(line);

		lineno++;
		if (n > 0 && line[n - 1] == '\n')
			line[--n] = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		if (strncmp(line, "options: ", 9) == 0) {
			char *first = strchr(line, '"'), *last = strrchr(line, '"');

			if (first == NULL || last == first) {
				printf("line %d: malformed options line\n", lineno);
				failed++;
				continue;
			}
			*last = '\0';
			unescape(first + 1, opts);
			have_opts = 1;
			opts_line = lineno;
			continue;
		}
		if (!have_opts) {
			printf("line %d: result without options\n", lineno);
			failed++;
			continue;
		}
		have_opts = 0;
		bool ok = md_config_parse(opts, &cfg, err, sizeof(err));
		if (strncmp(line, "error: ", 7) == 0) {
			if (ok) {
				printf("line %d: parse succeeded, want error \"%s\"\n", opts_line, line + 7);
				failed++;
			} else if (strcmp(err, line + 7) != 0) {
				printf("line %d: error \"%s\", want \"%s\"\n", opts_line, err, line + 7);
				failed++;
			} else {
				passed++;
			}
			continue;
		}
		if (strncmp(line, "ok:", 3) != 0) {
			printf("line %d: unknown result line\n", lineno);
			failed++;
			continue;
		}
		if (!ok) {
			printf("line %d: parse failed: %s\n", opts_line, err);
			failed++;
			continue;
		}
		int bad = 0;
		for (char *tok = strtok(line + 3, " "); tok != NULL; tok = strtok(NULL, " ")) {
			char *eq = strchr(tok, '='), buf[64];
			const char *got;

			if (eq == NULL) {
				printf("line %d: malformed key %s\n", lineno, tok);
				bad = 1;
				continue;
			}
			*eq = '\0';
			got = key_value(&cfg, tok, buf, sizeof(buf));
			if (got == NULL) {
				printf("line %d: unknown key %s\n", lineno, tok);
				bad = 1;
			} else if (strcmp(got, eq + 1) != 0) {
				printf("line %d: %s=%s, want %s\n", opts_line, tok, got, eq + 1);
				bad = 1;
			}
		}
		if (bad)
			failed++;
		else
			passed++;
	}
	fclose(f);
	printf("config cases: %d passed, %d failed\n", passed, failed);
	return failed == 0 ? 0 : 1;
}
