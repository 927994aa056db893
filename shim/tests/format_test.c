// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Tests of md_format and md_vformat (shim/format.c) against the C library's
 * snprintf: every conversion, length modifier, flag, width and precision
 * the shim supports, extreme values, and truncation at several buffer
 * sizes, each compared byte for byte, return value included, with the
 * bytes past the output left untouched. Prints each failure and a count;
 * exits 1 on any failure.
 *
 * Build: cc -o format_test shim/tests/format_test.c shim/format.c
 */
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "../format.h"

#define BUF 1400
#define SENTINEL 0x5a

static int cases, failures;

/* Buffer sizes each case is formatted into; the last is the whole buffer. */
static const size_t sizes[] = { 0, 1, 2, 3, 5, 8, 13, 32, 100, BUF };

static void show(const char *label, const char *s, size_t n)
{
	fprintf(stderr, "    %s \"", label);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
			fputc(c, stderr);
		else
			fprintf(stderr, "\\x%02x", c);
	}
	fprintf(stderr, "\"\n");
}

/* vcheck formats fmt with both implementations at every size and compares. */
static void vcheck(const char *fmt, va_list ap)
{
	static char want[BUF], got[BUF];
	bool ok = true;

	cases++;
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t len = sizes[k];
		va_list a1, a2;
		int rw, rg;

		memset(want, SENTINEL, sizeof(want));
		memset(got, SENTINEL, sizeof(got));
		va_copy(a1, ap);
		va_copy(a2, ap);
		rw = vsnprintf(want, len, fmt, a1);
		rg = md_vformat(got, len, fmt, a2);
		va_end(a1);
		va_end(a2);
		if (rw != rg || memcmp(want, got, sizeof(want)) != 0) {
			size_t n = rw >= 0 && (size_t)rw + 1 < len ? (size_t)rw + 1 : len;

			fprintf(stderr, "FAIL format \"%s\" size %zu: returned %d, want %d\n", fmt, len,
				rg, rw);
			show("got ", got, n + 2 < BUF ? n + 2 : n);
			show("want", want, n + 2 < BUF ? n + 2 : n);
			ok = false;
			break;
		}
	}
	if (!ok)
		failures++;
}

/* check compares one format with its arguments. */
static void check(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vcheck(fmt, ap);
	va_end(ap);
}

/*
 * expect compares md_vformat's output with a fixed string, for formats the
 * C library treats differently or does not define. fmt need not be a
 * literal, so no format attribute here.
 */
static void expect(const char *want, const char *fmt, ...)
{
	char got[BUF];
	va_list ap;
	int r;

	cases++;
	va_start(ap, fmt);
	r = md_vformat(got, sizeof(got), fmt, ap);
	va_end(ap);
	if (r != (int)strlen(want) || strcmp(got, want) != 0) {
		fprintf(stderr, "FAIL format \"%s\": returned %d, want %zu\n", fmt, r, strlen(want));
		show("got ", got, strlen(got));
		show("want", want, strlen(want));
		failures++;
	}
}

static const char *const flag_sets[] = { "", "-", "0", "+", " ", "#", "-0", "+0", " 0",
					 "#0", "-#", "-+", "+ ", "0-+" };
static const char *const widths[] = { "", "1", "4", "12", "25" };
static const char *const precs[] = { "", ".", ".0", ".1", ".3", ".12", ".30" };

/* check_int runs one integer format with v converted to the type of len. */
static void check_int(const char *fmt, const char *len, char conv, long long v)
{
	bool sgn = conv == 'd' || conv == 'i';

	if (strcmp(len, "hh") == 0 || strcmp(len, "h") == 0 || len[0] == '\0')
		check(fmt, (int)v);
	else if (strcmp(len, "l") == 0)
		sgn ? check(fmt, (long)v) : check(fmt, (unsigned long)v);
	else if (strcmp(len, "ll") == 0)
		sgn ? check(fmt, v) : check(fmt, (unsigned long long)v);
	else if (strcmp(len, "j") == 0)
		sgn ? check(fmt, (intmax_t)v) : check(fmt, (uintmax_t)v);
	else if (strcmp(len, "z") == 0)
		sgn ? check(fmt, (ssize_t)v) : check(fmt, (size_t)v);
	else if (strcmp(len, "t") == 0)
		check(fmt, (ptrdiff_t)v);
}

