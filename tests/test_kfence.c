/*
 * KFENCE: sampled guard pages (src/debug/kfence.c; docs/testing.md row 29),
 * run with USLAB_OPTIONS=kfence=1 (every allocation sampled while the pool
 * has room).
 * main() puts kfence=1 into USLAB_OPTIONS before the first allocation (and
 * drops a slub_debug token: debug caches are never sampled, which
 * not_sampled checks with a debug cache of its own); children re-executed
 * for the handler-chain cases inherit it.
 *
 * options         kfence, kfence=N, kfence=0, kfence_ms=M, kfence_pool=N and bad values;
 *                 kfence_next_skip is about N (uniform in [N/2, 3N/2))
 * placement       every allocation of a fresh cache is a pool object; both
 *                 placements occur; alignment, usable size (the size asked
 *                 for), zalloc/calloc zero, the constructor runs on each
 *                 pool object; aligned allocations stay aligned
 * not_sampled     objects above a page, debug caches and bulk allocations
 *                 are not pool objects; bulk free takes pool objects
 * realloc         a pool block stays in place within its usable size and
 *                 moves to grow, keeping its contents
 * pool_full_lru   with the pool full, allocations fall back to the slabs;
 *                 freed slots are reused in the order they were freed
 * stats           uslab_process_get_info version 3 counts; a cache's
 *                 active_objects counts its pool objects; version 1 and 2
 *                 callers' structs are not written past their end; the table
 *                 and JSON show KFENCE
 * reports         each in a child, each report's text checked: use after
 *                 free read and write, out of bounds by one byte on either
 *                 side (read and write), canary damage found at free (both
 *                 sides), double free, free of an interior pointer, wrong
 *                 cache, the malloc family's double free, realloc and
 *                 malloc_usable_size of freed or interior pointers
 * fork            an object freed before fork is caught in the child
 * report_continue reports go on: the access completes, one report each
 * handler_chain   a program's own SIGSEGV handler (SA_SIGINFO or plain,
 *                 installed before KFENCE's) still gets its own faults and
 *                 KFENCE still reports; one installed after gets every
 *                 fault (README says so); SIG_DFL and SIG_IGN die by SIGSEGV
 *                 without looping; raise(SIGSEGV) as without uslab
 * threads         thread churn with far more allocations than slots: the
 *                 pool recycles, nothing stays in it, no report; fork while
 *                 threads sample: the child's pool works (fills, recycles)
 *
 * test_kfence_malloc (the same file with KF_MALLOC, linked with
 * libuslab-malloc.a, so that malloc is uslab's) checks that backtrace() and
 * dladdr() allocate nothing once warm (every malloc is a sample with
 * kfence=1, so the sample counters count them), and the libc names on pool
 * blocks.
 *
 * Under ASan and TSan the SIGSEGV default belongs to the sanitizer (its
 * handler is the one KFENCE chains to): the SIG_DFL/SIG_IGN/raise cases are
 * skipped there; under TSan also the fork with threads (fork.c's handler
 * then holds each of the ~50 caches' locks at once, more than TSan's
 * deadlock detector tracks); the rest runs.
 */
#include "check.h"
#ifdef KF_MALLOC   /* the malloc variant runs its own subset */
#pragma GCC diagnostic ignored "-Wunused-function"
#endif

#include "kfence.h"
#include "cpu.h"   /* opt, options_parse() */

#include <dlfcn.h>
#include <execinfo.h>
#include <sys/mman.h>
#ifdef KF_MALLOC
#include <malloc.h>
#endif

#define PAGE 4096UL

static char self_exe[4096];

static struct uslab_cache *mk(const char *name, size_t size, size_t align, unsigned long flags, void (*ctor)(void *))
{
	struct uslab_cache *c = uslab_cache_create(name, size, align, USLAB_NO_MERGE | flags, ctor);
	CHECKF(c != NULL, "create %s", name);
	return c;
}

static void pinfo(struct uslab_process_info *pi)
{
	memset(pi, 0, sizeof *pi);
	pi->version = USLAB_PROCESS_INFO_VERSION;
	CHECK(uslab_process_get_info(pi) == 0);
}

static bool right_placed(const void *p, size_t size) { return ((uintptr_t)p + size) % PAGE == 0; }
static bool left_placed(const void *p) { return (uintptr_t)p % PAGE == 0; }

/* A pool object of c (object size `size`) placed against the right guard
 * (right) or the left one. */
static char *alloc_placed(struct uslab_cache *c, size_t size, bool right)
{
	void *keep[200];
	int nk = 0;
	char *got = NULL;
	while (!got && nk < 200) {
		char *p = uslab_cache_alloc(c);
		CHECK(p != NULL);
		CHECKF(kfence_owns(p), "%p is not a pool object", (void *)p);
		if (right ? right_placed(p, size) : left_placed(p))
			got = p;
		else
			keep[nk++] = p;
	}
	CHECKF(got != NULL, "no %s-placed object in 200 tries", right ? "right" : "left");
	for (int i = 0; i < nk; i++)
		uslab_cache_free(c, keep[i]);
	return got;
}

/* ---- options --------------------------------------------------------------- */

