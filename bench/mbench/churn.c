/*
 * churn: random replacement over every size class with a large live set.
 * Each thread keeps LIVE blocks of log-uniform sizes 8 .. MAXSIZE and
 * replaces a random one OPS times, writing a few bytes of each.
 *
 *   churn [THREADS=2] [OPS=4000000] [LIVE=100000] [MAXSIZE=32768]
 */
#include "common.h"

static long ops, live, maxsize;

static void *worker(void *arg)
{
	uint64_t seed = (uintptr_t)arg, sum = 0;
	char **v = calloc((size_t)live, sizeof *v);
	for (long i = 0; i < ops; i++) {
		size_t k = rnd(&seed) % (size_t)live;
		free(v[k]);
		size_t n = rnd_size(&seed, 8, (size_t)maxsize);
		char *p = xmalloc(n);
		p[0] = (char)n;
		p[n / 2] = 1;
		p[n - 1] = 2;
		sum += n;
		v[k] = p;
	}
	for (long k = 0; k < live; k++)
		free(v[k]);
	free(v);
	return (void *)(uintptr_t)sum;
}

int main(int argc, char **argv)
{
	long n = arg_or(argc, argv, 1, 2);
	ops = arg_or(argc, argv, 2, 4000000);
	live = arg_or(argc, argv, 3, 100000);
	maxsize = arg_or(argc, argv, 4, 32768);
	pthread_t t[64];
	uint64_t sum = 0;
	if (n > 64)
		n = 64;
	for (long i = 0; i < n; i++)
		pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
	for (long i = 0; i < n; i++) {
		void *r;
		pthread_join(t[i], &r);
		sum += (uintptr_t)r;
	}
	printf("churn: checksum %llu\n", (unsigned long long)sum);
	return 0;
}
