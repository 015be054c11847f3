/*
 * Memory goes back (docs/testing.md rows 50 and 36): allocate a lot across
 * three caches, touch every byte, free everything, shrink, destroy; RSS must come
 * back to within a small bound of where it started. Once on one thread, once
 * with worker threads that allocate, hand their objects to main and exit.
 *
 * Pointer arrays are mmap'ed directly so that libc's heap does not blur
 * the numbers.
 */
#include "check.h"

#include <pthread.h>
#include <sys/mman.h>

#define TOTAL   (SCALE(200, 48) * MiB)
#define SLACK   (SCALE(8, 16) * MiB)
#define WORKERS 4

static const size_t sizes[3] = { 64, 1000, 4000 };

static void *map_array(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(p != MAP_FAILED);
	return p;
}

static void mb(const char *what, size_t rss)
{
	printf("    %-34s RSS %8.2f MiB\n", what, (double)rss / MiB);
}

struct part {
	struct uslab_cache *c;
	void **objs;
	size_t n;
};

static void fill_part(struct part *p)
{
	size_t size = uslab_cache_size(p->c);
	for (size_t i = 0; i < p->n; i++) {
		p->objs[i] = uslab_cache_alloc(p->c);
		CHECKF(p->objs[i] != NULL, "alloc %zu of %zu (size %zu): errno %d", i, p->n, size, errno);
		memset(p->objs[i], (int)(i & 0xff) | 1, size);
	}
}

static void free_part(struct part *p)
{
	size_t size = uslab_cache_size(p->c);
	for (size_t i = 0; i < p->n; i++) {
		const uint8_t *b = p->objs[i];
		CHECK(b[0] == ((i & 0xff) | 1) && b[size - 1] == ((i & 0xff) | 1));
		uslab_cache_free(p->c, p->objs[i]);
	}
}

/* Under TSan its shadow of the touched memory stays resident, so there the
 * check is only that most of what was allocated went back. */
static void shrink_destroy_check(struct uslab_cache **cs, size_t rss0, size_t peak, size_t allocated,
				 const char *what)
{
	for (int k = 0; k < 3; k++) {
		CHECK_EQ(cache_active(cs[k]), 0);
		CHECKF(uslab_cache_shrink(cs[k]) == 0, "cache %s still holds slabs", uslab_cache_name(cs[k]));
	}
	size_t rss_shrunk = test_rss();
	mb("after free + shrink", rss_shrunk);
	for (int k = 0; k < 3; k++)
		destroy_silently(cs[k]);
	size_t rss_end = test_rss();
	mb("after destroy", rss_end);
	printf("    %s: start %.2f MiB, end %.2f MiB, bound %.2f MiB\n", what, (double)rss0 / MiB,
	       (double)rss_end / MiB, (double)(rss0 + SLACK) / MiB);
	size_t back = peak > rss_shrunk ? peak - rss_shrunk : 0;
	CHECKF(back >= allocated / 10 * 9, "%s: only %zu of %zu bytes went back", what, back, allocated);
	if (UNDER_TSAN) {
		printf("    (TSan: RSS bound relative to start not checked)\n");
		return;
	}
	CHECKF(rss_shrunk <= rss0 + SLACK, "%s: RSS after shrink %zu > start %zu + %lu", what, rss_shrunk, rss0,
	       SLACK);
	CHECKF(rss_end <= rss0 + SLACK, "%s: RSS after destroy %zu > start %zu + %lu", what, rss_end, rss0, SLACK);
}

static void test_rss_single(void)
{
	struct uslab_cache *cs[3];
	struct part parts[3];
	for (int k = 0; k < 3; k++) {
		cs[k] = uslab_cache_create("rss_single", sizes[k], 0, 0, NULL);
		CHECK(cs[k] != NULL);
	}
	size_t rss0 = test_rss();
	mb("start", rss0);
	for (int k = 0; k < 3; k++) {
		parts[k].c = cs[k];
		parts[k].n = TOTAL / 3 / sizes[k];
		parts[k].objs = map_array(parts[k].n * sizeof(void *));
		fill_part(&parts[k]);
	}
	size_t peak = test_rss();
	mb("all allocated and touched", peak);
	CHECKF(peak >= rss0 + TOTAL * 9 / 10, "peak %zu: the objects were not resident?", peak);
	for (int k = 0; k < 3; k++) {
		free_part(&parts[k]);
		CHECK(munmap(parts[k].objs, parts[k].n * sizeof(void *)) == 0);
	}
	shrink_destroy_check(cs, rss0, peak, TOTAL, "single thread");
}

static struct uslab_cache *mt_caches[3];
static struct part mt_parts[WORKERS][3];