static void test_options(void)
{
	unsigned iv = kfence_interval, pool = kfence_pool_objects;
	struct stderr_capture cap;
	char buf[2048];
	stderr_capture_begin(&cap);
	unsigned ms = kfence_ms;
	options_parse("kfence");
	CHECK_EQ(kfence_interval, KFENCE_BY_TIME);
	options_parse("kfence_ms=250");
	CHECK_EQ(kfence_ms, 250);
	options_parse("kfence_ms=0");
	CHECK_EQ(kfence_ms, 0);
	kfence_ms = ms;
	options_parse("kfence=7");
	CHECK_EQ(kfence_interval, 7);
	options_parse("kfence=0");
	CHECK_EQ(kfence_interval, 0);
	options_parse("kfence=1 kfence_pool=100");
	CHECK_EQ(kfence_interval, 1);
	CHECK_EQ(kfence_pool_objects, 100);
	size_t quiet = stderr_capture_end(&cap, buf, sizeof buf);
	CHECKF(quiet == 0, "good tokens printed: %s", buf);
	static const char *const bad[] = { "kfence_pool", "kfence=x", "kfence=1000000001", "kfence_pool=65536",
					   "kfence=-1", "kfence_ms", "kfence_ms=3600001" };
	for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		stderr_capture_begin(&cap);
		options_parse(bad[i]);
		size_t n = stderr_capture_end(&cap, buf, sizeof buf);
		CHECKF(n > 0 && strstr(buf, bad[i]) && strchr(buf, '\n') == buf + n - 1, "'%s': %s", bad[i], buf);
		CHECK_EQ(kfence_interval, 1);
		CHECK_EQ(kfence_pool_objects, 100);
	}
	/* the count: uniform in [N/2, 3N/2), mean about N; 1 stays 1 */
	kfence_interval = 1000;
	double sum = 0;
	for (int i = 0; i < 20000; i++) {
		unsigned k = kfence_next_skip();
		CHECKF(k >= 500 && k < 1500, "skip %u", k);
		sum += k;
	}
	CHECKF(sum / 20000 > 970 && sum / 20000 < 1030, "mean %.1f", sum / 20000);
	kfence_interval = 1;
	for (int i = 0; i < 100; i++)
		CHECK_EQ(kfence_next_skip(), 1);
	kfence_interval = iv;
	kfence_pool_objects = pool;
}

/* ---- placement, sizes, alignment, constructor ------------------------------------- */

static _Atomic unsigned ctor_runs;
static void ctor_magic(void *p)
{
	((uint32_t *)p)[0] = 0xc0ffee;
	ctor_runs++;
}

static void test_placement(void)
{
	struct uslab_cache *c = mk("kf-place-64", 64, 0, 0, NULL);
	int left = 0, right = 0;
	void *objs[40];
	for (int i = 0; i < 40; i++) {
		char *p = objs[i] = uslab_cache_alloc(c);
		CHECKF(kfence_owns(p), "allocation %d is not sampled with kfence=1", i);
		CHECK((uintptr_t)p % 8 == 0);
		left += left_placed(p);
		right += right_placed(p, 64);
		CHECKF(left_placed(p) || right_placed(p, 64), "%p is against neither guard", (void *)p);
		memset(p, 0x5a, 64);   /* the whole object is usable */
	}
	CHECKF(left > 0 && right > 0, "placements: %d left, %d right", left, right);
	for (int i = 0; i < 40; i++)
		uslab_cache_free(c, objs[i]);

	/* a cache's alignment: the start rounded down, slack on the right */
	struct uslab_cache *a = mk("kf-place-al64", 100, 64, 0, NULL);
	for (int i = 0; i < 20; i++) {
		char *p = objs[i] = uslab_cache_alloc(a);
		CHECK(kfence_owns(p));
		CHECKF((uintptr_t)p % 64 == 0, "%p not 64-aligned", (void *)p);
		size_t tail = PAGE - ((uintptr_t)p % PAGE) - 100;
		CHECKF(left_placed(p) || tail < 64, "right-placed %p leaves %zu bytes", (void *)p, tail);
	}
	for (int i = 0; i < 20; i++)
		uslab_cache_free(a, objs[i]);

	/* zalloc zeroes the canary-filled page; the constructor runs on every
	 * pool object */
	struct uslab_cache *z = mk("kf-place-z", 200, 0, 0, NULL);
	char *q = uslab_cache_zalloc(z);
	CHECK(kfence_owns(q));
	for (int i = 0; i < 200; i++)
		CHECK(q[i] == 0);
	uslab_cache_free(z, q);
	struct uslab_cache *k = mk("kf-place-ctor", 48, 0, 0, ctor_magic);
	unsigned before = ctor_runs;
	for (int i = 0; i < 10; i++) {
		uint32_t *p = objs[i] = uslab_cache_alloc(k);
		CHECK(kfence_owns(p));
		CHECK_EQ(p[0], 0xc0ffee);
		p[0] = 1;
	}
	CHECK_EQ(ctor_runs - before, 10);
	for (int i = 0; i < 10; i++)
		uslab_cache_free(k, objs[i]);

	/* the malloc family: usable size is the size asked for; 16-byte
	 * alignment from 16-byte classes; calloc zeroes; aligned allocations */
	for (size_t n = 1; n <= PAGE; n += (n < 300 ? 1 : 97)) {
		char *p = uslab_malloc(n);
		CHECKF(kfence_owns(p), "malloc(%zu) not sampled", n);
		CHECK_EQ(uslab_malloc_usable_size(p), n);
		if (n > 8)
			CHECKF((uintptr_t)p % 16 == 0 || ((uintptr_t)p % 8 == 0 && n <= 128), "malloc(%zu) = %p", n,
			       (void *)p);
		memset(p, 1, n);
		uslab_free(p);
	}
	char *z2 = uslab_calloc(3, 7);
	CHECK(kfence_owns(z2));
	for (int i = 0; i < 21; i++)
		CHECK(z2[i] == 0);
	uslab_free(z2);
	static const size_t aligns[] = { 16, 32, 64, 128, 256, 512, 1024, 2048, 4096 };
	for (unsigned i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
		for (int rep = 0; rep < 6; rep++) {
			size_t n = 1 + (size_t)rep * 131 % aligns[i];
			void *p = uslab_aligned_alloc(aligns[i], n);
			CHECK(p != NULL);
			CHECKF((uintptr_t)p % aligns[i] == 0, "aligned_alloc(%zu, %zu) = %p", aligns[i], n, p);
			CHECK(uslab_malloc_usable_size(p) >= n);
			if (aligns[i] <= 1024)
				CHECKF(kfence_owns(p), "aligned_alloc(%zu, %zu) not sampled", aligns[i], n);
			memset(p, 2, n);
			uslab_free(p);
			void *m = NULL;
			CHECK(uslab_posix_memalign(&m, aligns[i], n) == 0);
			CHECK((uintptr_t)m % aligns[i] == 0);
			uslab_free(m);
		}
	}
	void *v = uslab_valloc(10);
	CHECK(kfence_owns(v) && left_placed(v) && uslab_malloc_usable_size(v) == PAGE);
	uslab_free(v);
	destroy_silently(c);
	destroy_silently(a);
	destroy_silently(z);
	destroy_silently(k);
}

