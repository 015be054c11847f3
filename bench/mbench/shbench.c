/*
 * shbench: SmartHeap-style batches. Each of THREADS threads, ROUNDS times,
 * allocates a batch of BATCH blocks of random sizes in [MIN, MAX] (uniform,
 * 1..1000 by default), writes each, and frees the batch in an order that
 * varies from round to round: as allocated, reversed, every other block
 * first then the rest, or shuffled. No block crosses threads: the threads
 * meet only in the allocator (its shared locks, lists and pages).
 *
 *   shbench [THREADS=2] [ROUNDS=2000] [BATCH=1000] [MIN=1] [MAX=1000]
 */
#include "common.h"

static long rounds, batch, lo, hi;

static void *worker(void *arg)
{
	uint64_t seed = 0x5eed0000ULL + 104729 * (uint64_t)(uintptr_t)arg, sum = 0;
	char **b = calloc((size_t)batch, sizeof *b);
	long *order = xmalloc((size_t)batch * sizeof *order);
	if (!b)
		exit(1);
	for (long r = 0; r < rounds; r++) {
		for (long i = 0; i < batch; i++) {
			size_t n = (size_t)lo + rnd(&seed) % (uint64_t)(hi - lo + 1);
			b[i] = xmalloc(n);
			b[i][0] = (char)i;
			b[i][n - 1] = (char)r;
		}
		switch (r % 4) {
		case 0: for (long i = 0; i < batch; i++) order[i] = i; break;
		case 1: for (long i = 0; i < batch; i++) order[i] = batch - 1 - i; break;
		case 2:
			for (long i = 0, k = 0; k < 2; k++)
				for (long j = k; j < batch; j += 2)
					order[i++] = j;
			break;
		default:
			for (long i = 0; i < batch; i++) order[i] = i;
			for (long i = batch - 1; i > 0; i--) {
				long j = (long)(rnd(&seed) % (uint64_t)(i + 1)), t = order[i];
				order[i] = order[j];
				order[j] = t;
			}
		}
		for (long i = 0; i < batch; i++) {
			sum += (unsigned char)b[order[i]][0];
			free(b[order[i]]);
		}
	}
	free(order);
	free(b);
	return (void *)(uintptr_t)sum;
}

int main(int argc, char **argv)
{
	long threads = arg_or(argc, argv, 1, 2);
	rounds = arg_or(argc, argv, 2, 2000);
	batch = arg_or(argc, argv, 3, 1000);
	lo = arg_or(argc, argv, 4, 1);
	hi = arg_or(argc, argv, 5, 1000);
	if (threads < 1 || rounds < 1 || batch < 1 || lo < 1 || hi < lo)
		return 2;
	pthread_t *t = xmalloc((size_t)threads * sizeof *t);
	for (long i = 0; i < threads; i++)
		if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i))
			return 1;
	uint64_t sum = 0;
	for (long i = 0; i < threads; i++) {
		void *r;
		pthread_join(t[i], &r);
		sum += (uintptr_t)r;
	}
	free(t);
	printf("shbench: checksum %llu\n", (unsigned long long)sum);
	return 0;
}
