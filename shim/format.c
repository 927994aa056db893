// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * An async-signal-safe subset of snprintf for the log lines and option
 * errors: no stdio, no locale, no heap, no errno, only the caller's buffer
 * and the stack. It may run inside malloc and inside signal handlers.
 *
 * Supported: %d %i %u %o %x %X %c %s %p %%, the length modifiers hh h l ll
 * j z t, the flags - 0 + space #, a width and a precision, each given as
 * digits or as '*'. The output is the same as glibc's snprintf for these,
 * including "(nil)" for a NULL %p and "(null)" for a NULL %s. Anything
 * else (floating point, %n, wide characters) is copied literally and takes
 * no argument.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "format.h"

/* Flag bits of one conversion. */
#define F_LEFT 0x1
#define F_ZERO 0x2
#define F_PLUS 0x4
#define F_SPACE 0x8
#define F_ALT 0x10

/* Width and precision beyond this are cut, so the counts cannot overflow. */
#define FIELD_MAX 100000

/* Length modifiers. */
enum len_mod { LEN_NONE, LEN_HH, LEN_H, LEN_L, LEN_LL, LEN_J, LEN_Z, LEN_T };

/* out is the destination: bytes past len - 1 are counted but not stored. */
struct out {
	char *buf;
	size_t len;
	size_t pos;
};

static void put(struct out *o, char c)
{
	if (o->pos + 1 < o->len)
		o->buf[o->pos] = c;
	o->pos++;
}

static void put_n(struct out *o, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		put(o, s[i]);
}

static void pad(struct out *o, char c, int n)
{
	while (n-- > 0)
		put(o, c);
}

/* field writes s[0..n) in a field of width characters, padded with spaces. */
static void field(struct out *o, const char *s, size_t n, int width, int flags)
{
	int fill = (size_t)width > n ? width - (int)n : 0;

	if (!(flags & F_LEFT))
		pad(o, ' ', fill);
	put_n(o, s, n);
	if (flags & F_LEFT)
		pad(o, ' ', fill);
}

/*
 * number writes one integer conversion. neg tells that the value is
 * negative and u is its magnitude. prec is -1 when no precision was given.
 */
static void number(struct out *o, uintmax_t u, bool neg, char conv, int width, int prec, int flags)
{
	const char *digits = conv == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
	unsigned base = conv == 'o' ? 8 : (conv == 'x' || conv == 'X' || conv == 'p') ? 16 : 10;
	/* "0x" before a pointer, and before a non-zero %#x. */
	bool hex_prefix = conv == 'p' || ((flags & F_ALT) && (conv == 'x' || conv == 'X') && u != 0);
	char tmp[sizeof(uintmax_t) * 3];
	char prefix[3];
	int nd = 0, np = 0, zeros, fill, total;

	while (u != 0) {
		tmp[sizeof(tmp) - 1 - nd++] = digits[u % base];
		u /= base;
	}
	/* Without a precision there is at least one digit; ".0" prints none for 0. */
	if (prec < 0 && nd == 0)
		tmp[sizeof(tmp) - 1 - nd++] = '0';
	if (neg)
		prefix[np++] = '-';
	else if ((conv == 'd' || conv == 'i' || conv == 'p') && (flags & F_PLUS))
		prefix[np++] = '+';
	else if ((conv == 'd' || conv == 'i' || conv == 'p') && (flags & F_SPACE))
		prefix[np++] = ' ';
	if (hex_prefix) {
		prefix[np++] = '0';
		prefix[np++] = conv == 'X' ? 'X' : 'x';
	}
	zeros = prec > nd ? prec - nd : 0;
	/* %#o makes the first digit a zero. */
	if ((flags & F_ALT) && conv == 'o' && zeros == 0 && (nd == 0 || tmp[sizeof(tmp) - nd] != '0'))
		zeros = 1;
	total = np + zeros + nd;
	fill = width > total ? width - total : 0;
	if ((flags & F_ZERO) && !(flags & F_LEFT) && prec < 0) {
		zeros += fill;
		fill = 0;
	}
	if (!(flags & F_LEFT))
		pad(o, ' ', fill);
	put_n(o, prefix, (size_t)np);
	pad(o, '0', zeros);
	put_n(o, tmp + sizeof(tmp) - nd, (size_t)nd);
	if (flags & F_LEFT)
		pad(o, ' ', fill);
}

/* read_count reads a decimal width or precision, cut at FIELD_MAX. */
static int read_count(const char **fp)
{
	const char *f = *fp;
	int n = 0;

	while (*f >= '0' && *f <= '9') {
		if (n < FIELD_MAX)
			n = n * 10 + (*f - '0');
		f++;
	}
	*fp = f;
	return n > FIELD_MAX ? FIELD_MAX : n;
}