/* ---- what is not sampled ------------------------------------------------------------ */

static void test_not_sampled(void)
{
	struct uslab_cache *big = mk("kf-ns-big", 5000, 0, 0, NULL);
	struct uslab_cache *dbg = mk("kf-ns-debug", 64, 0, USLAB_RED_ZONE | USLAB_POISON, NULL);
	struct uslab_cache *bulk = mk("kf-ns-bulk", 64, 0, 0, NULL);
	for (int i = 0; i < 10; i++) {
		void *p = uslab_cache_alloc(big), *d = uslab_cache_alloc(dbg), *m = uslab_malloc(5000);
		CHECK(p && d && m);
		CHECK(!kfence_owns(p) && !kfence_owns(d) && !kfence_owns(m));
		uslab_cache_free(big, p);
		uslab_cache_free(dbg, d);
		uslab_free(m);
	}
	void *objs[64];
	CHECK_EQ(uslab_cache_alloc_bulk(bulk, 64, objs), 64);
	for (int i = 0; i < 64; i++)
		CHECK(!kfence_owns(objs[i]));
	/* bulk free takes single allocations from the pool too */
	for (int i = 0; i < 8; i++) {
		uslab_cache_free(bulk, objs[i]);
		objs[i] = uslab_cache_alloc(bulk);
		CHECK(kfence_owns(objs[i]));
	}
	uslab_cache_free_bulk(bulk, 64, objs);
	CHECK_EQ(cache_active(bulk), 0);
	destroy_silently(big);
	destroy_silently(dbg);
	destroy_silently(bulk);
}

/* ---- realloc -------------------------------------------------------------------------- */

static void test_realloc(void)
{
	char *p = uslab_malloc(20);
	CHECK(kfence_owns(p));
	for (int i = 0; i < 20; i++)
		p[i] = (char)i;
	CHECK(uslab_realloc(p, 20) == p);   /* within the usable size: in place (row 8) */
	CHECK(uslab_realloc(p, 10) == p);
	CHECK_EQ(uslab_malloc_usable_size(p), 20);
	char *q = uslab_realloc(p, 21);     /* growing: moved, into the pool again */
	CHECK(q && q != p && kfence_owns(q));
	CHECK_EQ(uslab_malloc_usable_size(q), 21);
	for (int i = 0; i < 20; i++)
		CHECK(q[i] == (char)i);
	char *r = uslab_realloc(q, 3000);
	CHECK(r && r != q);
	for (int i = 0; i < 10; i++)
		CHECK(r[i] == (char)i);
	char *s = uslab_realloc(r, 40000);   /* out of the pool's sizes */
	CHECK(s && !kfence_owns(s));
	for (int i = 0; i < 10; i++)
		CHECK(s[i] == (char)i);
	uslab_free(s);
}

/* ---- pool full, LRU -------------------------------------------------------------------- */

static void test_pool_full_lru(void)
{
	struct uslab_cache *c = mk("kf-lru", 128, 0, 0, NULL);
	struct uslab_process_info pi;
	pinfo(&pi);
	unsigned slots = pi.kfence_slots;
	CHECK(slots >= 16);
	void **objs = calloc(slots + 64, sizeof *objs);
	CHECK(objs != NULL);
	unsigned pooled = 0, n = 0;
	for (; n < slots + 64; n++) {
		objs[n] = uslab_cache_alloc(c);
		CHECK(objs[n] != NULL);
		pooled += kfence_owns(objs[n]);
	}
	pinfo(&pi);
	CHECKF(pi.kfence_in_use == slots, "in use %llu of %u", (unsigned long long)pi.kfence_in_use, slots);
	CHECK(pooled <= slots && pooled > 0);
	CHECK(!kfence_owns(objs[n - 1]));   /* the pool was full: an ordinary object */
	CHECKF(pooled == slots, "%u pool objects of %u slots (some held elsewhere?)", pooled, slots);
	/* free them in a shuffled order: they come back in that order */
	uintptr_t *order = calloc(pooled, sizeof *order);
	unsigned no = 0;
	uint64_t seed = 42;
	for (unsigned i = n; i-- > 1;) {
		unsigned j = (unsigned)(rnd_next(&seed) % (i + 1));
		void *t = objs[i];
		objs[i] = objs[j];
		objs[j] = t;
	}
	for (unsigned i = 0; i < n; i++) {
		if (kfence_owns(objs[i]))
			order[no++] = (uintptr_t)objs[i] & ~(PAGE - 1);
		uslab_cache_free(c, objs[i]);
	}
	CHECK_EQ(no, pooled);
	void **again = calloc(pooled, sizeof *again);
	unsigned k = 0;
	for (unsigned i = 0; i < pooled; i++) {
		again[i] = uslab_cache_alloc(c);
		CHECK(kfence_owns(again[i]));
		k += ((uintptr_t)again[i] & ~(PAGE - 1)) == order[i];
	}
	CHECKF(k == pooled, "reuse followed the free order for %u of %u slots", k, pooled);
	for (unsigned i = 0; i < pooled; i++)
		uslab_cache_free(c, again[i]);
	free(again);
	free(order);
	free(objs);
	destroy_silently(c);
}

