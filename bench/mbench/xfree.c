/*
 * xfree: random-order frees of long-lived blocks of random sizes, by the
 * thread that allocated them or by another. THREADS threads share one live
 * set of SLOTS blocks (8 .. MAXSIZE bytes, log-uniform), striped into
 * THREADS regions (slot k is in region k % THREADS). Each thread first
 * fills one region. Then, for ROUNDS rounds, every thread is dealt a region
 * (a permutation of the regions drawn anew each round from a seed all
 * threads share, so a thread gets its own region about 1/THREADS of the
 * time and another's otherwise) and replaces REPLACE random slots of it:
 * in batches of BATCH slots, it frees the blocks there (in random order;
 * the blocks were allocated rounds before, by any thread) and then
 * allocates new blocks into them. Nothing reads a block before freeing it,
 * so each free meets a cache-cold block. Rounds end at a barrier.
 *
 *   xfree [THREADS=2] [SLOTS=200000] [ROUNDS=40] [REPLACE=50000] [BATCH=256] [MAXSIZE=1024]
 */
#include "common.h"

static long nthreads, nslots, rounds, replace, batch, maxsize;
static char **slot;
static pthread_barrier_t barrier;

/* Round r's region of thread t: a permutation drawn from the round number,
 * the same in every thread. */
static long region_of(long r, long t)
{
	long perm[64];
	uint64_t s = 0x5eed0000ULL + (uint64_t)r;
	for (long i = 0; i < nthreads; i++)
		perm[i] = i;
	for (long i = nthreads - 1; i > 0; i--) {
		long j = (long)(rnd(&s) % (uint64_t)(i + 1)), x = perm[i];
		perm[i] = perm[j];
		perm[j] = x;
	}
	return perm[t];
}

static char *new_block(uint64_t *seed, uint64_t *sum)
{
	size_t n = rnd_size(seed, 8, (size_t)maxsize);
	char *p = xmalloc(n);
	p[0] = (char)n;
	p[n - 1] = (char)(n >> 3);
	*sum += n;
	return p;
}

static void *worker(void *arg)
{
	long t = (long)(uintptr_t)arg;
	uint64_t seed = 0x1234567ULL * (uint64_t)(t + 1), sum = 0;
	long per = nslots / nthreads;   /* slots per region */
	long *idx = xmalloc((size_t)batch * sizeof *idx);
	for (long k = 0; k < per; k++)
		slot[k * nthreads + t] = new_block(&seed, &sum);
	pthread_barrier_wait(&barrier);
	for (long r = 0; r < rounds; r++) {
		long reg = region_of(r, t);
		for (long done = 0; done < replace; done += batch) {
			long b = replace - done < batch ? replace - done : batch;
			for (long i = 0; i < b; i++) {
				long k = (long)(rnd(&seed) % (uint64_t)per) * nthreads + reg;
				idx[i] = k;
				free(slot[k]);
				slot[k] = NULL;
			}
			for (long i = 0; i < b; i++)
				if (!slot[idx[i]])   /* a slot drawn twice in a batch gets one block */
					slot[idx[i]] = new_block(&seed, &sum);
		}
		pthread_barrier_wait(&barrier);
	}
	free(idx);
	return (void *)(uintptr_t)sum;
}

int main(int argc, char **argv)
{
	nthreads = arg_or(argc, argv, 1, 2);
	nslots = arg_or(argc, argv, 2, 200000);
	rounds = arg_or(argc, argv, 3, 40);
	replace = arg_or(argc, argv, 4, 50000);
	batch = arg_or(argc, argv, 5, 256);
	maxsize = arg_or(argc, argv, 6, 1024);
	if (nthreads < 1 || nthreads > 64 || nslots < nthreads || batch < 1 || maxsize < 8) {
		fprintf(stderr, "usage: xfree [THREADS=2 (1..64)] [SLOTS=200000] [ROUNDS=40] [REPLACE=50000] "
				"[BATCH=256] [MAXSIZE=1024 (>= 8)]\n");
		return 2;
	}
	slot = calloc((size_t)nslots, sizeof *slot);
	if (!slot)
		return 1;
	pthread_barrier_init(&barrier, NULL, (unsigned)nthreads);
	pthread_t t[64];
	for (long i = 0; i < nthreads; i++)
		pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i);
	uint64_t sum = 0;
	for (long i = 0; i < nthreads; i++) {
		void *r;
		pthread_join(t[i], &r);
		sum += (uintptr_t)r;
	}
	for (long k = 0; k < nslots; k++)
		free(slot[k]);
	free(slot);
	pthread_barrier_destroy(&barrier);
	printf("xfree: checksum %llu\n", (unsigned long long)sum);
	return 0;
}
