/*
 * handoff: threads that allocate, hand their objects to other threads and
 * exit. THREADS threads run at a time (8 on a 2-CPU machine: more threads
 * than CPUs), GENERATIONS times over: each thread allocates PER blocks of
 * 16..512 bytes (log-uniform), frees the blocks it finds in its slots of a
 * shared exchange (left there by threads of the generation before, most of
 * them exited by now), puts its own blocks there, and exits. So nearly every
 * free is of another thread's block, whose owner is gone or going, and
 * every generation starts with threads the allocator has not seen.
 *
 *   handoff [THREADS=8] [GENERATIONS=200] [PER=4000]
 */
#include "common.h"

static long threads, per;
static void **xchg;   /* threads * per slots; slot row i belongs to thread i of each generation */

struct arg {
	long id, gen;
};

static void *worker(void *p)
{
	struct arg *a = p;
	uint64_t seed = 0xba5eULL + 7919 * (uint64_t)(a->id + a->gen * threads), sum = 0;
	void **row = xchg + ((a->id + 1) % threads) * per;   /* the row of the next thread of the last generation */
	void **mine = xmalloc((size_t)per * sizeof *mine);
	for (long i = 0; i < per; i++) {
		size_t n = rnd_size(&seed, 16, 512);
		mine[i] = xmalloc(n);
		((char *)mine[i])[0] = (char)i;
	}
	for (long i = 0; i < per; i++) {
		void *old = __atomic_exchange_n(&row[i], mine[i], __ATOMIC_ACQ_REL);
		if (old) {
			sum += *(unsigned char *)old;
			free(old);
		}
	}
	free(mine);
	return (void *)(uintptr_t)sum;
}

int main(int argc, char **argv)
{
	threads = arg_or(argc, argv, 1, 8);
	long gens = arg_or(argc, argv, 2, 200);
	per = arg_or(argc, argv, 3, 4000);
	if (threads < 1 || gens < 1 || per < 1)
		return 2;
	xchg = calloc((size_t)(threads * per), sizeof *xchg);
	pthread_t *t = xmalloc((size_t)threads * sizeof *t);
	struct arg *a = xmalloc((size_t)threads * sizeof *a);
	if (!xchg)
		return 1;
	uint64_t sum = 0;
	for (long g = 0; g < gens; g++) {
		for (long i = 0; i < threads; i++) {
			a[i].id = i;
			a[i].gen = g;
			if (pthread_create(&t[i], NULL, worker, &a[i]))
				return 1;
		}
		for (long i = 0; i < threads; i++) {
			void *r;
			pthread_join(t[i], &r);
			sum += (uintptr_t)r;
		}
	}
	for (long i = 0; i < threads * per; i++)
		free(xchg[i]);
	free(xchg);
	free(t);
	free(a);
	printf("handoff: checksum %llu\n", (unsigned long long)sum);
	return 0;
}
