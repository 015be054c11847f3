/*
 * Double frees and frees that must not corrupt allocator state (issue 12,
 * docs/testing.md rows 19-21), in default mode and with
 * USLAB_OPTIONS=hardened.
 * Every misuse runs in a child that must die by SIGABRT with exactly one
 * "uslab: fatal:" line naming the cache and the object.
 *
 * every mode (the double-free mark of the default, obfuscated build; see
 * also test_double_free, run once per mode):
 *   aba           thread T allocates A and B from a fresh cache and exits;
 *                 the main thread frees A, B, A (the pattern)
 *   recent        a free of the same object with 0..3 other frees between
 *   far           the same with 200 other frees between
 *   slab_free     a free of an object that already went back to its slab
 *                 (freed, then shrink)
 *   batch         the same object twice in one free_bulk
 * all caught at the second free.
 *   boundary      the free paths' object check (slab.h's slab_obj_index: one
 *                 multiply, a rotate and a compare with the slab's count)
 *                 against % and / for every stride to 1 KiB and every
 *                 fifteenth multiple of 8 above to 64 KiB (fewer under
 *                 sanitizers), every offset in a slot and 4 KiB below 0
 *                 (a pointer before a colour), with a slot's object count
 *                 and a segment-sized slab's; once, not again hardened
 * hardened mode (a re-exec with USLAB_OPTIONS=hardened):
 *   every case above, plus a free of a slot never allocated; a clean
 *   workload (threads, bulk, shrink) reports nothing; objects keep their
 *   contents.
 */
#include "check.h"
#include "kfence.h"   /* kfence_owns(): KFENCE is on by default */
#include "cpu.h"      /* slab_obj_index(), slab_div_init() (slab.h) */

#include <stdatomic.h>

static bool hardened;

static struct uslab_cache *fresh(const char *name, size_t size)
{
	struct uslab_cache *c = uslab_cache_create(name, size, 0, USLAB_NO_MERGE, NULL);
	CHECK(c != NULL);
	return c;
}

/* Run fn in a child: it must die by SIGABRT with one "uslab: fatal:" line
 * that contains `why`, the cache's name and (if given) the object. */
static void expect_one_report(const char *what, void (*fn)(void *), void *arg, const char *why, const char *cache)
{
	struct child_result *r = malloc(sizeof *r);
	CHECK(r != NULL);
	run_in_child(fn, arg, 30, r);
	char desc[128];
	child_describe(r, desc, sizeof desc);
	unsigned fatal = 0;
	const char *line = NULL;
	for (const char *p = r->out; (p = strstr(p, "uslab: fatal:")) != NULL; p++, fatal++)
		line = p;
	char name[80];
	snprintf(name, sizeof name, "'%s'", cache);
	bool ok = WIFSIGNALED(r->status) && WTERMSIG(r->status) == SIGABRT && fatal == 1 && strstr(line, why) &&
		  strstr(line, name);
	CHECKF(ok, "%s: child %s, %u fatal lines (want 1 with '%s' and %s); stderr:\n%s", what, desc, fatal, why, name,
	       r->out);
	printf("    %-34s %.*s\n", what, (int)strcspn(line, "\n"), line);
	free(r);
}

/* ---- the pattern -------------------------------------------------------- */

static struct uslab_cache *aba_cache;
static void *aba_obj[2];
static void *aba_thread(void *arg)
{
	aba_obj[0] = uslab_cache_alloc(aba_cache);
	aba_obj[1] = uslab_cache_alloc(aba_cache);
	return NULL;
}

static void aba_child(void *arg)
{
	aba_cache = fresh("hd-aba", 256);
	pthread_t t;
	CHECK(pthread_create(&t, NULL, aba_thread, NULL) == 0);
	CHECK(pthread_join(t, NULL) == 0);
	uslab_cache_free(aba_cache, aba_obj[0]);
	uslab_cache_free(aba_cache, aba_obj[1]);
	uslab_cache_free(aba_cache, aba_obj[0]);   /* the double free */
	/* not caught: show what would happen */
	void *x = uslab_cache_alloc(aba_cache), *y = uslab_cache_alloc(aba_cache), *z = uslab_cache_alloc(aba_cache);
	fprintf(stderr, "not caught: %p %p %p\n", x, y, z);
}

/* ---- recent frees ----------------------------------------------------------------- */

static void recent_child(void *arg)
{
	unsigned between = (unsigned)(uintptr_t)arg;
	struct uslab_cache *c = fresh("hd-recent", 64);
	void *a = uslab_cache_alloc(c), *o[8];
	for (unsigned i = 0; i < between; i++)
		o[i] = uslab_cache_alloc(c);
	uslab_cache_free(c, a);
	for (unsigned i = 0; i < between; i++)
		uslab_cache_free(c, o[i]);
	uslab_cache_free(c, a);
	fprintf(stderr, "not caught with %u frees between\n", between);
}

