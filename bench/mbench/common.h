/*
 * Shared helpers of the mbench workloads: plain malloc/free programs (no
 * uslab call), so that any malloc can be measured under LD_PRELOAD. Each
 * prints one line "name: checksum N" so that runs can be compared.
 */
#ifndef MBENCH_COMMON_H
#define MBENCH_COMMON_H
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Log-uniform size in [lo, hi]: as many small as large blocks by octave. */
static inline size_t rnd_size(uint64_t *s, size_t lo, size_t hi)
{
	unsigned lb = 63 - __builtin_clzll(lo), hb = 63 - __builtin_clzll(hi);
	unsigned b = lb + (unsigned)(rnd(s) % (hb - lb + 1));
	size_t base = (size_t)1 << b;
	size_t v = base + rnd(s) % base;
	return v < lo ? lo : v > hi ? hi : v;
}

static inline void *xmalloc(size_t n)
{
	void *p = malloc(n);
	if (!p) {
		fprintf(stderr, "out of memory (%zu bytes)\n", n);
		exit(1);
	}
	return p;
}

static inline long arg_or(int argc, char **argv, int i, long def)
{
	return argc > i ? atol(argv[i]) : def;
}
#endif
