/*
 * Double frees caught as glibc's tcache catches them (issue 20), in the
 * per-CPU mode named on the command line (CTest runs it once per mode with
 * USLAB_OPTIONS=slub_cpu_mode=MODE added to the variant's options).
 * Every case runs in a child that must die by SIGABRT with exactly one
 * "uslab: fatal:" line saying "double free" and naming the object and its
 * cache:
 *
 *   tcache_cache   glibc's tst-tcfree2 on the cache API: 20 objects
 *                  allocated and freed, then the first freed again
 *   tcache_malloc  the same with uslab_malloc(20) / uslab_free
 *   far            one free, 300 other frees (past a sheaf, an array
 *                  batch, a CPU slab), the same free again
 *   back_in_slab   free, shrink (the object is back on its slab), free
 *   trimmed        the malloc family: free, malloc_trim, free
 *   bulk_twice     one object twice in one free_bulk
 *   bulk_after     free, then the object again in a free_bulk
 *   remote         freed by another thread, then by this one
 *   given_back     free of a slab's last object, shrink (the slab goes
 *                  back to the page allocator), free: "free of a freed
 *                  block" (its pages are free; "double free ... (a freed
 *                  block" when the pointer starts a block), not "invalid
 *                  free"
 *   given_back_malloc  the same for a malloc class block and malloc_trim
 *
 * Each is caught at the second free (the free-pointer word's mark: see
 * FP_TAKEN in src/core/slab.h), in every mode, in the default (obfuscated)
 * build. With slub_debug (the debug variant) every cache is debugged and
 * the debug checks report instead ("Object already free (double free)").
 * A KFENCE sample is freed to the pool, which has its own report: the
 * cases use objects of slabs.
 */
#include "check.h"
#include "kfence.h"   /* kfence_owns(): KFENCE is on by default */

static const char *mode_name = "";

static struct uslab_cache *fresh(const char *name, size_t size)
{
	struct uslab_cache *c = uslab_cache_create(name, size, 0, USLAB_NO_MERGE, NULL);
	CHECK(c != NULL);
	return c;
}

/* An object of a slab (not a KFENCE sample). */
static void *slab_obj(struct uslab_cache *c)
{
	void *p;
	while (kfence_owns(p = uslab_cache_alloc(c)))
		;
	CHECK(p != NULL);
	return p;
}

static void *slab_block(size_t size)
{
	void *p;
	while (kfence_owns(p = uslab_malloc(size)))
		;
	CHECK(p != NULL);
	return p;
}

/* The child names the object the report must name. */
static void expect(const void *p)
{
	fprintf(stderr, "expect %p\n", p);
}

static void expect_report(const char *what, void (*fn)(void *), void *arg, const char *cache, const char *text)
{
	struct child_result *r = malloc(sizeof *r);
	CHECK(r != NULL);
	fflush(NULL);
	run_in_child(fn, arg, 30, r);
	char desc[128];
	child_describe(r, desc, sizeof desc);
	unsigned fatal = 0;
	const char *line = "";
	for (const char *p = r->out; (p = strstr(p, "uslab: fatal:")) != NULL; p++, fatal++)
		line = p;
	size_t len = strcspn(line, "\n");
	char l[512];
	snprintf(l, sizeof l, "%.*s", (int)len, line);
	char want[40] = "";
	const char *e = strstr(r->out, "expect ");
	if (e)
		snprintf(want, sizeof want, "at %.*s ", (int)strcspn(e + 7, "\n"), e + 7);
	bool named = e && strstr(l, want) && (!cache || strstr(l, cache));
	CHECKF(WIFSIGNALED(r->status) && WTERMSIG(r->status) == SIGABRT && fatal == 1 && strstr(l, text) && named,
	       "%s (%s mode): child %s, %u fatal lines (want 1 with '%s', '%s'%s%s); stderr:\n%s", what, mode_name,
	       desc, fatal, text, want, cache ? " and " : "", cache ? cache : "", r->out);
	printf("    %-16s %s\n", what, l);
	free(r);
}

static void expect_double_free(const char *what, void (*fn)(void *), void *arg, const char *cache)
{
	expect_report(what, fn, arg, cache, "double free");
}

/* ---- the cases (each runs in a child) -------------------------------------------- */

static void tcache_cache(void *arg)
{
	struct uslab_cache *c = fresh("df-tcache", 20);
	void *p[20];
	for (int i = 0; i < 20; i++)
		p[i] = slab_obj(c);
	for (int i = 0; i < 20; i++)
		uslab_cache_free(c, p[i]);
	expect(p[0]);
	uslab_cache_free(c, p[0]);
	fprintf(stderr, "not caught\n");
}

static void tcache_malloc(void *arg)
{
	void *p[20];
	for (int i = 0; i < 20; i++)
		p[i] = slab_block(20);
	for (int i = 0; i < 20; i++)
		uslab_free(p[i]);
	expect(p[0]);
	uslab_free(p[0]);
	fprintf(stderr, "not caught\n");
}