/* ---- statistics ------------------------------------------------------------------------ */


static void test_stats(void)
{
	struct uslab_process_info a, b;
	pinfo(&a);
	CHECK_EQ(a.kfence_interval, 1);
	CHECK(a.kfence_slots > 0);
	void *p = uslab_malloc(100);
	CHECK(kfence_owns(p));
	pinfo(&b);
	CHECK_EQ(b.kfence_allocs, a.kfence_allocs + 1);
	CHECK_EQ(b.kfence_in_use, a.kfence_in_use + 1);
	uslab_free(p);
	pinfo(&b);
	CHECK_EQ(b.kfence_in_use, a.kfence_in_use);
	/* a cache's active objects include its pool objects */
	struct uslab_cache *c = mk("kf-stats", 40, 0, 0, NULL);
	void *o[3];
	for (int i = 0; i < 3; i++)
		CHECK(kfence_owns(o[i] = uslab_cache_alloc(c)));
	CHECK_EQ(cache_active(c), 3);
	for (int i = 0; i < 3; i++)
		uslab_cache_free(c, o[i]);
	CHECK_EQ(cache_active(c), 0);
	destroy_silently(c);
	/* a version 1 caller: nothing past rss_bytes is written. Compared with
	 * a snapshot taken just before: the cache's creation and destroy may
	 * have mapped or given back memory (a segment free for decay_ms goes
	 * at the next page free: whether it did depends on the time passed) */
	pinfo(&b);
	struct uslab_process_info v1;
	memset(&v1, 0xab, sizeof v1);
	v1.version = 1;
	CHECK(uslab_process_get_info(&v1) == 0);
	CHECK_EQ(v1.version, 1);
	CHECK(v1.mapped_bytes == b.mapped_bytes);
	const unsigned char *tail = (const unsigned char *)&v1 + offsetof(struct uslab_process_info, kfence_interval);
	for (size_t i = 0; i < sizeof v1 - offsetof(struct uslab_process_info, kfence_interval); i++)
		CHECK(tail[i] == 0xab);
	/* a version 2 caller: nothing past kfence_reports */
	struct uslab_process_info v2;
	memset(&v2, 0xab, sizeof v2);
	v2.version = 2;
	CHECK(uslab_process_get_info(&v2) == 0);
	CHECK_EQ(v2.kfence_interval, 1);
	tail = (const unsigned char *)&v2 + offsetof(struct uslab_process_info, kfence_ms);
	for (size_t i = 0; i < sizeof v2 - offsetof(struct uslab_process_info, kfence_ms); i++)
		CHECK(tail[i] == 0xab);
	CHECK_EQ(b.kfence_ms, 0);   /* kfence=1: by count, not by time */
	CHECK(b.kfence_pool_bytes >= (2 * (uint64_t)b.kfence_slots + 1) * 4096);
	v1.version = 4;
	CHECK(uslab_process_get_info(&v1) == -1 && errno == EINVAL);
	const char *txt = check_stats_text(USLAB_STATS_TABLE);
	CHECKF(strstr(txt, "; KFENCE 1 in 1: ") != NULL, "table:\n%s", txt);
	txt = check_stats_text(USLAB_STATS_JSON);
	CHECKF(strstr(txt, "\"kfence\":{\"interval\":1,\"ms\":0,\"pool_bytes\":") != NULL, "json:\n%.400s", txt);
}

/* ---- reports ----------------------------------------------------------------------------- */

static struct uslab_cache *rc;   /* "kf-victim", 64 bytes */

static void uaf_read(void *arg)
{
	char *p = uslab_cache_alloc(rc);
	p[10] = 7;
	uslab_cache_free(rc, p);
	fprintf(stderr, "read %d\n", ((volatile char *)p)[10]);
}

static void uaf_write(void *arg)
{
	char *p = uslab_cache_alloc(rc);
	uslab_cache_free(rc, p);
	((volatile char *)p)[63] = 1;
}

static void oob_right_read(void *arg)
{
	char *p = alloc_placed(rc, 64, true);
	fprintf(stderr, "read %d\n", ((volatile char *)p)[64]);
}

static void oob_right_write(void *arg)
{
	char *p = alloc_placed(rc, 64, true);
	((volatile char *)p)[64] = 1;
}

static void oob_left_read(void *arg)
{
	char *p = alloc_placed(rc, 64, false);
	fprintf(stderr, "read %d\n", ((volatile char *)p)[-1]);
}

static void oob_left_write(void *arg)
{
	char *p = alloc_placed(rc, 64, false);
	((volatile char *)p)[-1] = 1;
}

static void canary_right(void *arg)
{
	char *p = alloc_placed(rc, 64, false);   /* left-placed: the slack is on the right */
	((volatile char *)p)[64] = 0x55;
	uslab_cache_free(rc, p);
}

static void canary_left(void *arg)
{
	char *p = alloc_placed(rc, 64, true);
	((volatile char *)p)[-3] = 0x55;
	uslab_cache_free(rc, p);
}