int md_vformat(char *buf, size_t len, const char *fmt, va_list ap)
{
	struct out o = { .buf = buf, .len = len, .pos = 0 };
	const char *f = fmt;

	while (*f != '\0') {
		const char *spec = f;
		enum len_mod lm = LEN_NONE;
		int flags = 0, width = 0, prec = -1;
		uintmax_t u;
		bool neg = false;
		char conv;

		if (*f != '%') {
			put(&o, *f++);
			continue;
		}
		f++;
		for (;; f++) {
			if (*f == '-')
				flags |= F_LEFT;
			else if (*f == '0')
				flags |= F_ZERO;
			else if (*f == '+')
				flags |= F_PLUS;
			else if (*f == ' ')
				flags |= F_SPACE;
			else if (*f == '#')
				flags |= F_ALT;
			else
				break;
		}
		if (*f == '*') {
			width = va_arg(ap, int);
			f++;
			if (width < 0) {
				flags |= F_LEFT;
				width = width == INT_MIN ? FIELD_MAX : -width;
			}
			if (width > FIELD_MAX)
				width = FIELD_MAX;
		} else {
			width = read_count(&f);
		}
		if (*f == '.') {
			f++;
			if (*f == '*') {
				prec = va_arg(ap, int);
				f++;
				/* A negative precision counts as none. */
				if (prec < 0)
					prec = -1;
				else if (prec > FIELD_MAX)
					prec = FIELD_MAX;
			} else {
				prec = read_count(&f);
			}
		}
		switch (*f) {
		case 'h':
			lm = f[1] == 'h' ? LEN_HH : LEN_H;
			f += lm == LEN_HH ? 2 : 1;
			break;
		case 'l':
			lm = f[1] == 'l' ? LEN_LL : LEN_L;
			f += lm == LEN_LL ? 2 : 1;
			break;
		case 'j':
			lm = LEN_J;
			f++;
			break;
		case 'z':
			lm = LEN_Z;
			f++;
			break;
		case 't':
			lm = LEN_T;
			f++;
			break;
		}
		conv = *f;
		if (conv == '\0') {
			/* A conversion cut by the end of the format is copied as written. */
			put_n(&o, spec, (size_t)(f - spec));
			break;
		}
		f++;
		switch (conv) {
		case '%':
			put(&o, '%');
			break;
		case 'c':
			if (lm != LEN_NONE)
				goto unknown;
			{
				char c = (char)(unsigned char)va_arg(ap, int);

				field(&o, &c, 1, width, flags);
			}
			break;
		case 's':
			if (lm != LEN_NONE)
				goto unknown;
			{
				const char *s = va_arg(ap, const char *);
				size_t n = 0;

				if (s == NULL)
					s = prec < 0 || prec >= 6 ? "(null)" : "";
				/* With a precision, no byte past it is read. */
				while ((prec < 0 || n < (size_t)prec) && s[n] != '\0')
					n++;
				field(&o, s, n, width, flags);
			}
			break;
		case 'p':
			if (lm != LEN_NONE)
				goto unknown;
			u = (uintptr_t)va_arg(ap, void *);
			if (u == 0)
				field(&o, "(nil)", 5, width, flags);
			else
				number(&o, u, false, 'p', width, prec, flags);
			break;
		case 'd':
		case 'i': {
			intmax_t v;

			switch (lm) {
			case LEN_HH:
				v = (signed char)va_arg(ap, int);
				break;
			case LEN_H:
				v = (short)va_arg(ap, int);
				break;
			case LEN_L:
				v = va_arg(ap, long);
				break;
			case LEN_LL:
				v = va_arg(ap, long long);
				break;
			case LEN_J:
				v = va_arg(ap, intmax_t);
				break;
			case LEN_Z:
				v = va_arg(ap, ssize_t);
				break;
			case LEN_T:
				v = va_arg(ap, ptrdiff_t);
				break;
			default:
				v = va_arg(ap, int);
				break;
			}
			neg = v < 0;
			/* The magnitude is taken unsigned, so INT_MIN and LLONG_MIN work. */
			u = neg ? (uintmax_t)0 - (uintmax_t)v : (uintmax_t)v;
			number(&o, u, neg, conv, width, prec, flags);
			break;
		}
		case 'u':
		case 'o':
		case 'x':
		case 'X':
			switch (lm) {
			case LEN_HH:
				u = (unsigned char)va_arg(ap, unsigned int);
				break;
			case LEN_H:
				u = (unsigned short)va_arg(ap, unsigned int);
				break;
			case LEN_L:
				u = va_arg(ap, unsigned long);
				break;
			case LEN_LL:
				u = va_arg(ap, unsigned long long);
				break;
			case LEN_J:
				u = va_arg(ap, uintmax_t);
				break;
			case LEN_Z:
				u = va_arg(ap, size_t);
				break;
			case LEN_T:
				u = (uintmax_t)(size_t)va_arg(ap, ptrdiff_t);
				break;
			default:
				u = va_arg(ap, unsigned int);
				break;
			}
			number(&o, u, false, conv, width, prec, flags);
			break;
		default:
unknown:
			put_n(&o, spec, (size_t)(f - spec));
			break;
		}
	}
	if (len > 0)
		buf[o.pos < len ? o.pos : len - 1] = '\0';
	return o.pos > INT_MAX ? -1 : (int)o.pos;
}

int md_format(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = md_vformat(buf, len, fmt, ap);
	va_end(ap);
	return n;
}
