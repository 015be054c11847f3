/*
 * prodcons: producer threads allocate messages of many size classes
 * (16 .. MAXSIZE bytes, log-uniform), fill their first bytes and pass them
 * through bounded queues to consumer threads, which check and free them:
 * every free is remote.
 *
 *   prodcons [PAIRS=1] [MESSAGES=2000000] [MAXSIZE=4096] [QUEUE=1024]
 */
#include "common.h"

#include <stdatomic.h>

struct queue {
	void **ring;
	size_t cap;
	uint64_t seed;               /* the producer's random sizes */
	_Atomic size_t head, tail;   /* single producer, single consumer */
	char pad[64];
};

static long messages, maxsize;

static void *producer(void *arg)
{
	struct queue *q = arg;
	uint64_t seed = q->seed;
	for (long i = 0; i < messages; i++) {
		size_t n = rnd_size(&seed, 16, (size_t)maxsize);
		size_t *m = xmalloc(n);
		m[0] = n;
		m[1] = (size_t)i;
		size_t t = atomic_load_explicit(&q->tail, memory_order_relaxed);
		while (t - atomic_load_explicit(&q->head, memory_order_acquire) >= q->cap)
			sched_yield();
		q->ring[t % q->cap] = m;
		atomic_store_explicit(&q->tail, t + 1, memory_order_release);
	}
	return NULL;
}

static void *consumer(void *arg)
{
	struct queue *q = arg;
	uint64_t sum = 0;
	for (long i = 0; i < messages; i++) {
		size_t h = atomic_load_explicit(&q->head, memory_order_relaxed);
		while (atomic_load_explicit(&q->tail, memory_order_acquire) == h)
			sched_yield();
		size_t *m = q->ring[h % q->cap];
		atomic_store_explicit(&q->head, h + 1, memory_order_release);
		if (m[1] != (size_t)i) {
			fprintf(stderr, "prodcons: message out of order\n");
			exit(1);
		}
		sum += m[0];
		free(m);
	}
	return (void *)(uintptr_t)sum;
}

int main(int argc, char **argv)
{
	long pairs = arg_or(argc, argv, 1, 1);
	messages = arg_or(argc, argv, 2, 2000000);
	maxsize = arg_or(argc, argv, 3, 4096);
	long cap = arg_or(argc, argv, 4, 1024);
	struct queue *qs = calloc((size_t)pairs, sizeof *qs);
	pthread_t *pt = calloc((size_t)pairs * 2, sizeof *pt);
	for (long i = 0; i < pairs; i++) {
		qs[i].cap = (size_t)cap;
		qs[i].seed = (uint64_t)i + 1;
		qs[i].ring = calloc((size_t)cap, sizeof(void *));
		pthread_create(&pt[2 * i], NULL, producer, &qs[i]);
		pthread_create(&pt[2 * i + 1], NULL, consumer, &qs[i]);
	}
	uint64_t sum = 0;
	for (long i = 0; i < pairs; i++) {
		void *r;
		pthread_join(pt[2 * i], NULL);
		pthread_join(pt[2 * i + 1], &r);
		sum += (uintptr_t)r;
	}
	printf("prodcons: checksum %llu\n", (unsigned long long)sum);
	return 0;
}