/* malloc(13): 16-byte aligned, so right-placed it has 3 bytes of slack */
static void canary_malloc(void *arg)
{
	char *p = NULL;
	for (int i = 0; i < 100 && !p; i++) {
		char *q = uslab_malloc(13);
		if ((uintptr_t)q % PAGE == PAGE - 16)
			p = q;
	}
	CHECK(p != NULL);
	p[13] = 0;   /* one past the request: in the slack */
	uslab_free(p);
}

static void double_free(void *arg)
{
	char *p = uslab_cache_alloc(rc);
	uslab_cache_free(rc, p);
	uslab_cache_free(rc, p);
}

static void interior_free(void *arg)
{
	char *p = uslab_cache_alloc(rc);
	uslab_cache_free(rc, p + 8);
}

static void wrong_cache(void *arg)
{
	struct uslab_cache *other = mk("kf-other", 64, 0, 0, NULL);
	char *p = uslab_cache_alloc(rc);
	uslab_cache_free(other, p);
}

static void malloc_double_free(void *arg)
{
	char *p = uslab_malloc(40);
	CHECK(kfence_owns(p));
	uslab_free(p);
	uslab_free(p);
}

static void realloc_freed(void *arg)
{
	char *p = uslab_malloc(40);
	uslab_free(p);
	uslab_realloc(p, 100);
}

static void usable_interior(void *arg)
{
	char *p = uslab_malloc(40);
	uslab_malloc_usable_size(p + 1);
}

static void test_reports(void)
{
	rc = mk("kf-victim", 64, 0, 0, NULL);
	CHECK_DEATH("use-after-free read", uaf_read, NULL, "uslab: BUG: KFENCE: use-after-free read in ",
		    "Use-after-free read at", "offset 10)", "cache=kf-victim", "allocated by thread", "freed by thread",
		    "s ago:", "uslab: fatal: KFENCE: use-after-free read at");
	CHECK_DEATH("use-after-free write", uaf_write, NULL, "uslab: BUG: KFENCE: use-after-free write in ",
		    "offset 63)", "cache=kf-victim", "uslab: fatal: KFENCE: use-after-free write at");
	CHECK_DEATH("out-of-bounds read, right", oob_right_read, NULL, "BUG: KFENCE: out-of-bounds read in ",
		    "(1B right of kfence-#", "offset 64)", "size=64, cache=kf-victim", "allocated by thread",
		    "uslab: fatal: KFENCE: out-of-bounds read at");
	CHECK_DEATH("out-of-bounds write, right", oob_right_write, NULL, "BUG: KFENCE: out-of-bounds write in ",
		    "(1B right of kfence-#", "offset 64)", "uslab: fatal: KFENCE: out-of-bounds write at");
	CHECK_DEATH("out-of-bounds read, left", oob_left_read, NULL, "BUG: KFENCE: out-of-bounds read in ",
		    "(1B left of kfence-#", "offset -1)", "uslab: fatal: KFENCE: out-of-bounds read at");
	CHECK_DEATH("out-of-bounds write, left", oob_left_write, NULL, "BUG: KFENCE: out-of-bounds write in ",
		    "(1B left of kfence-#", "offset -1)", "uslab: fatal: KFENCE: out-of-bounds write at");
	CHECK_DEATH("canary damage right, at free", canary_right, NULL, "BUG: KFENCE: out-of-bounds write in ",
		    "(1B right of kfence-#", "offset 64, detected at free): [ 0x55", "cache=kf-victim",
		    "uslab: fatal: KFENCE: out-of-bounds write at");
	CHECK_DEATH("canary damage left, at free", canary_left, NULL, "BUG: KFENCE: out-of-bounds write in ",
		    "(3B left of kfence-#", "offset -3, detected at free): [ 0x55", "uslab: fatal: KFENCE: out-of-bounds write");
	CHECK_DEATH("canary damage in malloc slack", canary_malloc, NULL, "BUG: KFENCE: out-of-bounds write in ",
		    "(1B right of kfence-#", "offset 13, detected at free): [ 0x00", "size=13, cache=kmalloc-16");
	CHECK_DEATH("double free", double_free, NULL, "uslab: BUG: KFENCE: double free in ", "Double free of",
		    "in freed kfence-#", "freed by thread", "uslab: fatal: KFENCE: double free at");
	CHECK_DEATH("interior free", interior_free, NULL, "uslab: BUG: KFENCE: invalid free in ",
		    "offset 8, not its start", "uslab: fatal: KFENCE: invalid free at");
	CHECK_DEATH("wrong cache", wrong_cache, NULL, "uslab: BUG: KFENCE: wrong cache in ",
		    "to cache 'kf-other', but it belongs to cache 'kf-victim'", "uslab: fatal: KFENCE: wrong cache at");
	CHECK_DEATH("malloc double free", malloc_double_free, NULL, "BUG: KFENCE: double free",
		    "cache=kmalloc-40", "uslab: fatal: KFENCE: double free at");
	CHECK_DEATH("realloc of a freed block", realloc_freed, NULL, "uslab: fatal: invalid realloc at",
		    "freed KFENCE object");
	CHECK_DEATH("usable size of an interior pointer", usable_interior, NULL,
		    "uslab: fatal: invalid malloc_usable_size at", "not the start of KFENCE object");
}

/* ---- fork --------------------------------------------------------------------------------- */

static char *freed_before_fork;
static void child_reads_freed(void *arg)
{
	fprintf(stderr, "child read %d\n", freed_before_fork[1]);
}

static void test_fork(void)
{
	char *p = uslab_malloc(64);
	CHECK(kfence_owns(p));
	p[1] = 9;
	uslab_free(p);
	freed_before_fork = p;
	CHECK_DEATH("use-after-free in a child", child_reads_freed, NULL, "BUG: KFENCE: use-after-free read",
		    "offset 1)", "cache=kmalloc-64");
}

