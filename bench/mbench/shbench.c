/*
 * shbench: the allocation patterns of MicroQuill's SmartHeap benchmarks
 * sh6bench and sh8bench as the allocator benchmark suites run them
 * (mimalloc-bench's sh6benchN and sh8benchN: the thread count on the
 * command line, every other parameter at the program's default, each new
 * block's first and last byte written). This is a re-implementation of
 * their published behaviour, not their code (MicroQuill's licence does not
 * allow passing that on); every step below is the programs' own, in their
 * order, so that an allocator meets the same sequence of sizes, frees and
 * cross-thread traffic.
 *
 * sh6 (sh6bench): each of THREADS threads keeps a ring of CALLS/THREADS
 * block pointers and makes REPEAT/THREADS passes over a fixed size
 * schedule: bases 1, 2, 4, 7, 11, ... (base = base * 3 / 2 + 1, below
 * 1000), and for each base the sizes base, base/2, ..., 1, each allocated
 * 250 times in a row below 100 bytes, 50 times below 1000 (19,300 blocks a
 * pass, 1..709 bytes). Blocks go into the ring in order, skipping a saved
 * window; when the ring is full, the window moves on by a fifth of the
 * ring, the blocks below it are freed in the order they were allocated and
 * those above it in reverse order, and allocation starts again at the
 * bottom. So each thread frees runs of thousands of blocks of few sizes
 * at a time, and keeps a fifth of them one round longer. As in the
 * original, when the window wraps to the bottom of the ring the next
 * blocks are stored over it: a fifth of the ring is lost (never freed)
 * once every five or six rounds, and the process grows with them. No
 * block crosses threads.
 *
 * sh8 (sh8bench): the main thread starts THREADS workers and then
 * allocates FOREIGN 8-byte blocks (rounded down to a multiple of
 * THREADS^2), each holding the address of its slot, into one shared array,
 * while the workers run. Each worker, at the start of each of its
 * ITER/THREADS iterations, frees the main thread's blocks that have
 * appeared in its share of the array (a sub-slot of every thread's slot,
 * checking each block's content), so every one of those frees is of
 * another thread's block, made while that thread is still allocating.
 * Then it allocates the iteration's count of blocks of the iteration's
 * size from a fixed histogram (8 B x 1000, 16 x 5000, 48 x 1000, 72 x 100,
 * 148 x 100, 200 x 100, 520 x 10, 1056 x 5, 4096 x 3, 9162, 34562, 168524,
 * in turn, starting at the second) into a ring of HEAP/THREADS slots run
 * as sh6's (without its overwrite: sh8 skips the window before storing).
 *
 *   shbench sh6 THREADS [CALLS=10000] [REPEAT=CALLS]
 *   shbench sh8 THREADS [ITER=700000] [HEAP=1000000] [FOREIGN=10000000]
 *
 * SHBENCH_LOCALITY=1 in the environment also counts, for every ring free
 * after the first of a walk, how far the block lies from the one freed
 * just before it (at most 256 bytes, at most 4 KiB, farther) and prints
 * the three counts: how well the allocator kept a thread's run of
 * allocations together in memory (a walk over blocks a few bytes apart
 * runs on prefetched lines; one over scattered blocks misses on most).
 * Off, each ring free tests one flag; the counting itself is for
 * separate, untimed runs.
 *
 * The defaults are the programs' (mimalloc-bench's patched sh6bench makes
 * 10000 calls); bench/peers.sh runs smaller REPEAT, ITER and FOREIGN, which
 * shortens the run without changing the ring, the schedule or the mix.
 */
#include "common.h"

#include <stdatomic.h>
#include <stdbool.h>

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

static long nthreads;

/* SHBENCH_LOCALITY (above): the distance counts of every ring walk. */
static bool locality;
static _Atomic uint64_t loc_total[3];   /* near (<= 256 B), page (<= 4 KiB), far */

static inline void loc_step(uint64_t *h, const char *prev, const char *p)
{
	uintptr_t d = p > prev ? (uintptr_t)(p - prev) : (uintptr_t)(prev - p);
	h[d <= 256 ? 0 : d <= 4096 ? 1 : 2]++;
}

/* Free ring[from .. to) upwards (from < to) or ring(to .. from] downwards
 * (from > to), counting distances when asked. */