/* ---- a free of an object already back in its slab ------------------------------- */

static void slab_free_child(void *arg)
{
	struct uslab_cache *c = fresh("hd-slab", 96);
	void *keep = uslab_cache_alloc(c), *a = uslab_cache_alloc(c);
	while (kfence_owns(keep) || kfence_owns(a)) {   /* both in one slab (KFENCE samples by default) */
		keep = uslab_cache_alloc(c);
		a = uslab_cache_alloc(c);
	}
	uslab_cache_free(c, a);
	uslab_cache_shrink(c);      /* a goes back onto its slab's free list */
	uslab_cache_free(c, a);     /* a's word is a link (or the mark) */
	fprintf(stderr, "not caught\n");
}

/* ---- twice in one bulk free ------------------------------------------------------ */

static void batch_child(void *arg)
{
	struct uslab_cache *c = fresh("hd-batch", 128);
	void *o[40];
	CHECK_EQ(uslab_cache_alloc_bulk(c, 40, o), 40);
	o[37] = o[5];
	uslab_cache_free_bulk(c, 40, o);
	uslab_cache_shrink(c);
	fprintf(stderr, "not caught\n");
}

/* ---- any distance; hardened: never-allocated slots ------------------------------ */

static void far_child(void *arg)
{
	struct uslab_cache *c = fresh("hd-far", 64);
	void *a = uslab_cache_alloc(c), *o[200];
	for (int i = 0; i < 200; i++)
		o[i] = uslab_cache_alloc(c);
	uslab_cache_free(c, a);
	for (int i = 0; i < 200; i++)
		uslab_cache_free(c, o[i]);
	uslab_cache_free(c, a);
	fprintf(stderr, "not caught\n");
}

static void never_child(void *arg)
{
	struct uslab_cache *c = fresh("hd-never", 64);
	char *a = uslab_cache_alloc(c);
	while (kfence_owns(a))   /* one of a slab */
		a = uslab_cache_alloc(c);
	struct uslab_cache_info in;
	cache_info(c, &in);
	/* the last slot of a's slab: a valid object address, never handed out
	 * (a fresh cache fills the sheaf from the slab's first objects) */
	char *last = (char *)((uintptr_t)a & ~((4096UL << in.order) - 1)) + (in.objects_per_slab - 1) * in.slab_object_size;
	CHECK(last != a);
	uslab_cache_free(c, last);
	fprintf(stderr, "not caught\n");
}

/* A clean multi-threaded workload reports nothing in hardened mode. */
static struct uslab_cache *clean_cache;
static _Atomic(void *) clean_x[64];
static void *clean_worker(void *arg)
{
	uint64_t seed = (uint64_t)(uintptr_t)arg;
	void *mine[64] = { 0 }, *b[32];
	for (int i = 0; i < SCALE(40000, 5000); i++) {
		uint64_t r = rnd_next(&seed);
		unsigned k = (unsigned)(r >> 8) % 64;
		switch (r % 4) {
		case 0:
			if (mine[k]) {
				CHECK(*(uint64_t *)mine[k] == (uintptr_t)mine[k]);
				uslab_cache_free(clean_cache, mine[k]);
				mine[k] = NULL;
			} else {
				mine[k] = uslab_cache_alloc(clean_cache);
				*(uint64_t *)mine[k] = (uintptr_t)mine[k];
			}
			break;
		case 1: {
			void *p = uslab_cache_alloc(clean_cache);
			*(uint64_t *)p = (uintptr_t)p;
			void *old = atomic_exchange(&clean_x[k], p);
			if (old) {
				CHECK(*(uint64_t *)old == (uintptr_t)old);
				uslab_cache_free(clean_cache, old);
			}
			break;
		}
		case 2: {
			size_t n = 1 + (r >> 20) % 32;
			CHECK_EQ(uslab_cache_alloc_bulk(clean_cache, n, b), n);
			uslab_cache_free_bulk(clean_cache, n, b);
			break;
		}
		default:
			if ((r >> 30) % 512 == 0)
				uslab_cache_shrink(clean_cache);
		}
	}
	for (int k = 0; k < 64; k++)
		if (mine[k])
			uslab_cache_free(clean_cache, mine[k]);
	return NULL;
}

