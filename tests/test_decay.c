/*
 * Memory goes back to the OS over time (issue 11): decay, measured through
 * uslab_process_get_info() (dirty_bytes, used_bytes) and RSS, with bounds
 * in multiples of the decay time, not to the millisecond.
 *
 *   - with the background thread (decay_ms 200): a burst of malloc'ed
 *     objects of 16..1024 B, every one freed (in random order), then idle:
 *     the thread's passes bring dirty bytes to ~0 and RSS back near the
 *     start (in sheaves and slab modes: near the start plus the slabs still
 *     in use, which the idle thread's own sheaves or arrays pin until its
 *     next slow path: freed objects wait there, and with slabs of 64 KiB a
 *     few thousand of them pin most of a 64 MiB burst's slabs; how long it
 *     took is printed: about 1 s on an idle machine); once nothing is
 *     pending, the thread sleeps with no deadline and runs no passes;
 *   - without it: the burst's frees give back all but the dirty bound
 *     (decay_dirty_max, half the pages in use, or what the bound learned,
 *     whichever is most: page.c) while they run; after the decay time a
 *     later allocation call (a page-sized block freed) gives back what
 *     decayed; malloc_trim(0) gives back everything;
 *   - the bound learns (the policy clock held, so that no verdict depends
 *     on time): rounds of 8 MiB of page blocks allocated, written and
 *     freed, with decay_dirty_max 1 MiB; the first round's frees give
 *     back all but the bound, the next rounds allocate what they gave back
 *     (purges wasted) and the bound learns to keep a round's blocks dirty,
 *     so later rounds fault nothing in; decay periods without such a
 *     reuse halve what it learned, and the bound holds again;
 *   - decay_ms 0: nothing stays dirty;
 *   - new dirty memory wakes a thread that sleeps with no deadline.
 *
 * No verdict depends on how fast the machine runs: what the background
 * thread must do is waited for (polled up to CHECK_HANG_S, only a hang
 * fails) and its time printed; "no passes while idle" is looked at only
 * once the thread has said it sleeps with no deadline; the sleeps without
 * the thread are lower bounds (more time only lets more decay).
 *
 * decay_ms and decay_dirty_max are set through page.c's variables, which
 * the static link reaches (USLAB_OPTIONS may hold other tokens: the
 * suite's slub_debug and classic variants). Under ThreadSanitizer RSS is
 * not checked (its shadow of touched memory stays resident), under ASan
 * with more slack.
 */
#include "check.h"
#include "cpu.h"
#include "bgthread.h"

#include <sys/mman.h>
#include <sys/resource.h>

#define BURST      (SCALE(64, 16) * MiB)
#define RSS_SLACK  (SCALE(16, 24) * MiB)   /* RSS back within this of the start */
#define DIRTY_LOW  (512 * 1024UL)          /* "~0" dirty bytes */
#define DECAY_MS   200

static struct uslab_process_info pinfo(void)
{
	struct uslab_process_info p;
	memset(&p, 0, sizeof p);
	p.version = 1;
	CHECK(uslab_process_get_info(&p) == 0);
	return p;
}

static void show(const char *what, size_t rss0)
{
	struct uslab_process_info p = pinfo();
	size_t rss = test_rss();
	printf("    %-38s RSS %7.2f MiB (%+7.2f), used %7.2f MiB, dirty %6.2f MiB, mapped %7.2f MiB\n", what,
	       (double)rss / MiB, ((double)rss - (double)rss0) / MiB, (double)p.used_bytes / MiB,
	       (double)p.dirty_bytes / MiB, (double)p.mapped_bytes / MiB);
}

struct burst {
	void **p;
	size_t n, cap, bytes;
};

/* Objects of 16..1024 B (uniform), written, until `total` bytes; the
 * pointer array is mmap'ed so that libc's heap does not blur RSS. */