static void ring_free(char **ring, long from, long to, uint64_t *h)
{
	if (from < to) {
		for (long i = from; i < to; i++) {
			if (locality && i > from)
				loc_step(h, ring[i - 1], ring[i]);
			free(ring[i]);
		}
	} else {
		for (long i = from; i > to;) {
			--i;
			if (locality && i < from - 1)
				loc_step(h, ring[i + 1], ring[i]);
			free(ring[i]);
		}
	}
}

static void loc_add(const uint64_t *h)
{
	for (int i = 0; i < 3; i++)
		atomic_fetch_add_explicit(&loc_total[i], h[i], memory_order_relaxed);
}

/* ---- sh6 ------------------------------------------------------------------------- */

static long sh6_slots, sh6_rounds;
static unsigned long sh6_lost;   /* blocks the ring overwrote (the original's loss), all threads */

static void *sh6_worker(void *arg)
{
	(void)arg;
	const long n = sh6_slots;
	char **ring = xmalloc((size_t)n * sizeof *ring);
	long mp = 0, save_start = n, save_end = n;   /* the saved window: none yet */
	unsigned long lost = 0;
	uint64_t sum = 0, loc[3] = { 0 };
	for (long r = 0; r < sh6_rounds; r++) {
		for (long base = 1; base < 1000; base = base * 3 / 2 + 1) {
			for (long size = base; size; size /= 2) {
				long times = size < 100 ? 250 : size < 1000 ? 50 : size < 10000 ? 10 : 1;
				while (times--) {
					char *p = xmalloc((size_t)size);
					p[0] = 0;
					p[size - 1] = 0;
					if (mp >= save_start && mp < save_end)
						lost++;   /* stored over the window (see above) */
					ring[mp++] = p;
					if (mp == save_start)
						mp = save_end;
					if (mp < n)
						continue;
					/* the ring is full: move the window on, free below
					 * it in allocation order, above it in reverse */
					save_start = save_end >= n ? 0 : save_end;
					save_end = MIN(save_start + n / 5, n);
					ring_free(ring, 0, save_start, loc);
					ring_free(ring, n, save_end, loc);
					mp = 0;
				}
			}
		}
		sum += (uintptr_t)ring[0] >> 4 & 1;
	}
	/* the residue: the bottom of the ring and the window above it */
	for (long i = 0; i < mp; i++)
		free(ring[i]);
	for (long i = MAX(mp, save_start); i < save_end; i++)
		free(ring[i]);
	free(ring);
	loc_add(loc);
	__atomic_add_fetch(&sh6_lost, lost, __ATOMIC_RELAXED);
	return (void *)(uintptr_t)sum;
}

/* ---- sh8 ------------------------------------------------------------------------- */

static const struct {
	unsigned size, count;
} sh8_hist[] = {
	{ 8, 1000 }, { 16, 5000 }, { 48, 1000 }, { 72, 100 }, { 148, 100 }, { 200, 100 },
	{ 520, 10 }, { 1056, 5 }, { 4096, 3 }, { 9162, 1 }, { 34562, 1 }, { 168524, 1 },
};
#define SH8_SIZES (sizeof sh8_hist / sizeof sh8_hist[0])

static long sh8_iters, sh8_slots, sh8_foreign;
/* The shared array: the main thread stores each block (release) after
 * writing its content; a worker that loads it (acquire) reads that content.
 * The original does the same with volatile pointers. */
static void *_Atomic *sh8_shared;

