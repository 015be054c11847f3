/*
 * larson: a server simulation after Larson and Krishnan (1998), as in
 * mimalloc-bench. Each round, THREADS threads start; each takes over the
 * slot array of a thread of the previous round (so it frees blocks other
 * threads allocated), replaces random slots with blocks of random size
 * (8 .. MAXSIZE bytes) OPS times, and exits, leaving its array to the next
 * round.
 *
 *   larson [THREADS=2] [ROUNDS=20] [OPS=200000] [SLOTS=2000] [MAXSIZE=1000]
 */
#include "common.h"

static long nthreads, rounds, ops, nslots, maxsize;

/* One cache line (two, for adjacent-line prefetch) per thread's state:
 * adjacent states would share a line, and the false sharing in the
 * harness would then depend on where the allocator put this array. */
struct arr {
	void **slot;
	uint64_t seed, sum;
} __attribute__((aligned(128)));

static void *worker(void *arg)
{
	struct arr *a = arg;
	for (long i = 0; i < ops; i++) {
		size_t k = rnd(&a->seed) % (size_t)nslots;
		free(a->slot[k]);
		size_t n = 8 + rnd(&a->seed) % (size_t)(maxsize - 7);
		char *p = xmalloc(n);
		p[0] = (char)n;
		p[n - 1] = (char)i;
		a->sum += (unsigned char)p[0];
		a->slot[k] = p;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	nthreads = arg_or(argc, argv, 1, 2);
	rounds = arg_or(argc, argv, 2, 20);
	ops = arg_or(argc, argv, 3, 200000);
	nslots = arg_or(argc, argv, 4, 2000);
	maxsize = arg_or(argc, argv, 5, 1000);
	struct arr *arrs = aligned_alloc(128, (size_t)nthreads * sizeof *arrs);
	if (arrs)
		memset(arrs, 0, (size_t)nthreads * sizeof *arrs);
	pthread_t *t = calloc((size_t)nthreads, sizeof *t);
	for (long i = 0; i < nthreads; i++) {
		arrs[i].slot = calloc((size_t)nslots, sizeof(void *));
		arrs[i].seed = (uint64_t)i + 1;
	}
	for (long r = 0; r < rounds; r++) {
		for (long i = 0; i < nthreads; i++)
			pthread_create(&t[i], NULL, worker, &arrs[(i + r) % nthreads]);
		for (long i = 0; i < nthreads; i++)
			pthread_join(t[i], NULL);
		/* hand each array to another thread next round: rotate */
	}
	uint64_t sum = 0;
	for (long i = 0; i < nthreads; i++) {
		for (long k = 0; k < nslots; k++)
			free(arrs[i].slot[k]);
		free(arrs[i].slot);
		sum += arrs[i].sum;
	}
	printf("larson: checksum %llu\n", (unsigned long long)sum);
	free(arrs);
	free(t);
	return 0;
}