static void burst_alloc(struct burst *b, size_t total, uint64_t seed)
{
	b->cap = total / 16 + 1;
	b->p = mmap(NULL, b->cap * sizeof(void *), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(b->p != MAP_FAILED);
	b->n = b->bytes = 0;
	while (b->bytes < total && b->n < b->cap) {
		size_t sz = 16 + rnd_next(&seed) % 1009;
		void *x = uslab_malloc(sz);
		CHECKF(x != NULL, "malloc(%zu) after %zu bytes: errno %d", sz, b->bytes, errno);
		memset(x, 0x5a, sz);
		b->p[b->n++] = x;
		b->bytes += sz;
	}
}

static void burst_free(struct burst *b, uint64_t seed)
{
	for (size_t i = b->n; i > 1; i--) {   /* random order */
		size_t j = rnd_next(&seed) % i;
		void *t = b->p[i - 1];
		b->p[i - 1] = b->p[j];
		b->p[j] = t;
	}
	for (size_t i = 0; i < b->n; i++) {
		CHECK(*(unsigned char *)b->p[i] == 0x5a);
		uslab_free(b->p[i]);
	}
	munmap(b->p, b->cap * sizeof(void *));
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* A clean start: what earlier sub-tests left goes back first. */
static size_t settle(void)
{
	uslab_malloc_trim(0);
	return test_rss();
}

/* The mode new caches get (the default, or USLAB_OPTIONS's slub_cpu_mode),
 * asked of a cache made for the question. */
static unsigned new_cache_mode(void)
{
	static int mode = -1;
	if (mode < 0) {
		struct uslab_cache *c = uslab_cache_create("decay-probe", 64, 0, USLAB_NO_MERGE, NULL);
		CHECK(c != NULL);
		struct uslab_cache_info in;
		cache_info(c, &in);
		mode = (int)in.cpu_mode;
		uslab_cache_destroy(c);
	}
	return (unsigned)mode;
}

/* slqb mode: the freeing thread's object queue keeps up to hiwater objects
 * per cache, and they pin their slabs until the thread's next slow path
 * (README: SLQB has no periodic trim here). Then only what the page
 * allocator holds (dirty pages) is checked against the clock. */
static bool slqb_mode(void)
{
	return new_cache_mode() == USLAB_CPU_SLQB;
}

/* sheaves and slab modes (the default, or slub_cpu_mode=sheaves|slab):
 * freed objects wait in per-CPU arrays and the barn, pinning their slabs
 * (the file comment). */
static bool caching_mode(void)
{
	return new_cache_mode() == USLAB_CPU_SHEAVES || new_cache_mode() == USLAB_CPU_SLAB;
}

static void test_decay_background_thread(void)
{
	page_purge_delay_ms = DECAY_MS;
	CHECK(uslab_background_thread(1) == 0);
	size_t rss0 = settle();
	show("start", rss0);
	struct burst b;
	burst_alloc(&b, BURST, 1);
	show("after the burst", rss0);
	burst_free(&b, 2);
	double t0 = check_now();
	show("right after the frees", rss0);
	/* idle: the thread's passes bring dirty bytes to ~0 and RSS near the
	 * start (about 5 decay times on an idle machine; a loaded one may run
	 * the thread late: only a hang fails) */
	double done = -1;
	while (check_now() - t0 < CHECK_HANG_S) {
		struct uslab_process_info p = pinfo();
		size_t rss = test_rss();
		size_t pinned = caching_mode() ? p.used_bytes : 0;
		if (p.dirty_bytes <= DIRTY_LOW && (UNDER_TSAN || slqb_mode() || rss <= rss0 + pinned + RSS_SLACK)) {
			done = check_now() - t0;
			break;
		}
		sleep_ms(20);
	}
	show("idle, background thread", rss0);
	printf("    memory back %.2f s after the frees (decay_ms %d)%s\n", done, DECAY_MS,
	       slqb_mode() ? "; slqb: dirty pages only, the queue pins its slabs" : "");
	CHECKF(done >= 0, "dirty bytes or RSS not back %.0f s after the frees", CHECK_HANG_S);
	/* nothing pending any more: the thread goes to sleep with no deadline
	 * (it may still have passes to run: wait until it says so), and then
	 * runs no pass while nothing is freed, however long the window (at
	 * most one: a pass that found memory dirtied just as it went to sleep) */
	double t1 = check_now();
	while (!atomic_load(&mem_bg_sleeping) && check_now() - t1 < CHECK_HANG_S)
		sleep_ms(10);
	CHECKF(atomic_load(&mem_bg_sleeping), "the thread never slept with no deadline (%.0f s)", CHECK_HANG_S);
	printf("    asleep with no deadline %.2f s later\n", check_now() - t1);
	struct bg_stats s0, s1;
	bg_get_stats(&s0);
	double w0 = check_now();
	sleep_ms(3 * DECAY_MS);
	bg_get_stats(&s1);
	printf("    idle thread: %llu passes, %llu wake-ups in %.0f ms\n", (unsigned long long)(s1.passes - s0.passes),
	       (unsigned long long)(s1.wakeups - s0.wakeups), (check_now() - w0) * 1e3);
	CHECKF(s1.passes - s0.passes <= 1, "an idle process still runs decay passes (%llu in %d ms)",
	       (unsigned long long)(s1.passes - s0.passes), 3 * DECAY_MS);
	CHECK(s1.running);
	CHECK(uslab_background_thread(0) == 0);
	bg_get_stats(&s1);
	CHECK(!s1.running);
}

static void test_decay_without_thread(void)
{
	page_purge_delay_ms = DECAY_MS;
	struct bg_stats st;
	bg_get_stats(&st);
	CHECK(!st.running);
	size_t rss0 = settle();
	show("start", rss0);
	struct burst b;
	burst_alloc(&b, BURST, 3);
	show("after the burst", rss0);
	size_t peak = test_rss();
	burst_free(&b, 4);
	show("right after the frees", rss0);
	/* a burst of frees gives back all but the dirty bound while it runs:
	 * decay_dirty_max, half of what is in use, or what the bound learned
	 * from earlier sub-tests, if more (page.c) */
	struct uslab_process_info p = pinfo();
	uint64_t dmax = (uint64_t)page_dirty_max_mb * MiB, bound = page_dirty_bound();
	CHECKF(p.dirty_bytes <= bound + MiB,
	       "dirty %llu bytes after the frees, decay_dirty_max %u MiB, used %llu, learned %llu",
	       (unsigned long long)p.dirty_bytes, page_dirty_max_mb, (unsigned long long)p.used_bytes,
	       (unsigned long long)page_dirty_learned());
	/* most of it: what stays is decay_dirty_max, the barn's and this
	 * thread's sheaves and the slabs they pin, and empty slabs the node
	 * lists keep (min_partial), until a decay pass or trim */
	if (!UNDER_TSAN) {
		size_t rss = test_rss();
		CHECKF(rss <= rss0 + p.used_bytes + p.dirty_bytes + RSS_SLACK,
		       "RSS %zu MiB after the frees: more than the start (%zu MiB), the slabs in use and the dirty pages",
		       rss / MiB, rss0 / MiB);
		if (BURST >= 4 * dmax && !slqb_mode() && !caching_mode())   /* (their arrays pin slabs) */
			CHECKF(rss <= rss0 + (peak - rss0) / 2, "RSS %zu MiB after the frees (start %zu MiB, peak %zu MiB)",
			       rss / MiB, rss0 / MiB, peak / MiB);
	}
	/* after the decay time, a later allocation call gives back what decayed
	 * (the sleep is a lower bound: more time only lets more decay) */
	sleep_ms(DECAY_MS + DECAY_MS / 2);
	p = pinfo();
	CHECKF(p.dirty_bytes <= bound + MiB, "dirty grew while idle: %llu", (unsigned long long)p.dirty_bytes);
	void *x = uslab_malloc(256 * 1024);   /* a page block: page_alloc and page_free */
	CHECK(x != NULL);
	memset(x, 1, 256 * 1024);
	uslab_free(x);
	show("decay time later, one malloc/free", rss0);
	p = pinfo();
	CHECKF(p.dirty_bytes <= 256 * 1024 + DIRTY_LOW, "dirty %llu bytes after the decay time and a free",
	       (unsigned long long)p.dirty_bytes);
	/* malloc_trim(0): everything */
	uslab_malloc_trim(0);
	show("malloc_trim(0)", rss0);
	p = pinfo();
	CHECK_EQ(p.dirty_bytes, 0);
	if (!UNDER_TSAN)
		CHECKF(test_rss() <= rss0 + RSS_SLACK, "RSS %zu MiB after trim, start %zu MiB", test_rss() / MiB,
		       rss0 / MiB);
}

/* Rounds of NB page blocks of BLK bytes (malloc'ed, written, freed, in the
 * order given); returns the dirty bytes after the frees. */
enum { NB = 32, BLK = 256 * 1024 };
static uint64_t page_round(unsigned r)
{
	void *big[NB];
	for (int i = 0; i < NB; i++) {
		big[i] = uslab_malloc(BLK);
		CHECKF(big[i] != NULL, "round %u: malloc(%d) failed", r, BLK);
		memset(big[i], (int)r, BLK);
	}
	for (int i = 0; i < NB; i++)
		uslab_free(big[i]);
	struct uslab_process_info p = pinfo();
	printf("    round %u: dirty %6.2f MiB, bound %6.2f MiB (learned %6.2f), used %6.2f MiB\n", r,
	       (double)p.dirty_bytes / MiB, (double)page_dirty_bound() / MiB, (double)page_dirty_learned() / MiB,
	       (double)p.used_bytes / MiB);
	return p.dirty_bytes;
}

static void test_dirty_bound_learns(void)
{
	unsigned dmax0 = page_dirty_max_mb;
	const uint64_t round = (uint64_t)NB * BLK;
	page_purge_delay_ms = 1000;
	page_dirty_max_mb = 1;
	settle();
	os_clock_hold(true);
	/* forget what earlier sub-tests taught: 64 periods without a wasted
	 * purge, seen at the next free (which also gives back what aged) */
	os_clock_advance(64 * 1000);
	uslab_free(uslab_malloc(BLK));
	CHECK_EQ(page_dirty_learned(), 0);
	/* round 1: nothing to learn from; its frees give back all but the
	 * bound (1 MiB, or half of what is in use: this process's slabs) */
	uint64_t d1 = page_round(1);
	uint64_t b1 = page_dirty_bound();
	CHECKF(d1 <= b1 + BLK, "round 1 kept %llu dirty bytes, bound %llu", (unsigned long long)d1,
	       (unsigned long long)b1);
	CHECKF(b1 < round / 2, "the bound is %llu bytes before anything was learned: the test needs it below %llu",
	       (unsigned long long)b1, (unsigned long long)(round / 2));
	/* the next rounds allocate the blocks that rounds before gave back,
	 * within the delay (the clock is held): wasted purges, learned, until
	 * a whole round stays dirty and a round faults (nearly) nothing in.
	 * How many rounds that takes depends on how the buddy allocator
	 * merges freed blocks with given-back neighbours (a merged block
	 * counts dirty whole): up to 12 are allowed, 3-5 seen. */
	enum { ROUNDS = 12 };
	unsigned r = 2;
	long faults = 0;
	uint64_t dlast = 0;
	for (; r <= ROUNDS; r++) {
		struct rusage ru0, ru1;
		getrusage(RUSAGE_SELF, &ru0);
		dlast = page_round(r);
		getrusage(RUSAGE_SELF, &ru1);
		faults = ru1.ru_minflt - ru0.ru_minflt;
		printf("    round %u: %ld minor faults\n", r, faults);
		/* (faults not looked at under the sanitizers: they fault in
		 * shadow pages of their own) */
		if (r >= 3 && (UNDER_SANITIZER || faults < (long)(round / 4096 / 4)) && dlast >= round - b1)
			break;
	}
	uint64_t learned = page_dirty_learned();
	CHECKF(r <= ROUNDS, "after %u rounds a round still faults %ld pages in and keeps %llu dirty bytes of %llu"
	       " (learned %llu): the bound did not learn to keep them", ROUNDS, faults, (unsigned long long)dlast,
	       (unsigned long long)round, (unsigned long long)learned);
	CHECKF(learned >= round - b1, "learned %llu bytes after rounds that reused %llu purged",
	       (unsigned long long)learned, (unsigned long long)round);
	CHECKF(learned <= 4 * round, "learned %llu bytes from rounds of %llu", (unsigned long long)learned,
	       (unsigned long long)round);
	/* three periods on, the first of which had the wasted purges: the
	 * next free halves what was learned twice (and gives back what aged) */
	os_clock_advance(3 * 1000 + 1);
	uslab_free(uslab_malloc(BLK));
	uint64_t l2 = page_dirty_learned();
	CHECKF(l2 <= learned / 4, "learned %llu bytes three periods later, %llu before", (unsigned long long)l2,
	       (unsigned long long)learned);
	CHECKF(pinfo().dirty_bytes <= BLK + DIRTY_LOW, "dirty %llu bytes after the decay time",
	       (unsigned long long)pinfo().dirty_bytes);
	/* ... and the bound holds again: a round whose blocks were given back
	 * for their age (nothing to learn from) keeps at most the bound */
	uint64_t d5 = page_round(5);
	CHECKF(d5 <= page_dirty_bound() + BLK, "round 5 kept %llu dirty bytes, bound %llu", (unsigned long long)d5,
	       (unsigned long long)page_dirty_bound());
	os_clock_hold(false);
	page_dirty_max_mb = dmax0;
	page_purge_delay_ms = DECAY_MS;
	settle();
}

/* A decay pass's own frees (an idle part's sheaves, a barn, kept empty
 * slabs: memory unused for a pass already) are due at once
 * (page_age_since), while a block freed before the pass keeps its own
 * deadline. Page blocks directly, with the clock held: no timing. The two
 * blocks freed are ones whose buddies stay allocated, so that neither
 * merges with anything (a merged block takes the younger free time). */
static void test_pass_frees_due_at_once(void)
{
	enum { NB_ = 32, ORD = 6 };
	const size_t bsz = PAGE_SIZE << ORD;   /* 256 KiB */
	unsigned dmax0 = page_dirty_max_mb;
	page_purge_delay_ms = 1000;
	page_dirty_max_mb = 1024;   /* nothing given back for the bound */
	settle();
	os_clock_hold(true);
	uint64_t d0 = pinfo().dirty_bytes;
	void *blk[NB_];
	for (unsigned i = 0; i < NB_; i++)
		CHECK((blk[i] = page_alloc(ORD)) != NULL);
	/* two blocks of different buddy pairs, both buddies ours */
	int pick[2] = { -1, -1 }, np = 0;
	for (unsigned i = 0; i < NB_ && np < 2; i++)
		for (unsigned j = 0; j < NB_; j++)
			if ((uintptr_t)blk[j] == ((uintptr_t)blk[i] ^ bsz) &&
			    (np == 0 || (uintptr_t)blk[pick[0]] != ((uintptr_t)blk[i] ^ bsz))) {
				pick[np++] = (int)i;
				break;
			}
	CHECKF(np == 2, "no two blocks of order %d among %d whose buddies are allocated too", ORD, NB_);
	void *a = blk[pick[0]], *b = blk[pick[1]];
	memset(a, 1, bsz);
	memset(b, 1, bsz);
	page_free(a);   /* before the pass */
	os_clock_advance(10);
	uint64_t pass = os_now_ms();
	page_free(b);   /* during it */
	page_decay();
	uint64_t d1 = pinfo().dirty_bytes;
	CHECKF(d1 >= d0 + 2 * bsz, "dirty %llu bytes, %llu before two frees of 256 KiB: given back young",
	       (unsigned long long)d1, (unsigned long long)d0);
	page_age_since(pass);
	page_decay();
	uint64_t d2 = pinfo().dirty_bytes;
	CHECKF(d2 + bsz <= d1 && d2 >= d0 + bsz,
	       "dirty %llu bytes after the pass's frees were aged, %llu before: the pass's block is due, the "
	       "other not yet", (unsigned long long)d2, (unsigned long long)d1);
	os_clock_advance(1000);   /* the other one's own deadline */
	page_decay();
	CHECKF(pinfo().dirty_bytes + bsz <= d2, "dirty %llu bytes a delay after the first free",
	       (unsigned long long)pinfo().dirty_bytes);
	for (unsigned i = 0; i < NB_; i++)
		if ((int)i != pick[0] && (int)i != pick[1])
			page_free(blk[i]);
	os_clock_hold(false);
	page_dirty_max_mb = dmax0;
	page_purge_delay_ms = DECAY_MS;
	settle();
}

static void test_decay_zero(void)
{
	page_purge_delay_ms = 0;
	size_t rss0 = settle();
	struct burst b;
	burst_alloc(&b, BURST / 4, 5);
	burst_free(&b, 6);
	show("decay_ms 0, after the frees", rss0);
	struct uslab_process_info p = pinfo();
	CHECKF(p.dirty_bytes <= DIRTY_LOW, "decay_ms 0 left %llu dirty bytes", (unsigned long long)p.dirty_bytes);
	page_purge_delay_ms = DECAY_MS;
}

/* A thread asleep with no deadline is woken by new dirty memory, and its
 * pass then gives it back on time. */
static void test_dirty_wakes_thread(void)
{
	page_purge_delay_ms = DECAY_MS;
	settle();
	CHECK(uslab_background_thread(1) == 0);
	/* wait until it sleeps with no deadline (nothing pending) */
	double t0 = check_now();
	while (!atomic_load(&mem_bg_sleeping) && check_now() - t0 < CHECK_HANG_S)
		sleep_ms(10);
	CHECKF(atomic_load(&mem_bg_sleeping), "the thread never slept with no deadline (%.0f s)", CHECK_HANG_S);
	struct bg_stats s0, s1;
	bg_get_stats(&s0);
	/* 4 MiB of page blocks freed: dirty, below decay_dirty_max */
	enum { N = 16 };
	void *big[N];
	for (int i = 0; i < N; i++) {
		big[i] = uslab_malloc(256 * 1024);
		CHECK(big[i] != NULL);
		memset(big[i], 2, 256 * 1024);
	}
	for (int i = 0; i < N; i++)
		uslab_free(big[i]);
	struct uslab_process_info p = pinfo();
	printf("    dirty after freeing 4 MiB of blocks: %.2f MiB\n", (double)p.dirty_bytes / MiB);
	/* the wake-up is what brings it back: asleep with no deadline, the
	 * thread would otherwise never run (about a decay time on an idle
	 * machine; only a hang fails) */
	t0 = check_now();
	double done = -1;
	while (check_now() - t0 < CHECK_HANG_S) {
		if (pinfo().dirty_bytes <= DIRTY_LOW) {
			done = check_now() - t0;
			break;
		}
		sleep_ms(10);
	}
	bg_get_stats(&s1);
	printf("    given back %.2f s later (%llu passes)\n", done, (unsigned long long)(s1.passes - s0.passes));
	CHECKF(done >= 0, "dirty memory not given back in %.0f s", CHECK_HANG_S);
	CHECK(s1.passes > s0.passes);
	CHECK(uslab_background_thread(0) == 0);
}

int main(void)
{
	check_init("test_decay");
	RUN(test_decay_background_thread);
	RUN(test_decay_without_thread);
	RUN(test_dirty_bound_learns);
	RUN(test_pass_frees_due_at_once);
	RUN(test_decay_zero);
	RUN(test_dirty_wakes_thread);
	return 0;
}