/* Every flag, width and precision combination for the integer conversions. */
static void integer_matrix(void)
{
	static const char *const lens[] = { "", "hh", "h", "l", "ll", "j", "z", "t" };
	static const char convs[] = "diuoxX";
	static const long long values[] = { 0, 1, -1, 7, 42, -42, 255, 256, -129, 300, 65535,
					    70000, INT_MAX, INT_MIN, 0xdeadbeefLL, LLONG_MAX,
					    LLONG_MIN };
	char fmt[64];

	for (size_t c = 0; convs[c] != '\0'; c++) {
		for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
			for (size_t f = 0; f < sizeof(flag_sets) / sizeof(flag_sets[0]); f++) {
				/* '#' is defined for o, x and X only. */
				if (strchr(flag_sets[f], '#') && strchr("oxX", convs[c]) == NULL)
					continue;
				for (size_t w = 0; w < sizeof(widths) / sizeof(widths[0]); w++) {
					for (size_t p = 0; p < sizeof(precs) / sizeof(precs[0]); p++) {
						snprintf(fmt, sizeof(fmt), "<%%%s%s%s%s%c>", flag_sets[f],
							 widths[w], precs[p], lens[l], convs[c]);
						for (size_t v = 0; v < sizeof(values) / sizeof(values[0]); v++)
							check_int(fmt, lens[l], convs[c], values[v]);
					}
				}
			}
		}
	}
}

/* Strings and characters with widths, precisions and left alignment. */
static void string_matrix(void)
{
	static const char *const strs[] = { "", "a", "hello", "a somewhat longer string, 34 bytes" };
	static const char *const sflags[] = { "", "-" };
	char fmt[64];

	for (size_t f = 0; f < sizeof(sflags) / sizeof(sflags[0]); f++) {
		for (size_t w = 0; w < sizeof(widths) / sizeof(widths[0]); w++) {
			for (size_t p = 0; p < sizeof(precs) / sizeof(precs[0]); p++) {
				snprintf(fmt, sizeof(fmt), "[%%%s%s%ss]", sflags[f], widths[w], precs[p]);
				for (size_t s = 0; s < sizeof(strs) / sizeof(strs[0]); s++)
					check(fmt, strs[s]);
			}
			snprintf(fmt, sizeof(fmt), "[%%%s%sc]", sflags[f], widths[w]);
			check(fmt, 'x');
			check(fmt, 0);
			check(fmt, 0xe9);
			check(fmt, 'A' + 256);
		}
	}
}

/* Pointers, NULL included, with widths and left alignment. */
static void pointer_matrix(void)
{
	static const char *const pflags[] = { "", "-" };
	static const char *const pwidths[] = { "", "1", "5", "8", "20" };
	int local;
	void *ptrs[] = { NULL, (void *)1, (void *)0x1234, (void *)0xabcdef, &local,
			 (void *)UINTPTR_MAX, (void *)(UINTPTR_MAX / 2 + 1) };
	char fmt[64];

	for (size_t f = 0; f < sizeof(pflags) / sizeof(pflags[0]); f++) {
		for (size_t w = 0; w < sizeof(pwidths) / sizeof(pwidths[0]); w++) {
			snprintf(fmt, sizeof(fmt), "(%%%s%sp)", pflags[f], pwidths[w]);
			for (size_t i = 0; i < sizeof(ptrs) / sizeof(ptrs[0]); i++)
				check(fmt, ptrs[i]);
		}
	}
}

/* The formats the shim's own code uses, with typical arguments. */
static void shim_formats(void)
{
	int local;

	check("%02d-%02d %02ld:%02ld:%02ld.%03ld %5d %5d %c malloc_debug: ", 3, 7, 9L, 5L, 59L, 7L,
	      1234, 123456, 'E');
	check("%02d-%02d %02ld:%02ld:%02ld.%03ld %5d %5d %c malloc_debug: ", 12, 31, 23L, 59L, 59L,
	      999L, 1, 4194304, 'I');
	check("          #%02zd  pc %016lx  %s (%s+%lu)", (ssize_t)3, 0x1234UL, "/usr/lib/libc.so.6",
	      "__libc_start_main", 128UL);
	check("          #%02zd  pc %016lx  %s", (ssize_t)123, ~0UL, "<unknown>");
	check("%s: %s", "prog", "bad value for option 'guard'");
	check("+++ ALLOCATION %p %s", (void *)&local, "USED AFTER FREE (free)");
	check("+++ ALLOCATION %p SIZE %zu HAS A CORRUPTED %s GUARD", (void *)&local, (size_t)100,
	      "FRONT");
	check("  allocation[%d] = 0x%02x (expected 0x%02x)", -15, 0x2, 0xaa);
	check("  allocation[%zu] = 0x%02x (expected 0x%02x)", (size_t)8191, 0, 0xef);
	check("+++ ALLOCATION 0x%lx HAS CORRUPTED HEADER TAG 0x%x AFTER FREE", 0x7f00deadbeefUL,
	      0x1cc7dc00U);
	check("HAS INVALID TAG %x (%s)", 0x1ee7d000U, "malloc_usable_size");
	check("bad value for option '%s', value must be <= %zu: %ld", "guard", (size_t)16384, 99999L);
	check("bad value for option '%s', value must be >= %zu: %ld", "bt", (size_t)1, 0L);
	check("bad value for option '%s', value cannot be negative: %ld", "fill", LONG_MIN);
	check("unknown option %s", "bogus");
}