static void *sh8_worker(void *arg)
{
	const long index = (long)(uintptr_t)arg;
	const long slot = sh8_foreign / nthreads, share = slot / nthreads;
	long left = sh8_foreign ? slot : 0, in_share = share;
	void *_Atomic *next = sh8_shared + share * index;   /* this thread's sub-slot of slot 0 */
	const long n = sh8_slots;
	char **ring = xmalloc((size_t)(n ? n : 1) * sizeof *ring);
	long mp = 0, save_start = n, save_end = n, k = 0;
	uint64_t sum = 0, loc[3] = { 0 };
	for (long it = 0; it < sh8_iters; it++) {
		/* the main thread's blocks that have appeared in this thread's
		 * share; the next sub-slot once a share is done */
		while (left) {
			void **b = atomic_load_explicit(next, memory_order_acquire);
			if (!b)
				break;   /* not allocated yet: next iteration */
			if (*b != (void *)next) {
				fprintf(stderr, "shbench: block %p holds %p, not its slot %p\n", (void *)b, *b, (void *)next);
				exit(1);
			}
			free(b);
			next++;
			left--;
			sum++;
			if (--in_share == 0) {
				in_share = share;
				next += slot - share;
			}
		}
		if (++k == (long)SH8_SIZES)
			k = 0;
		unsigned size = sh8_hist[k].size;
		for (unsigned c = sh8_hist[k].count; c; c--) {
			if (mp == save_start)
				mp = save_end;
			if (mp >= n) {   /* the ring is full: as sh6's, the window skipped first */
				mp = 0;
				save_start = save_end >= n ? 0 : save_end;
				save_end = MIN(save_start + n / 5, n);
				ring_free(ring, 0, save_start, loc);
				ring_free(ring, n, save_end, loc);
				continue;   /* (this count's turn is spent on the frees) */
			}
			char *p = xmalloc(size);
			p[0] = 0;
			p[size - 1] = 0;
			ring[mp++] = p;
		}
	}
	for (long i = 0; i < mp; i++)
		free(ring[i]);
	for (long i = MAX(mp, save_start); i < save_end; i++)
		free(ring[i]);
	free(ring);
	loc_add(loc);
	return (void *)(uintptr_t)sum;
}

int main(int argc, char **argv)
{
	const char *which = argc > 1 ? argv[1] : "";
	bool sh8 = !strcmp(which, "sh8");
	if (!sh8 && strcmp(which, "sh6")) {
		fprintf(stderr, "usage: shbench sh6 THREADS [CALLS=10000] [REPEAT=CALLS]\n"
				"       shbench sh8 THREADS [ITER=700000] [HEAP=1000000] [FOREIGN=10000000]\n");
		return 2;
	}
	const char *lv = getenv("SHBENCH_LOCALITY");
	locality = lv && *lv && strcmp(lv, "0");
	nthreads = arg_or(argc, argv, 2, 2);
	if (nthreads < 1)
		return 2;
	if (sh8) {
		sh8_iters = arg_or(argc, argv, 3, 700000) / nthreads;
		sh8_slots = arg_or(argc, argv, 4, 1000000) / nthreads;
		sh8_foreign = arg_or(argc, argv, 5, 10000000) / (nthreads * nthreads) * (nthreads * nthreads);
		if (sh8_iters < 1 || sh8_slots < 0 || sh8_foreign < 0)
			return 2;
		sh8_shared = calloc((size_t)(sh8_foreign ? sh8_foreign : 1), sizeof *sh8_shared);
		if (!sh8_shared)
			return 1;
	} else {
		long calls = arg_or(argc, argv, 3, 10000);
		sh6_slots = calls / nthreads;
		sh6_rounds = arg_or(argc, argv, 4, calls) / nthreads;
		if (sh6_slots < 5 || sh6_rounds < 1)
			return 2;
	}
	pthread_t *t = xmalloc((size_t)nthreads * sizeof *t);
	for (long i = 0; i < nthreads; i++)
		if (pthread_create(&t[i], NULL, sh8 ? sh8_worker : sh6_worker, (void *)(uintptr_t)i))
			return 1;
	for (long i = 0; sh8 && i < sh8_foreign; i++) {   /* the foreign blocks, while the workers run */
		void **b = xmalloc(sh8_hist[0].size);
		*b = (void *)&sh8_shared[i];
		atomic_store_explicit(&sh8_shared[i], (void *)b, memory_order_release);
	}
	uint64_t sum = 0;
	for (long i = 0; i < nthreads; i++) {
		void *r;
		pthread_join(t[i], &r);
		sum += (uintptr_t)r;
	}
	free(t);
	if (sh8) {
		printf("shbench: sh8, %ld threads, %llu foreign blocks freed of %ld\n", nthreads, (unsigned long long)sum,
		       sh8_foreign);
		free((void *)sh8_shared);
	} else {
		printf("shbench: sh6, %ld threads, checksum %llu, %lu blocks lost to the ring's overwrite\n", nthreads,
		       (unsigned long long)sum, sh6_lost);
	}
	if (locality) {
		uint64_t a = loc_total[0], b = loc_total[1], c = loc_total[2], t = a + b + c;
		printf("shbench: locality of ring frees: %llu within 256 B, %llu within 4 KiB, %llu farther "
		       "(%.1f %% farther)\n", (unsigned long long)a, (unsigned long long)b, (unsigned long long)c,
		       t ? 100.0 * (double)c / (double)t : 0.0);
	}
	return 0;
}
