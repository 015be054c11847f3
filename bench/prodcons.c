/*
 * prodcons: producer -> consumer message passing, uslab against malloc in
 * the same process. Each pair is one producer thread that allocates
 * 256-byte messages, stamps them and hands them over a single-producer
 * single-consumer ring, and one consumer thread that checks and frees
 * them: every free is of another thread's object. Reported: nanoseconds
 * per message (wall time of the round over the messages of all pairs).
 *
 * uslab is reached through uslab_cache_alloc()/uslab_cache_free() of one
 * cache shared by all pairs; "malloc" is whatever malloc() the process
 * resolves (LD_PRELOAD a peer to measure it). Rounds alternate between the
 * two so that drifts of the machine hit both alike; each side reports the
 * median of its rounds. Threads are not pinned: with more pairs than CPUs
 * (4 pairs on 2 CPUs) the scheduler interleaves them, as it would a server.
 *
 *   prodcons [--pairs N] [--messages N] [--rounds N] [--quick]
 * Last line: RESULT pairs=N uslab=NS malloc=NS ratio=R malloc_lib=NAME
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "uslab.h"

#define MSG 256
#define RING 1024   /* a power of two */

struct ring {
	_Alignas(64) _Atomic uint64_t head;   /* consumer's */
	_Alignas(64) _Atomic uint64_t tail;   /* producer's */
	_Alignas(64) void *slot[RING];
};

struct pair {
	struct ring ring;
	unsigned long n;
	int use_uslab;
	uint64_t sum;
};

static struct uslab_cache *cache;

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void *producer(void *arg)
{
	struct pair *p = arg;
	struct ring *r = &p->ring;
	uint64_t t = 0;
	for (unsigned long i = 0; i < p->n; i++) {
		uint64_t *m = p->use_uslab ? uslab_cache_alloc(cache) : malloc(MSG);
		if (!m)
			abort();
		m[0] = i;
		m[MSG / 8 - 1] = ~i;
		/* wait for room (the consumer frees what it takes) */
		while (t - atomic_load_explicit(&r->head, memory_order_acquire) >= RING)
			sched_yield();
		r->slot[t % RING] = m;
		atomic_store_explicit(&r->tail, ++t, memory_order_release);
	}
	return NULL;
}

static void *consumer(void *arg)
{
	struct pair *p = arg;
	struct ring *r = &p->ring;
	uint64_t h = 0, sum = 0;
	for (unsigned long i = 0; i < p->n; i++) {
		while (atomic_load_explicit(&r->tail, memory_order_acquire) == h)
			sched_yield();
		uint64_t *m = r->slot[h % RING];
		if (m[0] != i || m[MSG / 8 - 1] != ~i)
			abort();
		sum += m[0];
		if (p->use_uslab)
			uslab_cache_free(cache, m);
		else
			free(m);
		atomic_store_explicit(&r->head, ++h, memory_order_release);
	}
	p->sum = sum;
	return NULL;
}

/* One round: `pairs` pairs, n messages each; ns per message. */
static double round_ns(unsigned pairs, unsigned long n, int use_uslab)
{
	struct pair *ps = aligned_alloc(64, pairs * sizeof *ps);
	pthread_t *t = calloc(2 * pairs, sizeof *t);
	if (!ps || !t)
		abort();
	memset(ps, 0, pairs * sizeof *ps);
	double t0 = now_ns();
	for (unsigned i = 0; i < pairs; i++) {
		ps[i].n = n;
		ps[i].use_uslab = use_uslab;
		if (pthread_create(&t[2 * i], NULL, consumer, &ps[i]) || pthread_create(&t[2 * i + 1], NULL, producer, &ps[i]))
			abort();
	}
	for (unsigned i = 0; i < 2 * pairs; i++)
		pthread_join(t[i], NULL);
	double ns = (now_ns() - t0) / ((double)n * pairs);
	free(t);
	free(ps);
	return ns;
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

static const char *malloc_lib(void)
{
	Dl_info di;
	void *sym = dlsym(RTLD_DEFAULT, "malloc");
	if (sym && dladdr(sym, &di) && di.dli_fname) {
		const char *s = strrchr(di.dli_fname, '/');
		return s ? s + 1 : di.dli_fname;
	}
	return "?";
}

int main(int argc, char **argv)
{
	unsigned pairs = 1, rounds = 7;
	unsigned long msgs = 2000000;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			rounds = 3;
			msgs = 200000;
		} else if (i + 1 < argc && !strcmp(argv[i], "--pairs")) {
			pairs = (unsigned)strtoul(argv[++i], NULL, 10);
		} else if (i + 1 < argc && !strcmp(argv[i], "--messages")) {
			msgs = strtoul(argv[++i], NULL, 10);
		} else if (i + 1 < argc && !strcmp(argv[i], "--rounds")) {
			rounds = (unsigned)strtoul(argv[++i], NULL, 10);
		} else {
			fprintf(stderr, "usage: prodcons [--pairs N] [--messages N per pair] [--rounds N] [--quick]\n");
			return 2;
		}
	}
	if (!pairs || !msgs || !rounds || rounds > 100)
		return 2;
	cache = uslab_cache_create("bench-msg", MSG, 0, 0, NULL);
	if (!cache)
		return 1;
	double *u = calloc(rounds, sizeof *u), *m = calloc(rounds, sizeof *m);
	round_ns(pairs, msgs / 10 + 1, 1);   /* warm up both */
	round_ns(pairs, msgs / 10 + 1, 0);
	for (unsigned r = 0; r < rounds; r++) {
		if (r % 2) {
			m[r] = round_ns(pairs, msgs, 0);
			u[r] = round_ns(pairs, msgs, 1);
		} else {
			u[r] = round_ns(pairs, msgs, 1);
			m[r] = round_ns(pairs, msgs, 0);
		}
	}
	double mu = median(u, rounds), mm = median(m, rounds);
	printf("prodcons: %u pair(s), %lu messages of %d bytes each, %u rounds: uslab %.2f ns/msg, malloc (%s) %.2f ns/msg\n",
	       pairs, msgs, MSG, rounds, mu, malloc_lib(), mm);
	printf("RESULT pairs=%u uslab=%.3f malloc=%.3f ratio=%.4f malloc_lib=%s\n", pairs, mu, mm, mu / mm, malloc_lib());
	uslab_cache_destroy(cache);
	free(u);
	free(m);
	return 0;
}
