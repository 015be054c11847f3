/*
 * exp_bulk: the cost per object of uslab_cache_alloc_bulk + free_bulk of N
 * objects against the loop of N single allocs then N single frees, in the
 * manner of the kernel's slab_bulk_test01 (prototype-kernel, Jesper
 * Dangaard Brouer, 2015): one cache of 256-byte objects, one thread, for
 * bulk sizes 1 .. 250, time per object in ns.
 *
 *   exp_bulk [--objects N] [--reps N] [--size BYTES] [--csv]
 *
 * For each bulk size N, each of --reps rounds runs, one after the other:
 *   reuse   alloc+free of one object, total/1 times (slab_bulk_test01's
 *           "fastpath reuse" baseline: the cheapest possible pattern)
 *   single  N x uslab_cache_alloc, then N x uslab_cache_free, in the same
 *           order (the "fallback" a bulk API replaces), total/N times
 *   bulk    uslab_cache_alloc_bulk(N) then uslab_cache_free_bulk(N),
 *           total/N times
 * and reports the median over the rounds of ns per object (one object =
 * one alloc + one free). The cache is named "bulk-test", so that
 *   USLAB_OPTIONS="bulk-test:cpu_partial=256 bulk-test:min_partial=9"
 * reproduces the 2015 thread's tuning of skbuff_head_cache.
 *
 * Output: a table like slab_bulk_test01's, then with --csv one line per
 * size: "CSV bulk,N,reuse_ns,single_ns,bulk_ns".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "uslab.h"

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")
#define MAXN 256

static struct uslab_cache *cache;
static void *objs[MAXN];

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void die(const char *what)
{
	fprintf(stderr, "exp_bulk: %s: %s\n", what, strerror(errno));
	exit(1);
}

static __attribute__((noinline)) void run_reuse(unsigned long n)
{
	for (unsigned long i = 0; i < n; i++) {
		void *p = uslab_cache_alloc(cache);
		KEEP(p);
		uslab_cache_free(cache, p);
	}
}

static __attribute__((noinline)) void run_single(unsigned long loops, unsigned n)
{
	for (unsigned long l = 0; l < loops; l++) {
		for (unsigned i = 0; i < n; i++) {
			void *p = uslab_cache_alloc(cache);
			if (__builtin_expect(!p, 0))
				die("uslab_cache_alloc");
			objs[i] = p;
		}
		KEEP(objs);
		for (unsigned i = 0; i < n; i++)
			uslab_cache_free(cache, objs[i]);
	}
}

static __attribute__((noinline)) void run_bulk(unsigned long loops, unsigned n)
{
	for (unsigned long l = 0; l < loops; l++) {
		if (__builtin_expect(uslab_cache_alloc_bulk(cache, n, objs) != n, 0))
			die("uslab_cache_alloc_bulk");
		KEEP(objs);
		uslab_cache_free_bulk(cache, n, objs);
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, unsigned n)
{
	qsort(v, n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
	unsigned long total = 4000000;
	unsigned reps = 5;
	size_t size = 256;
	int csv = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--objects") && i + 1 < argc)
			total = strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = (unsigned)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--size") && i + 1 < argc)
			size = strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--csv"))
			csv = 1;
		else {
			fprintf(stderr, "usage: exp_bulk [--objects N] [--reps N] [--size BYTES] [--csv]\n");
			return 2;
		}
	}
	if (!total || !reps || reps > 64 || !size) {
		fprintf(stderr, "exp_bulk: bad arguments\n");
		return 2;
	}
	static const unsigned sizes[] = { 1, 2, 3, 4, 8, 16, 30, 32, 34, 48, 64, 128, 158, 250 };
	enum { NS = sizeof sizes / sizeof sizes[0] };

	cache = uslab_cache_create("bulk-test", size, 0, 0, NULL);
	if (!cache)
		die("uslab_cache_create");
	unsigned long cp = 0, mp = 0, order = 0;
	uslab_cache_tune_get(cache, "cpu_partial", &cp);
	uslab_cache_tune_get(cache, "min_partial", &mp);
	uslab_cache_tune_get(cache, "order", &order);
	printf("exp_bulk: %zu-byte objects, order %lu, cpu_partial %lu, min_partial %lu; %lu objects per "
	       "measurement, median of %u\n",
	       size, order, cp, mp, total, reps);
	/* warm up: slabs exist, pages touched */
	run_single(20, 250);
	run_bulk(20, 250);

	double reuse[NS], single[NS], bulk[NS];
	for (unsigned k = 0; k < NS; k++) {
		unsigned n = sizes[k];
		unsigned long loops = total / n;
		double r[64], s[64], b[64];
		for (unsigned rep = 0; rep < reps; rep++) {
			double t0 = now_ns();
			run_reuse(loops * n);
			double t1 = now_ns();
			run_single(loops, n);
			double t2 = now_ns();
			run_bulk(loops, n);
			double t3 = now_ns();
			r[rep] = (t1 - t0) / (double)(loops * n);
			s[rep] = (t2 - t1) / (double)(loops * n);
			b[rep] = (t3 - t2) / (double)(loops * n);
		}
		reuse[k] = median(r, reps);
		single[k] = median(s, reps);
		bulk[k] = median(b, reps);
	}
	printf("%6s | %12s | %14s | %12s | %11s | %13s\n", "bulk", "reuse ns/obj", "single ns/obj", "bulk ns/obj",
	       "bulk/single", "bulk/reuse");
	for (unsigned k = 0; k < NS; k++)
		printf("%6u | %12.2f | %14.2f | %12.2f | %11.3f | %13.3f\n", sizes[k], reuse[k], single[k], bulk[k],
		       bulk[k] / single[k], bulk[k] / reuse[k]);
	if (csv)
		for (unsigned k = 0; k < NS; k++)
			printf("CSV bulk,%u,%.3f,%.3f,%.3f\n", sizes[k], reuse[k], single[k], bulk[k]);
	struct uslab_cache_info in;
	memset(&in, 0, sizeof in);
	in.version = USLAB_CACHE_INFO_VERSION;
	if (uslab_cache_get_info(cache, &in) == 0)
		printf("stats: NODE_LOCK %llu, ALLOC_SLAB %llu, FREE_SLAB %llu, CPU_PARTIAL_ALLOC %llu, "
		       "CPU_PARTIAL_FREE %llu, ALLOC_FROM_PARTIAL %llu\n",
		       (unsigned long long)in.events[USLAB_STAT_NODE_LOCK],
		       (unsigned long long)in.events[USLAB_STAT_ALLOC_SLAB],
		       (unsigned long long)in.events[USLAB_STAT_FREE_SLAB],
		       (unsigned long long)in.events[USLAB_STAT_CPU_PARTIAL_ALLOC],
		       (unsigned long long)in.events[USLAB_STAT_CPU_PARTIAL_FREE],
		       (unsigned long long)in.events[USLAB_STAT_ALLOC_FROM_PARTIAL]);
	uslab_cache_destroy(cache);
	return 0;
}
