/*
 * Messages without allocation: a small printf subset into caller buffers,
 * and the one-line report/fatal paths that write(2) to stderr. Safe from any
 * thread while other threads hold allocator locks (takes none itself).
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct out {
	char *buf;
	size_t size, len;
};

static void put(struct out *o, char c)
{
	if (o->len + 1 < o->size)
		o->buf[o->len] = c;
	o->len++;
}

static void put_padded(struct out *o, const char *s, size_t n, int width, bool left, char pad)
{
	int fill = width > (int)n ? width - (int)n : 0;
	if (!left)
		while (fill-- > 0)
			put(o, pad);
	for (size_t i = 0; i < n; i++)
		put(o, s[i]);
	if (left)
		while (fill-- > 0)
			put(o, ' ');
}

static size_t utoa(char *tmp, unsigned long long v, unsigned base)
{
	size_t n = 0;
	do {
		unsigned d = (unsigned)(v % base);
		tmp[n++] = (char)(d < 10 ? '0' + d : 'a' + d - 10);
		v /= base;
	} while (v);
	for (size_t i = 0; i < n / 2; i++) {
		char t = tmp[i];
		tmp[i] = tmp[n - 1 - i];
		tmp[n - 1 - i] = t;
	}
	return n;
}

size_t fmt_vbuf(char *buf, size_t size, const char *f, va_list ap)
{
	struct out o = { buf, size, 0 };
	char tmp[32];
	for (; *f; f++) {
		if (*f != '%') {
			put(&o, *f);
			continue;
		}
		f++;
		bool left = false;
		char pad = ' ';
		if (*f == '-') { left = true; f++; }
		if (*f == '0') { pad = '0'; f++; }
		int width = 0;
		while (*f >= '0' && *f <= '9')
			width = width * 10 + (*f++ - '0');
		int lng = 0;
		while (*f == 'l') { lng++; f++; }
		if (*f == 'z') { lng = 1; f++; }
		switch (*f) {
		case 's': {
			const char *s = va_arg(ap, const char *);
			if (!s)
				s = "(null)";
			put_padded(&o, s, strlen(s), width, left, ' ');
			break;
		}
		case 'c': {
			char c = (char)va_arg(ap, int);
			put_padded(&o, &c, 1, width, left, ' ');
			break;
		}
		case 'd': {
			long long v = lng ? (lng == 1 ? va_arg(ap, long) : va_arg(ap, long long)) : va_arg(ap, int);
			size_t n = 0;
			unsigned long long u = (unsigned long long)v;
			if (v < 0) {
				tmp[n++] = '-';
				u = -u;
			}
			n += utoa(tmp + n, u, 10);
			put_padded(&o, tmp, n, width, left, pad);
			break;
		}
		case 'u':
		case 'x': {
			unsigned long long v = lng ? (lng == 1 ? va_arg(ap, unsigned long) : va_arg(ap, unsigned long long))
						   : va_arg(ap, unsigned);
			size_t n = utoa(tmp, v, *f == 'x' ? 16 : 10);
			put_padded(&o, tmp, n, width, left, pad);
			break;
		}
		case 'p': {
			tmp[0] = '0';
			tmp[1] = 'x';
			size_t n = 2 + utoa(tmp + 2, (uintptr_t)va_arg(ap, void *), 16);
			put_padded(&o, tmp, n, width, left, ' ');
			break;
		}
		case '%':
			put(&o, '%');
			break;
		default:
			if (!*f)
				f--;
			break;
		}
	}
	if (size)
		buf[o.len < size ? o.len : size - 1] = 0;
	return o.len < size ? o.len : (size ? size - 1 : 0);
}

size_t fmt_buf(char *buf, size_t size, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	size_t n = fmt_vbuf(buf, size, fmt, ap);
	va_end(ap);
	return n;
}

static void write_all(int fd, const char *s, size_t n)
{
	while (n) {
		ssize_t w = write(fd, s, n);
		if (w <= 0) {
			if (w < 0 && errno == EINTR)
				continue;
			return;
		}
		s += w;
		n -= (size_t)w;
	}
}

static void vreport(const char *prefix, const char *fmt, va_list ap)
{
	char line[512];
	int e = errno;
	size_t n = fmt_buf(line, sizeof line, "%s", prefix);
	n += fmt_vbuf(line + n, sizeof line - n - 1, fmt, ap);
	line[n++] = '\n';
	write_all(2, line, n);   /* one write: lines from threads do not interleave */
	errno = e;
}

void report_line(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vreport("uslab: ", fmt, ap);
	va_end(ap);
}

void report_fatal(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vreport("uslab: fatal: ", fmt, ap);
	va_end(ap);
	abort();
}
