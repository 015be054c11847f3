/*
 * largealloc: blocks of 64 KiB .. 64 MiB (log-uniform), LIVE of them at a
 * time, each replaced OPS times; every page of a new block is written once
 * (as a program filling a buffer would). Allocators that unmap freed
 * blocks at once pay a page fault per page on every reuse.
 *
 *   largealloc [OPS=3000] [LIVE=8] [MINSIZE=65536] [MAXSIZE=67108864]
 */
#include "common.h"

int main(int argc, char **argv)
{
	long ops = arg_or(argc, argv, 1, 3000);
	long live = arg_or(argc, argv, 2, 8);
	size_t lo = (size_t)arg_or(argc, argv, 3, 65536), hi = (size_t)arg_or(argc, argv, 4, 64L << 20);
	uint64_t seed = 7, sum = 0;
	char **v = calloc((size_t)live, sizeof *v);
	for (long i = 0; i < ops; i++) {
		size_t k = rnd(&seed) % (size_t)live;
		free(v[k]);
		size_t n = rnd_size(&seed, lo, hi);
		char *p = xmalloc(n);
		for (size_t off = 0; off < n; off += 4096)
			p[off] = (char)off;
		p[n - 1] = 1;
		sum += n;
		v[k] = p;
	}
	for (long k = 0; k < live; k++)
		free(v[k]);
	printf("largealloc: checksum %llu\n", (unsigned long long)sum);
	return 0;
}
