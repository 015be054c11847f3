/*
 * xmalloc: the producer/consumer pattern of Lever and Boreham's malloc
 * test ("malloc() Performance in a Multithreaded Linux Environment",
 * USENIX 2000; xmalloc-test in mimalloc-bench, which runs it with 64-byte
 * blocks). A re-implementation of its pattern, not its code.
 *
 * WORKERS producer threads and WORKERS consumer threads. A producer
 * allocates a batch record (4096 block pointers and a link: a 32 KiB
 * block), then 4096 blocks of SIZE bytes, filling the first 128 bytes of
 * each (all of a smaller one), and pushes the batch onto one shared LIFO
 * stack under a mutex, waiting on a condition variable while the stack
 * holds 100 batches. A consumer pops a batch (waiting while the stack is
 * empty) and frees its blocks in order, then the record: every free is of
 * another thread's block, and the producers go on allocating meanwhile.
 * The original runs for a fixed time and reports frees per second; this
 * one makes BATCHES batches in all (shared out among the producers) and
 * is timed from outside. SIZE -1: each block's size drawn from the
 * original's 17 sizes (8 .. 2048 bytes).
 *
 * The threads sleep on the stack's condition variables by design (a
 * consumer that empties the stack, a producer that fills it), whatever
 * the allocator: compare voluntary context switches between allocators,
 * not against zero.
 *
 *   xmalloc [WORKERS=1] [BATCHES=2000] [SIZE=64]
 */
#include "common.h"

#include <stdatomic.h>

#define PER_BATCH 4096
#define STACK_MAX 100

struct batch {
	struct batch *next;
	void *obj[PER_BATCH];
};

static const long sizes[] = { 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048 };

static struct {
	pthread_mutex_t lock;
	pthread_cond_t nonempty, nonfull;
	struct batch *top;   /* lock */
	long depth;          /* lock */
	long left;           /* batches not yet popped (lock) */
} q = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0 };

static long workers, per_producer, extra, size;

static void *producer(void *arg)
{
	long id = (long)(uintptr_t)arg;
	uint64_t seed = 0x3a110cULL + (uint64_t)id;
	long n = per_producer + (id < extra);
	for (long k = 0; k < n; k++) {
		struct batch *b = xmalloc(sizeof *b);
		for (int i = 0; i < PER_BATCH; i++) {
			long sz = size > 0 ? size : sizes[rnd(&seed) % (sizeof sizes / sizeof sizes[0])];
			b->obj[i] = xmalloc((size_t)sz);
			memset(b->obj[i], i & 255, (size_t)(sz > 128 ? 128 : sz));
		}
		pthread_mutex_lock(&q.lock);
		while (q.depth >= STACK_MAX)
			pthread_cond_wait(&q.nonfull, &q.lock);
		b->next = q.top;
		q.top = b;
		q.depth++;
		pthread_cond_signal(&q.nonempty);
		pthread_mutex_unlock(&q.lock);
	}
	return NULL;
}

static void *consumer(void *arg)
{
	(void)arg;
	uint64_t sum = 0;
	for (;;) {
		pthread_mutex_lock(&q.lock);
		while (!q.top && q.left)
			pthread_cond_wait(&q.nonempty, &q.lock);
		struct batch *b = q.top;
		if (b) {
			q.top = b->next;
			q.depth--;
			q.left--;
			pthread_cond_signal(&q.nonfull);
			if (!q.left)
				pthread_cond_broadcast(&q.nonempty);   /* the last one: the others may stop */
		}
		pthread_mutex_unlock(&q.lock);
		if (!b)
			break;
		for (int i = 0; i < PER_BATCH; i++) {
			sum += *(unsigned char *)b->obj[i];
			free(b->obj[i]);
		}
		free(b);
	}
	return (void *)(uintptr_t)sum;
}

int main(int argc, char **argv)
{
	workers = arg_or(argc, argv, 1, 1);
	long batches = arg_or(argc, argv, 2, 2000);
	size = arg_or(argc, argv, 3, 64);
	if (workers < 1 || batches < 1 || size == 0)
		return 2;
	per_producer = batches / workers;
	extra = batches % workers;
	q.left = batches;
	pthread_t *t = xmalloc(2 * (size_t)workers * sizeof *t);
	for (long i = 0; i < workers; i++)
		if (pthread_create(&t[2 * i], NULL, consumer, NULL) ||
		    pthread_create(&t[2 * i + 1], NULL, producer, (void *)(uintptr_t)i))
			return 1;
	uint64_t sum = 0;
	for (long i = 0; i < 2 * workers; i++) {
		void *r;
		pthread_join(t[i], &r);
		sum += (uintptr_t)r;
	}
	free(t);
	printf("xmalloc: %ld workers, %ld batches, checksum %llu\n", workers, batches, (unsigned long long)sum);
	return 0;
}