/* ---- report_continue ----------------------------------------------------------------------- */

static void continue_child(void *arg)
{
	opt.report_continue = true;
	struct uslab_process_info a, b;
	pinfo(&a);
	char *p = uslab_cache_alloc(rc);
	p[3] = 42;
	p[4] = 5;
	uslab_cache_free(rc, p);
	int v = ((volatile char *)p)[3];   /* report, then the read completes */
	int w = ((volatile char *)p)[4];   /* the page is open now: no second report */
	fprintf(stderr, "after use-after-free: %d %d\n", v, w);
	char *r = alloc_placed(rc, 64, true);
	((volatile char *)r)[64] = 1;      /* guard page: report, then the write completes */
	fprintf(stderr, "after out-of-bounds: %d\n", ((volatile char *)r)[64]);
	uslab_cache_free(rc, r);
	char *d = uslab_cache_alloc(rc);
	uslab_cache_free(rc, d);
	uslab_cache_free(rc, d);           /* report, nothing done */
	char *l = alloc_placed(rc, 64, false);
	l[64] = 0;
	uslab_cache_free(rc, l);           /* report, freed still */
	for (int i = 0; i < 600; i++)      /* the pool goes round: the open guard is closed again */
		uslab_cache_free(rc, uslab_cache_alloc(rc));
	pinfo(&b);
	fprintf(stderr, "reports %llu\n", (unsigned long long)(b.kfence_reports - a.kfence_reports));
}

static unsigned count_str(const char *hay, const char *needle)
{
	unsigned n = 0;
	for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
		n++;
	return n;
}

static void test_report_continue(void)
{
	struct child_result *r = malloc(sizeof *r);
	run_in_child(continue_child, NULL, 30, r);
	char desc[128];
	child_describe(r, desc, sizeof desc);
	CHECKF(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0, "child %s:\n%s", desc, r->out);
	CHECKF(strstr(r->out, "after use-after-free: 42 5\n") && strstr(r->out, "after out-of-bounds: 1\n") &&
		       strstr(r->out, "reports 4\n"),
	       "output:\n%s", r->out);
	CHECKF(count_str(r->out, "BUG: KFENCE:") == 4 && count_str(r->out, "KFENCE: continuing (report_continue)") == 4 &&
		       !strstr(r->out, "fatal"),
	       "output:\n%s", r->out);
	printf("    report_continue: 4 reports, the program went on\n");
	free(r);
}

/* ---- the handler chain (children re-executed: KFENCE not yet set up) -------------------------- */

static char *own_page;
static volatile sig_atomic_t own_hits;

static void own_siginfo(int sig, siginfo_t *si, void *ctx)
{
	if ((char *)si->si_addr >= own_page && (char *)si->si_addr < own_page + PAGE) {
		own_hits++;
		mprotect(own_page, PAGE, PROT_READ | PROT_WRITE);
		return;
	}
	static const char msg[] = "program handler: a fault that is not its own\n";
	if (write(2, msg, sizeof msg - 1) < 0)
		_exit(4);
	_exit(3);
}

static void own_plain(int sig)
{
	own_hits++;
	mprotect(own_page, PAGE, PROT_READ | PROT_WRITE);
}

static void install(bool siginfo)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	if (siginfo) {
		sa.sa_sigaction = own_siginfo;
		sa.sa_flags = SA_SIGINFO;
	} else {
		sa.sa_handler = own_plain;
	}
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(SIGSEGV, &sa, NULL) == 0);
}

/* The first allocation sets KFENCE up; returns a freed pool object. */
static char *kfence_up(void)
{
	struct uslab_cache *c = mk("kf-chain", 64, 0, 0, NULL);
	uslab_cache_free(c, uslab_cache_alloc(c));   /* the thread's first: never sampled */
	char *p = uslab_cache_alloc(c);
	CHECKF(kfence_owns(p), "not sampled: is kfence=1 in USLAB_OPTIONS?");
	uslab_cache_free(c, p);
	return p;
}

static void own_fault(void)
{
	((volatile char *)own_page)[5] = 1;
}

