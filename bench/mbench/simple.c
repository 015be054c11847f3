/*
 * simple: the single-thread loop of glibc's benchtests/bench-malloc-simple
 * (glibc-simple in mimalloc-bench). A re-implementation of its pattern,
 * not its code.
 *
 * For each block size SIZE, 2 x SIZE and 4 x SIZE, and for each run length
 * n of 25, 100, 400 and 1600: ITERS / n times, allocate n blocks of the
 * size, writing every int of each, then free them in the order they were
 * allocated. That set of runs is made four times per size: once as a
 * warm-up and once measured on the main thread, once on a new thread
 * (glibc: a thread arena), and once more on the main thread after that
 * thread has existed (glibc: no longer single-threaded). One thread runs
 * at a time; the whole is timed from outside.
 *
 *   simple [ITERS=2000000] [SIZE=16]
 */
#include "common.h"

static const int runs[] = { 25, 100, 400, 1600 };
static long iters, size;
static int *blocks[1600];

static void *run_all(void *arg)
{
	uint64_t *sum = arg;
	for (unsigned r = 0; r < sizeof runs / sizeof runs[0]; r++) {
		int n = runs[r];
		for (long j = 0; j < iters / n; j++) {
			for (int i = 0; i < n; i++) {
				int *p = xmalloc((size_t)size);
				for (long g = 0; g < size / (long)sizeof(int); g++)
					p[g] = (int)g;
				blocks[i] = p;
			}
			*sum += (uintptr_t)blocks[n - 1] >> 4 & 1;
			for (int i = 0; i < n; i++)
				free(blocks[i]);
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	iters = arg_or(argc, argv, 1, 2000000);
	long base = arg_or(argc, argv, 2, 16);
	if (iters < 1600 || base < 1)
		return 2;
	uint64_t sum = 0;
	for (int k = 0; k < 3; k++) {
		size = base << k;
		run_all(&sum);   /* warm-up */
		run_all(&sum);   /* main thread */
		pthread_t t;
		if (pthread_create(&t, NULL, run_all, &sum))
			return 1;
		pthread_join(t, NULL);
		run_all(&sum);   /* main thread again */
	}
	printf("simple: checksum %llu\n", (unsigned long long)sum);
	return 0;
}
