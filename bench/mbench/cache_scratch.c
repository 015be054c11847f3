/*
 * cache-scratch (Hoard's benchmark): the main thread allocates one small
 * object per thread and hands it over; each thread frees it, then
 * repeatedly allocates an object of the same size, writes it REPS times and
 * frees it. An allocator that gives a thread memory on a cache line another
 * thread writes (passive false sharing) is slow here.
 *
 *   cache_scratch [THREADS=2] [ITER=1000] [OBJSIZE=8] [REPS=2000]
 */
#include "common.h"

static long iter, objsize, reps;

static void *worker(void *arg)
{
	char *first = arg;
	free(first);
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
	void *objs[256];
	if (n > 256)
		n = 256;
	for (long i = 0; i < n; i++)
		objs[i] = xmalloc((size_t)objsize);
	for (long i = 0; i < n; i++)
		pthread_create(&t[i], NULL, worker, objs[i]);
	for (long i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	printf("cache_scratch: checksum %ld\n", n * iter);
	return 0;
}
