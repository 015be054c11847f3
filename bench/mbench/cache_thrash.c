/*
 * cache-thrash (Hoard's benchmark): each thread repeatedly allocates a
 * small object, writes it REPS times and frees it. An allocator that puts
 * two threads' objects on one cache line (active false sharing) is slow.
 *
 *   cache_thrash [THREADS=2] [ITER=1000] [OBJSIZE=8] [REPS=2000]
 */
#include "common.h"

static long iter, objsize, reps;

static void *worker(void *arg)
{
	(void)arg;
	for (long i = 0; i < iter; i++) {
		volatile char *p = xmalloc((size_t)objsize);
		for (long r = 0; r < reps; r++)
			for (long j = 0; j < objsize; j++)
				p[j] = (char)(p[j] + r);
		free((void *)p);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	long n = arg_or(argc, argv, 1, 2);
	iter = arg_or(argc, argv, 2, 1000);
	objsize = arg_or(argc, argv, 3, 8);
	reps = arg_or(argc, argv, 4, 2000);
	pthread_t t[256];
	if (n > 256)
		n = 256;
	for (long i = 0; i < n; i++)
		pthread_create(&t[i], NULL, worker, NULL);
	for (long i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	printf("cache_thrash: checksum %ld\n", n * iter);
	return 0;
}
