/*
 * mthread: a multi-thread small-object loop, in the manner of glibc's
 * bench-malloc-thread. Each of THREADS threads keeps its own working set of
 * WSET slots and, ITERS times, frees the block in a random slot and
 * allocates a new one there, writing its first and last byte. Sizes are
 * mostly small with a long tail: 15 in 16 log-uniform in 8 .. 512 bytes,
 * the rest log-uniform in 512 .. MAXSIZE. Sizes and slots come from tables
 * drawn before the loop (8192 sizes, 8191 slot numbers, so the pairs do not
 * repeat for 67 M iterations), so the loop itself is the allocator's. Every
 * free is by the thread that allocated the block.
 *
 *   mthread [THREADS=2] [ITERS=20000000] [WSET=1024] [MAXSIZE=4096]
 */
#include "common.h"

#define NSIZES 8192   /* a power of two */
#define NIDX 8191     /* coprime with NSIZES */

static long iters, wset, maxsize;

static void *worker(void *arg)
{
	uint64_t seed = 0xabcdef01ULL + 7919 * (uint64_t)(uintptr_t)arg, sum = 0;
	unsigned *sizes = xmalloc(NSIZES * sizeof *sizes);
	unsigned *idx = xmalloc(NIDX * sizeof *idx);
	char **ws = calloc((size_t)wset, sizeof *ws);
	if (!ws)
		exit(1);
	for (long i = 0; i < NSIZES; i++)
		sizes[i] = (unsigned)(rnd(&seed) % 16 ? rnd_size(&seed, 8, 512)
		                                       : rnd_size(&seed, 512, (size_t)maxsize));
	for (long i = 0; i < NIDX; i++)
		idx[i] = (unsigned)(rnd(&seed) % (uint64_t)wset);
	long j = 0;   /* i % NIDX */
	for (long i = 0; i < iters; i++) {
		unsigned k = idx[j];
		if (++j == NIDX)
			j = 0;
		free(ws[k]);
		size_t n = sizes[i & (NSIZES - 1)];
		char *p = xmalloc(n);
		p[0] = (char)i;
		p[n - 1] = (char)n;
		sum += n;
		ws[k] = p;
	}
	for (long k = 0; k < wset; k++)
		free(ws[k]);
	free(ws);
	free(idx);
	free(sizes);
	return (void *)(uintptr_t)sum;
}

int main(int argc, char **argv)
{
	long n = arg_or(argc, argv, 1, 2);
	iters = arg_or(argc, argv, 2, 20000000);
	wset = arg_or(argc, argv, 3, 1024);
	maxsize = arg_or(argc, argv, 4, 4096);
	if (n < 1 || n > 64 || wset < 1 || maxsize < 512) {
		fprintf(stderr, "usage: mthread [THREADS=2 (1..64)] [ITERS=20000000] [WSET=1024] [MAXSIZE=4096 (>= 512)]\n");
		return 2;
	}
	pthread_t t[64];
	uint64_t sum = 0;
	for (long i = 0; i < n; i++)
		pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i);
	for (long i = 0; i < n; i++) {
		void *r;
		pthread_join(t[i], &r);
		sum += (uintptr_t)r;
	}
	printf("mthread: checksum %llu\n", (unsigned long long)sum);
	return 0;
}