static void *worker(void *arg)
{
	struct part *ps = arg;
	for (int k = 0; k < 3; k++)
		fill_part(&ps[k]);
	/* Free a tenth here: partial slabs stay in this thread's CPU lists. */
	for (int k = 0; k < 3; k++) {
		size_t size = uslab_cache_size(ps[k].c);
		for (size_t i = 0; i < ps[k].n; i += 10) {
			uslab_cache_free(ps[k].c, ps[k].objs[i]);
			ps[k].objs[i] = uslab_cache_alloc(ps[k].c);
			CHECK(ps[k].objs[i] != NULL);
			memset(ps[k].objs[i], (int)(i & 0xff) | 1, size);
		}
	}
	return NULL;
}

static void test_rss_threads(void)
{
	for (int k = 0; k < 3; k++) {
		mt_caches[k] = uslab_cache_create("rss_threads", sizes[k], 0, 0, NULL);
		CHECK(mt_caches[k] != NULL);
	}
	size_t rss0 = test_rss();
	mb("start", rss0);
	pthread_t t[WORKERS];
	for (int w = 0; w < WORKERS; w++) {
		for (int k = 0; k < 3; k++) {
			struct part *p = &mt_parts[w][k];
			p->c = mt_caches[k];
			p->n = TOTAL / 2 / WORKERS / 3 / sizes[k];
			p->objs = map_array(p->n * sizeof(void *));
		}
		CHECK(pthread_create(&t[w], NULL, worker, mt_parts[w]) == 0);
	}
	for (int w = 0; w < WORKERS; w++)
		CHECK(pthread_join(t[w], NULL) == 0);
	size_t peak = test_rss();
	mb("workers allocated and exited", peak);
	CHECK(peak >= rss0 + TOTAL / 2 * 9 / 10);
	for (int w = 0; w < WORKERS; w++)
		for (int k = 0; k < 3; k++) {
			free_part(&mt_parts[w][k]);
			CHECK(munmap(mt_parts[w][k].objs, mt_parts[w][k].n * sizeof(void *)) == 0);
		}
	shrink_destroy_check(mt_caches, rss0, peak, TOTAL / 2, "worker threads");
}

/* Threads that start together and all find the page allocator empty must
 * not each map a segment: one maps, the others use it. */
#define HERD 64
static struct uslab_cache *herd_cache;
static pthread_barrier_t herd_barrier;
static void *herd_thread(void *arg)
{
	pthread_barrier_wait(&herd_barrier);
	void *p = uslab_cache_alloc(herd_cache);
	CHECK(p != NULL);
	*(void **)arg = p;
	return NULL;
}

static void test_segment_herd(void)
{
	/* Runs first in the process: the page allocator has next to nothing,
	 * so every thread's first allocation needs fresh memory. */
	herd_cache = uslab_cache_create("herd", USLAB_CACHE_MAX_SIZE, 0, 0, NULL);
	CHECK(herd_cache != NULL);
	struct uslab_process_info before = { .version = USLAB_PROCESS_INFO_VERSION };
	CHECK(uslab_process_get_info(&before) == 0);
	pthread_t t[HERD];
	void *objs[HERD];
	CHECK(pthread_barrier_init(&herd_barrier, NULL, HERD) == 0);
	for (int i = 0; i < HERD; i++)
		CHECK(pthread_create(&t[i], NULL, herd_thread, &objs[i]) == 0);
	for (int i = 0; i < HERD; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	struct uslab_process_info after = { .version = USLAB_PROCESS_INFO_VERSION };
	CHECK(uslab_process_get_info(&after) == 0);
	printf("    segments before %" PRIu64 ", after %d threads started together %" PRIu64 "\n",
	       before.segments, HERD, after.segments);
	/* Each thread takes one slab of 1 MiB (order 8; a 4 MiB segment holds
	 * three, its first MiB holds the header) or, with debug metadata, of
	 * 2 MiB (order 9, one per segment): that many segments are needed,
	 * not one per thread. */
	struct uslab_cache_info ci = { .version = USLAB_CACHE_INFO_VERSION };
	CHECK(uslab_cache_get_info(herd_cache, &ci) == 0);
	unsigned per_seg = ci.order >= 9 ? 1 : (unsigned)(3U << (8 - ci.order));
	CHECKF(after.segments <= before.segments + HERD / per_seg + 3,
	       "segments %" PRIu64 " -> %" PRIu64 " (slab order %u)", before.segments, after.segments, ci.order);
	for (int i = 0; i < HERD; i++)
		uslab_cache_free(herd_cache, objs[i]);
	pthread_barrier_destroy(&herd_barrier);
	uslab_cache_destroy(herd_cache);
}

int main(void)
{
	check_init("test_rss");
	RUN(test_segment_herd);
	RUN(test_rss_single);
	RUN(test_rss_threads);
	return 0;
}