static void clean(void)
{
	clean_cache = fresh("hd-clean", 120);
	pthread_t t[4];
	for (uintptr_t i = 0; i < 4; i++)
		CHECK(pthread_create(&t[i], NULL, clean_worker, (void *)(i + 1)) == 0);
	for (int i = 0; i < 4; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	for (int k = 0; k < 64; k++) {
		void *p = atomic_exchange(&clean_x[k], NULL);
		if (p)
			uslab_cache_free(clean_cache, p);
	}
	CHECK_EQ(cache_active(clean_cache), 0);
	CHECK_EQ(uslab_cache_validate(clean_cache), 0);
	destroy_silently(clean_cache);
}

static void boundary(void)
{
	unsigned long wrong = 0, n = 0;
	for (uint32_t stride = 8; stride <= SLOT_SIZE; stride += stride < 1024 ? 8 : SCALE(120, 280)) {
		uint32_t inv, k;
		slab_div_init(stride, &inv, &k);
		CHECK_EQ((uint32_t)(stride >> k) * inv, 1);
		/* a slab of one slot, and the most objects a slab of a segment's size could have */
		uint32_t counts[2] = { (uint32_t)MIN(SLOT_SIZE / stride, SLAB_MAX_OBJECTS),
				       (uint32_t)MIN(SEG_SIZE / stride, SLAB_MAX_OBJECTS) };
		for (int c = 0; c < 2; c++)
			for (uint32_t i = 0; i < SLOT_SIZE + 4096; i++) {
				uint32_t off = i < SLOT_SIZE ? i : (uint32_t)(i - SLOT_SIZE - 4096);   /* then -4096 .. -1 */
				bool want = off % stride == 0 && off / stride < counts[c];
				bool got = slab_obj_index(off, inv, k) < counts[c];
				if (got != want && wrong++ < 5)
					printf("    stride %u, %u objects, offset %u: %d, not %d\n", stride, counts[c], off,
					       got, want);
				n++;
			}
		/* the slow paths' form (slab_off_ok), whose offsets are pointer
		 * differences: a multiple of the stride 4 GiB or more away, or
		 * below the first object, is not an object however its low 32
		 * bits divide */
		struct uslab_cache fake;
		memset(&fake, 0, sizeof fake);
		fake.divinv = inv;
		fake.divk = k;
		for (uint32_t j = 0; j < counts[1]; j += 1 + counts[1] / 7) {
			uintptr_t off = (uintptr_t)j * stride;
			bool near = slab_off_ok(&fake, off, counts[1]);
			bool far = slab_off_ok(&fake, off + ((uintptr_t)1 << 32), counts[1]) ||
				   slab_off_ok(&fake, off + ((uintptr_t)stride << 32), counts[1]) ||
				   slab_off_ok(&fake, off - ((uintptr_t)1 << 32), counts[1]) ||
				   slab_off_ok(&fake, (uintptr_t)0 - stride - off, counts[1]);
			if ((!near || far) && wrong++ < 5)
				printf("    stride %u, object %u: slab_off_ok %d at its offset, %d 4 GiB away\n", stride, j,
				       near, far);
			n += 5;
		}
	}
	printf("    %lu offsets checked\n", n);
	CHECK_EQ(wrong, 0);
}

static void misuse(void)
{
	struct uslab_cache *probe = fresh("hd-probe", 64);
	struct uslab_cache_info in;
	cache_info(probe, &in);
	bool debugged = cache_debugged(&in);
	destroy_silently(probe);
	if (debugged && !hardened) {
		printf("    slub_debug: its own checks (test_debug)\n");
		return;
	}
	expect_one_report("A, B, A (A from another thread)", aba_child, NULL, "double free", "hd-aba");
	for (uintptr_t k = 0; k <= 3; k++) {
		char what[64];
		snprintf(what, sizeof what, "free, %u others, free", (unsigned)k);
		expect_one_report(what, recent_child, (void *)k, "double free", "hd-recent");
	}
	expect_one_report("free, 200 others, free", far_child, NULL, "double free", "hd-far");
	expect_one_report("free of an object back in its slab", slab_free_child, NULL, "double free", "hd-slab");
	expect_one_report("twice in one free_bulk", batch_child, NULL, "double free", "hd-batch");
	if (hardened) {
		/* "double free (object not live)", or "invalid free" where the
		 * guess of the slot's address misses (debug caches' red zones) */
		expect_one_report("free of a never-allocated slot", never_child, NULL, "free", "hd-never");
	}
}

int main(int argc, char **argv)
{
	(void)argc;
	const char *o = getenv("USLAB_OPTIONS");
	hardened = o && strstr(o, "hardened");
	check_init(hardened ? "test_hardening (hardened)" : "test_hardening");
	if (!hardened)
		RUN(boundary);
	RUN(misuse);
	RUN(clean);
	if (!hardened) {   /* then all of it again in hardened mode */
		fflush(NULL);
		char opts[512];
		snprintf(opts, sizeof opts, "%s%shardened", o ? o : "", o && *o ? " " : "");
		setenv("USLAB_OPTIONS", opts, 1);
		execv("/proc/self/exe", argv);
		perror("execv /proc/self/exe");
		return 1;
	}
	return 0;
}