/* Extreme values, '*' widths and precisions, and plain text. */
static void edge_cases(void)
{
	char long_str[1200];

	check("");
	check("plain text, no conversions");
	check("100%% sure, %%d");
	check("%d %d %d", INT_MIN, INT_MAX, 0);
	check("%i|%12i|%-12i|%012i", INT_MIN, INT_MIN, INT_MIN, INT_MIN);
	check("%lld %lld", LLONG_MIN, LLONG_MAX);
	check("%25lld|%-25lld|%025lld|%+lld", LLONG_MIN, LLONG_MIN, LLONG_MIN, LLONG_MAX);
	check("%ld %lu %lx", LONG_MIN, ULONG_MAX, ULONG_MAX);
	check("%zu %zx %zX %zd", SIZE_MAX, SIZE_MAX, SIZE_MAX, (ssize_t)-1);
	check("%jd %ju %jx", INTMAX_MIN, UINTMAX_MAX, UINTMAX_MAX);
	check("%td %tx", PTRDIFF_MIN, (ptrdiff_t)-1);
	check("%llu %llx %llo %#llo %#llx", ULLONG_MAX, ULLONG_MAX, ULLONG_MAX, ULLONG_MAX, ULLONG_MAX);
	check("%u %x %X %o", UINT_MAX, UINT_MAX, UINT_MAX, UINT_MAX);
	check("%hhd %hhu %hhx %hd %hu %hx", 0x17f, 0x1ff, -1, 0x18000, 0x1ffff, -1);
	check("%hhi %hi", SCHAR_MIN, SHRT_MIN);
	check("%*d|%-*d|%*d", 6, 42, 6, 42, -6, 42);
	check("%.*d|%.*d|%.*d", 5, 42, 0, 0, -3, 7);
	check("%*.*d|%-*.*x", 8, 4, -12, 9, 3, 0xab);
	check("%.*s|%.*s|%.*s", 3, "abcdef", 0, "abc", -1, "abcdef");
	check("%*.*s|%-*.*s|", 7, 2, "xyz", -7, 2, "xyz");
	check("%s%c%s", "ab", 'c', "de");
	/* The precision bounds the read: no NUL is needed within it. */
	check("%.3s|", (const char[]){ 'a', 'b', 'c' });
	check("%.0s|%.2s", (const char[]){ 'x' }, (const char[]){ 'y', 'z' });
	memset(long_str, 'q', sizeof(long_str) - 1);
	long_str[sizeof(long_str) - 1] = '\0';
	check("%s", long_str);
	check("%s|%s", long_str, long_str + 100);
	check("%300d|%-300x|%.300u", 1, 2U, 3U);
	check("%p %p %p", (void *)0, (void *)16, (void *)-1);
	check("%c%c%c", 'a', 0, 'b');
}

/* What the formatter defines beyond the C library, and glibc's NULL strings. */
static void literal_cases(void)
{
	const char *volatile null_str = NULL;
	char buf[8];

	expect("(null)", "%s", null_str);
	expect("[    (null)]", "[%10s]", null_str);
	expect("[(null)  ]", "[%-8s]", null_str);
	expect("[]", "[%.3s]", null_str);
	expect("[]", "[%.5s]", null_str);
	expect("[(null)]", "[%.6s]", null_str);
	expect("(nil)", "%p", (void *)0);
	expect("[     (nil)]", "[%10p]", (void *)0);
	expect("[(nil)  ]", "[%-7p]", (void *)0);
	expect("0x1234", "%p", (void *)0x1234);
	expect("%y", "%y", 1);
	expect("a%5yb", "a%5yb", 1);
	expect("%-", "%-");
	expect("abc%", "abc%");
	expect("abc%ll", "abc%ll");
	expect("%f %e %g", "%f %e %g");
	expect("%ls|7", "%ls|%d", 7);
	expect("%lc|x", "%lc|%s", "x");
	expect("%n|1", "%n|%d", 1);
	expect("%", "%%");
	expect("%%", "%%%%");

	/* NUL termination and return values at the edges. */
	cases++;
	memset(buf, SENTINEL, sizeof(buf));
	if (md_format(NULL, 0, "%d", 12345) != 5 || md_format(buf, 0, "%s", "abc") != 3 ||
	    buf[0] != SENTINEL || md_format(buf, 1, "%s", "abc") != 3 || buf[0] != '\0' ||
	    buf[1] != SENTINEL || md_format(buf, 4, "%s", "abcdef") != 6 ||
	    memcmp(buf, "abc\0", 4) != 0 || buf[4] != SENTINEL) {
		fprintf(stderr, "FAIL NUL termination and return values at the buffer edges\n");
		failures++;
	}
}

int main(void)
{
	integer_matrix();
	string_matrix();
	pointer_matrix();
	shim_formats();
	edge_cases();
	literal_cases();
	printf("format: %d cases, %d failed\n", cases, failures);
	return failures == 0 ? 0 : 1;
}