static void far(void *arg)
{
	struct uslab_cache *c = fresh("df-far", 64);
	void *a = slab_obj(c), *o[300];
	for (int i = 0; i < 300; i++)
		o[i] = uslab_cache_alloc(c);
	uslab_cache_free(c, a);
	for (int i = 0; i < 300; i++)
		uslab_cache_free(c, o[i]);
	expect(a);
	uslab_cache_free(c, a);
	fprintf(stderr, "not caught\n");
}

static void back_in_slab(void *arg)
{
	struct uslab_cache *c = fresh("df-slab", 96);
	void *keep = slab_obj(c), *a = slab_obj(c);
	(void)keep;   /* keeps a's slab (most likely: the same slab) */
	uslab_cache_free(c, a);
	uslab_cache_shrink(c);
	expect(a);
	uslab_cache_free(c, a);
	fprintf(stderr, "not caught\n");
}

static void trimmed(void *arg)
{
	void *keep = slab_block(48), *a = slab_block(48);
	(void)keep;
	uslab_free(a);
	uslab_malloc_trim(0);
	expect(a);
	uslab_free(a);
	fprintf(stderr, "not caught\n");
}

static void bulk_twice(void *arg)
{
	struct uslab_cache *c = fresh("df-bulk", 128);
	void *o[40];
	CHECK_EQ(uslab_cache_alloc_bulk(c, 40, o), 40);
	o[37] = o[5];
	expect(o[5]);
	uslab_cache_free_bulk(c, 40, o);
	fprintf(stderr, "not caught\n");
}

static void bulk_after(void *arg)
{
	struct uslab_cache *c = fresh("df-bulk2", 128);
	void *o[40];
	CHECK_EQ(uslab_cache_alloc_bulk(c, 40, o), 40);
	uslab_cache_free(c, o[7]);
	expect(o[7]);
	uslab_cache_free_bulk(c, 40, o);
	fprintf(stderr, "not caught\n");
}

static struct uslab_cache *remote_cache;
static void *remote_obj;
static void *remote_thread(void *arg)
{
	uslab_cache_free(remote_cache, remote_obj);
	return NULL;
}

static void remote(void *arg)
{
	remote_cache = fresh("df-remote", 256);
	remote_obj = slab_obj(remote_cache);
	pthread_t t;
	CHECK(pthread_create(&t, NULL, remote_thread, NULL) == 0);
	CHECK(pthread_join(t, NULL) == 0);
	expect(remote_obj);
	uslab_cache_free(remote_cache, remote_obj);
	fprintf(stderr, "not caught\n");
}

/* The segment (4 MiB, aligned) holding p: a freed slab's pages stay
 * uslab's while another block keeps its segment in use. */
static uintptr_t seg_of(const void *p)
{
	return (uintptr_t)p >> 22;
}

static void given_back(void *arg)
{
	void *keep = slab_block(64);   /* keeps the segment mapped */
	struct uslab_cache *c = fresh("df-given", 3000);
	void *a = slab_obj(c);
	CHECK(seg_of(a) == seg_of(keep));
	uslab_cache_free(c, a);
	uslab_cache_shrink(c);   /* a was its slab's only object: the slab goes back */
	expect(a);
	uslab_cache_free(c, a);
	fprintf(stderr, "not caught\n");
}

static void given_back_malloc(void *arg)
{
	void *keep = slab_block(64);
	void *a = slab_block(20000);   /* a class of its own: a's slab holds nothing else */
	CHECK(seg_of(a) == seg_of(keep));
	uslab_free(a);
	uslab_malloc_trim(0);
	expect(a);
	uslab_free(a);
	fprintf(stderr, "not caught\n");
}

static void cases(void)
{
	expect_double_free("tcache_cache", tcache_cache, NULL, "df-tcache");
	expect_double_free("tcache_malloc", tcache_malloc, NULL, "kmalloc-");
	expect_double_free("far", far, NULL, "df-far");
	expect_double_free("back_in_slab", back_in_slab, NULL, "df-slab");
	expect_double_free("trimmed", trimmed, NULL, "kmalloc-");
	expect_double_free("bulk_twice", bulk_twice, NULL, "df-bulk");
	expect_double_free("bulk_after", bulk_after, NULL, "df-bulk2");
	expect_double_free("remote", remote, NULL, "df-remote");
	expect_report("given_back", given_back, NULL, "df-given", "freed block");
	expect_report("given_back_malloc", given_back_malloc, NULL, NULL, "freed block");
}

int main(int argc, char **argv)
{
	mode_name = argc > 1 ? argv[1] : "default";
	check_init("test_double_free");
	const char *o = getenv("USLAB_OPTIONS");
	printf("  mode %s, USLAB_OPTIONS=%s\n", mode_name, o ? o : "(unset)");
#if defined(USLAB_HARDENED) && !USLAB_HARDENED
	printf("SKIP: built with USLAB_HARDENED=OFF (no double-free mark)\n");
	return 77;
#endif
	RUN(cases);
	return 0;
}