static int chain_mode(const char *mode)
{
	own_page = mmap(NULL, PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(own_page != MAP_FAILED);
	char *freed;
	if (!strcmp(mode, "siginfo-before") || !strcmp(mode, "plain-before")) {
		install(mode[0] == 's');
		freed = kfence_up();
		own_fault();
		CHECK_EQ(own_hits, 1);
		fprintf(stderr, "own handler ran\n");
		fprintf(stderr, "read %d\n", ((volatile char *)freed)[0]);   /* KFENCE's report */
		return 0;
	}
	if (!strcmp(mode, "after")) {
		freed = kfence_up();
		install(true);
		own_fault();
		CHECK_EQ(own_hits, 1);
		fprintf(stderr, "own handler ran\n");
		fprintf(stderr, "read %d\n", ((volatile char *)freed)[0]);   /* the program's handler gets it */
		return 0;
	}
	if (!strcmp(mode, "dfl")) {
		kfence_up();
		own_fault();
		return 0;
	}
	if (!strcmp(mode, "ign")) {
		signal(SIGSEGV, SIG_IGN);
		kfence_up();
		raise(SIGSEGV);
		fprintf(stderr, "raise ignored\n");
		own_fault();
		return 0;
	}
	if (!strcmp(mode, "raise")) {
		kfence_up();
		raise(SIGSEGV);
		return 0;
	}
	CHECKF(false, "unknown mode %s", mode);
	return 1;
}

static void exec_mode(void *arg)
{
	char *const argv[] = { self_exe, "--chain", arg, NULL };
	execv(self_exe, argv);
	_exit(127);
}

static void expect_child(const char *mode, bool by_signal, int code, const char *const *needles)
{
	struct child_result *r = malloc(sizeof *r);
	run_in_child(exec_mode, (void *)mode, 20, r);
	char desc[128];
	child_describe(r, desc, sizeof desc);
	bool ok = by_signal ? WIFSIGNALED(r->status) && WTERMSIG(r->status) == code
			    : WIFEXITED(r->status) && WEXITSTATUS(r->status) == code;
	for (const char *const *n = needles; *n; n++)
		ok = ok && strstr(r->out, *n);
	CHECKF(ok, "mode %s: child %s; stderr:\n%s", mode, desc, r->out);
	printf("    %-16s child %s\n", mode, desc);
	free(r);
}

static void test_handler_chain(void)
{
	const char *const before[] = { "own handler ran", "BUG: KFENCE: use-after-free read", NULL };
	expect_child("siginfo-before", true, SIGABRT, before);
	expect_child("plain-before", true, SIGABRT, before);
	const char *const after[] = { "own handler ran", "program handler: a fault that is not its own", NULL };
	expect_child("after", false, 3, after);
	if (UNDER_SANITIZER) {
		printf("    SIG_DFL, SIG_IGN, raise: skipped (the sanitizer's SIGSEGV handler is the default here)\n");
		return;
	}
	const char *const none[] = { NULL };
	expect_child("dfl", true, SIGSEGV, none);
	const char *const ign[] = { "raise ignored", NULL };
	expect_child("ign", true, SIGSEGV, ign);
	expect_child("raise", true, SIGSEGV, none);
}

/* ---- threads ------------------------------------------------------------------------------ */

struct churn_arg {
	struct uslab_cache *c;
	unsigned seed;
	uint64_t pooled;
};

static void *churn_thread(void *arg)
{
	struct churn_arg *a = arg;
	void *objs[40];
	for (int round = 0; round < 5; round++) {
		for (int i = 0; i < 40; i++) {
			objs[i] = (i & 1) ? uslab_cache_alloc(a->c) : uslab_malloc(16 + (size_t)i * 24);
			CHECK(objs[i] != NULL);
			a->pooled += kfence_owns(objs[i]);
			memset(objs[i], i, 16);
		}
		for (int i = 39; i >= 0; i--) {
			if (i & 1)
				uslab_cache_free(a->c, objs[i]);
			else
				uslab_free(objs[i]);
		}
	}
	return NULL;
}

static void test_thread_churn(void)
{
	struct uslab_cache *c = mk("kf-churn", 96, 0, 0, NULL);
	struct uslab_process_info a, b;
	pinfo(&a);
	uint64_t pooled = 0;
	unsigned rounds = SCALE(60, 12);
	for (unsigned r = 0; r < rounds; r++) {
		pthread_t t[4];
		struct churn_arg args[4];
		for (int i = 0; i < 4; i++) {
			args[i] = (struct churn_arg){ c, r * 4 + (unsigned)i, 0 };
			CHECK(pthread_create(&t[i], NULL, churn_thread, &args[i]) == 0);
		}
		for (int i = 0; i < 4; i++) {
			CHECK(pthread_join(t[i], NULL) == 0);
			pooled += args[i].pooled;
		}
	}
	pinfo(&b);
	printf("    %u threads, %llu pool objects through %u slots\n", rounds * 4, (unsigned long long)pooled,
	       b.kfence_slots);
	CHECK(pooled > 4ULL * b.kfence_slots);
	CHECK_EQ(b.kfence_allocs - a.kfence_allocs, pooled);
	CHECK_EQ(b.kfence_in_use, a.kfence_in_use);
	CHECK_EQ(b.kfence_reports, a.kfence_reports);
	destroy_silently(c);
}

/* Fork while threads sample: the child's pool fills and recycles. */
static _Atomic bool stop_sampling;
static void *sampler(void *arg)
{
	struct uslab_cache *c = arg;
	void *objs[8];
	while (!stop_sampling) {
		for (int i = 0; i < 8; i++)
			objs[i] = uslab_cache_alloc(c);
		for (int i = 0; i < 8; i++)
			uslab_cache_free(c, objs[i]);
	}
	return NULL;
}

static void fork_threads_child(void *arg)
{
	struct uslab_cache *c = mk("kf-fork-threads", 64, 0, 0, NULL);
	pthread_t t[3];
	for (int i = 0; i < 3; i++)
		CHECK(pthread_create(&t[i], NULL, sampler, c) == 0);
	struct uslab_process_info pi;
	pinfo(&pi);
	unsigned slots = pi.kfence_slots;
	for (int f = 0; f < SCALE(20, 5); f++) {
		usleep(2000);
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0) {
			/* three threads vanished: at most their 8 live objects and one
			 * busy slot each stay taken */
			void **objs = calloc(slots + 8, sizeof *objs);
			unsigned pooled = 0, again = 0;
			for (unsigned i = 0; i < slots + 8; i++)
				pooled += kfence_owns(objs[i] = uslab_cache_alloc(c));
			for (unsigned i = 0; i < slots + 8; i++)
				uslab_cache_free(c, objs[i]);
			for (unsigned i = 0; i < slots + 8; i++)
				again += kfence_owns(objs[i] = uslab_cache_alloc(c));
			for (unsigned i = 0; i < slots + 8; i++)
				uslab_cache_free(c, objs[i]);
			if (pooled + 3 * 9 < slots || again != pooled) {
				fprintf(stderr, "child: %u then %u pool objects of %u slots\n", pooled, again, slots);
				_exit(1);
			}
			_exit(0);
		}
		int st;
		CHECK(waitpid(pid, &st, 0) == pid);
		CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fork %d: status 0x%x", f, st);
	}
	stop_sampling = true;
	for (int i = 0; i < 3; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
}

static void test_fork_threads(void)
{
	if (UNDER_TSAN) {   /* fork.c then holds every cache's locks at once: above TSan's 64 */
		printf("    skipped under TSan: the fork handler holds more locks than TSan tracks\n");
		return;
	}
	struct child_result *r = malloc(sizeof *r);
	run_in_child(fork_threads_child, NULL, 60, r);
	char desc[128];
	child_describe(r, desc, sizeof desc);
	CHECKF(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0, "child %s:\n%s", desc, r->out);
	free(r);
}

#ifdef KF_MALLOC
/* ---- libuslab-malloc: backtrace() and dladdr() do not allocate once warm ------------------------ */

static uint64_t samples(void)
{
	struct kfence_stats st;
	kfence_get_stats(&st);
	return st.allocs + st.missed;
}

static int deep(int depth, void **frames, int *n);
static int (*volatile deep_call)(int, void **, int *) = deep;   /* no loop made of the recursion */
static int __attribute__((noinline)) deep(int depth, void **frames, int *n)
{
	if (depth)
		return deep_call(depth - 1, frames, n) + 1;
	*n = backtrace(frames, 64);
	return 0;
}

static void test_backtrace_no_alloc(void)
{
	void *p = malloc(24);   /* a sample: warms backtrace() up */
	CHECK(kfence_owns(p));
	free(p);
	uint64_t s0 = samples();
	void *q = malloc(24);
	CHECK_EQ(samples(), s0 + 1);   /* every malloc is counted */
	free(q);
	s0 = samples();
	void *frames[64];
	int n = 0, total = 0;
	for (int i = 0; i < 200; i++) {
		deep(i % 20, frames, &n);
		for (int k = 0; k < n; k++) {
			Dl_info di;
			total += dladdr(frames[k], &di) != 0;
		}
	}
	uint64_t s1 = samples();
	CHECKF(s1 == s0, "backtrace/dladdr allocated %llu times", (unsigned long long)(s1 - s0));
	CHECK(n >= 20 && total > 0);
	printf("    200 backtraces of up to %d frames and %d dladdr calls: no allocation\n", n, total);
}

static void test_libc_names(void)
{
	char *p = malloc(100);
	CHECK(kfence_owns(p));
	CHECK_EQ(malloc_usable_size(p), 100);
	memset(p, 3, 100);
	CHECK(realloc(p, 50) == p);
	p = realloc(p, 150);
	CHECK(kfence_owns(p));
	for (int i = 0; i < 100; i++)
		CHECK(p[i] == 3);
	free(p);
	int *z = calloc(10, sizeof *z);
	CHECK(kfence_owns(z));
	for (int i = 0; i < 10; i++)
		CHECK(z[i] == 0);
	free(z);
	void *a = aligned_alloc(256, 256);
	CHECK(kfence_owns(a) && (uintptr_t)a % 256 == 0);
	free(a);
}

static void libc_double_free(void *arg)
{
	char *p = malloc(33);
	free(p);
	free(p);
}

static void test_libc_reports(void)
{
	CHECK_DEATH("free() twice", libc_double_free, NULL, "BUG: KFENCE: double free", "size=33",
		    "uslab: fatal: KFENCE: double free at");
}
#endif

/* ---- main ---------------------------------------------------------------------------------- */

/* USLAB_OPTIONS from the environment with kfence=1 and without slub_debug;
 * re-executes when that is not what the environment has. */
/* kfence=1 in USLAB_OPTIONS, slub_debug out (debug caches are never
 * sampled: not_sampled checks that with a debug cache of its own). */
static void set_options(char **argv)
{
	static const char *const drop[] = { "slub_debug", "slab_debug", "kfence", NULL };
	const char *env = getenv("USLAB_OPTIONS");
	if (env && (strstr(env, "slub_debug") || strstr(env, "slab_debug")))
		printf("  slub_debug dropped from USLAB_OPTIONS: debug caches are never sampled (not_sampled checks that)\n");
	check_reexec_options(self_exe, argv, drop, "kfence=1");
}

int main(int argc, char **argv)
{
	ssize_t n = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
	CHECK(n > 0);
	self_exe[n] = 0;
	if (argc == 3 && !strcmp(argv[1], "--chain"))
		return chain_mode(argv[2]);
	set_options(argv);   /* before anything is allocated */
#ifdef KF_MALLOC
	check_init("test_kfence_malloc");
	printf("  USLAB_OPTIONS=%s\n", getenv("USLAB_OPTIONS"));
	RUN(test_backtrace_no_alloc);
	RUN(test_libc_names);
	RUN(test_libc_reports);
#else
	check_init("test_kfence");
	printf("  USLAB_OPTIONS=%s\n", getenv("USLAB_OPTIONS"));
	RUN(test_options);   /* before anything is allocated: KFENCE is set up after */
	/* This thread's first allocation makes its CPU parts and starts its
	 * count: every one after it is sampled. */
	uslab_free(uslab_malloc(1));
	RUN(test_placement);
	RUN(test_not_sampled);
	RUN(test_realloc);
	RUN(test_pool_full_lru);
	RUN(test_stats);
	RUN(test_reports);
	RUN(test_fork);
	RUN(test_report_continue);
	RUN(test_handler_chain);
	RUN(test_thread_churn);   /* threads last: the parent forks no more after */
	RUN(test_fork_threads);
#endif
	return 0;
}
