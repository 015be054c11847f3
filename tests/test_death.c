/*
 * Misuse that uslab detects in every build (docs/testing.md rows 18-21): each
 * case runs in a forked child that must die by SIGABRT after writing a line
 * "uslab: fatal: ..." with the right words. The parent stays
 * single-threaded so that forking is safe.
 */
#include "check.h"

#include <pthread.h>

static char global_buf[4096] __attribute__((aligned(4096)));
static uint64_t global_word;

static struct uslab_cache *mk(const char *name, size_t size)
{
	struct uslab_cache *c = uslab_cache_create(name, size, 0, USLAB_NO_MERGE, NULL);
	CHECK(c != NULL);
	return c;
}

/* ---- the harness itself must be able to fail --------------------------- */

static void returns_normally(void *arg)
{
	(void)arg;
}

static void aborts_with_other_text(void *arg)
{
	(void)arg;
	fprintf(stderr, "something else\n");
	abort();
}

static void dies_by_segv(void *arg)
{
	(void)arg;
	fprintf(stderr, "uslab: fatal: double free at 0x0\n");
	raise(SIGSEGV);
}

static void test_harness_can_fail(void)
{
	const char *const needles[] = { "uslab: fatal:", "double free", NULL };
	fprintf(stderr, "(three expected harness mismatches follow)\n");
	CHECK(!check_death_v("returns normally", returns_normally, NULL, needles));
	CHECK(!check_death_v("aborts with other text", aborts_with_other_text, NULL, needles));
	CHECK(!check_death_v("dies by SIGSEGV", dies_by_segv, NULL, needles));
}

/* ---- invalid free: not an object start ------------------------------------ */

static void free_stack(void *arg)
{
	struct uslab_cache *c = mk("death_stack", 64);
	void *keep = uslab_cache_alloc(c);     /* the cache has a slab */
	CHECK(keep != NULL);
	char buf[256] __attribute__((aligned(64)));
	memset(buf, 0, sizeof buf);
	uslab_cache_free(c, buf);
}

static void free_global(void *arg)
{
	struct uslab_cache *c = mk("death_global", 64);
	CHECK(uslab_cache_alloc(c) != NULL);
	uslab_cache_free(c, arg);
}

static void free_malloced(void *arg)
{
	struct uslab_cache *c = mk("death_malloc", 64);
	CHECK(uslab_cache_alloc(c) != NULL);
	void *p = malloc(64);
	CHECK(p != NULL);
	uslab_cache_free(c, p);
}

static void free_interior(void *arg)
{
	size_t off = (size_t)(uintptr_t)arg;
	struct uslab_cache *c = mk("death_interior", 64);
	char *p = uslab_cache_alloc(c);
	CHECK(p != NULL);
	CHECK(uslab_cache_alloc(c) != NULL);
	uslab_cache_free(c, p + off);
}

/* A pointer into a page of a slab past its last object, or into a slab
 * page of a cache whose objects do not start there. */
static void free_interior_big(void *arg)
{
	struct uslab_cache *c = mk("death_interior_big", 3000);
	char *p = uslab_cache_alloc(c);
	CHECK(p != NULL);
	uslab_cache_free(c, p + 2048);
}

static void test_invalid_free(void)
{
	CHECK_DEATH("free of a stack address", free_stack, NULL, "uslab: fatal:", "invalid free");
	CHECK_DEATH("free of a global", free_global, global_buf, "uslab: fatal:", "invalid free");
	CHECK_DEATH("free of a global word", free_global, &global_word, "uslab: fatal:", "invalid free");
	CHECK_DEATH("free of a malloc() pointer", free_malloced, NULL, "uslab: fatal:", "invalid free");
	CHECK_DEATH("free of obj+8", free_interior, (void *)(uintptr_t)8, "uslab: fatal:", "invalid free");
	CHECK_DEATH("free of obj+1", free_interior, (void *)(uintptr_t)1, "uslab: fatal:", "invalid free");
	CHECK_DEATH("free of obj+32", free_interior, (void *)(uintptr_t)32, "uslab: fatal:", "invalid free");
	CHECK_DEATH("free of obj+2048 (size 3000)", free_interior_big, NULL, "uslab: fatal:", "invalid free");
}

/* ---- wrong cache ------------------------------------------------------------ */

static void free_wrong_cache(void *arg)
{
	size_t size_b = (size_t)(uintptr_t)arg;
	struct uslab_cache *a = mk("cache_alpha_A", 64);
	struct uslab_cache *b = mk("cache_bravo_B", size_b);
	void *pb = uslab_cache_alloc(b);     /* both caches have slabs */
	CHECK(pb != NULL);
	void *p = uslab_cache_alloc(a);
	CHECK(p != NULL);
	uslab_cache_free(b, p);
}

static void test_wrong_cache(void)
{
	CHECK_DEATH("free into another cache (other size)", free_wrong_cache, (void *)(uintptr_t)128,
		    "uslab: fatal:", "wrong cache", "cache_alpha_A", "cache_bravo_B");
	CHECK_DEATH("free into another cache (same size)", free_wrong_cache, (void *)(uintptr_t)64,
		    "uslab: fatal:", "wrong cache", "cache_alpha_A", "cache_bravo_B");
}

/* ---- double free ---------------------------------------------------------------- */

/* p is the head of the calling thread's CPU free list. */
static void double_free_cpu_slab(void *arg)
{
	struct uslab_cache *c = mk("death_df_cpu", 64);
	void *q = uslab_cache_alloc(c);
	void *p = uslab_cache_alloc(c);
	CHECK(p && q);
	uslab_cache_free(c, p);
	uslab_cache_free(c, p);
}

/* The same with a large object (a slab of few objects). */
static void double_free_big(void *arg)
{
	struct uslab_cache *c = mk("death_df_big", 100000);
	void *p = uslab_cache_alloc(c);
	CHECK(p != NULL);
	uslab_cache_free(c, p);
	uslab_cache_free(c, p);
}

/* An object in a later 64 KiB slot of a slab of several (kmalloc-32768's
 * slabs are 128 KiB, buddy-aligned: half their objects sit in the second
 * slot, whose record only points back): the free of such an object takes
 * its own checked path (dispatch.c's cpu_free_other), which must report
 * as the inline one does. arg NULL: a double free; else an interior
 * pointer. */
static void later_slot(void *arg)
{
	void *v[8], *x = NULL;
	for (int i = 0; i < 8; i++) {
		CHECK((v[i] = uslab_malloc(30000)) != NULL);
		if (!x && ((uintptr_t)v[i] & 0x1ffff) >= 0x10000)
			x = v[i];
	}
	CHECK(x != NULL);
	if (arg) {
		uslab_free((char *)x + 64);
		return;
	}
	uslab_free(x);
	uslab_free(x);
}

struct remote_arg {
	struct uslab_cache *c;
	void *p, *q;
	pthread_barrier_t *b;     /* NULL: the thread exits at once */
};

static void *remote_alloc_thread(void *arg)
{
	struct remote_arg *r = arg;
	r->q = uslab_cache_alloc(r->c);   /* keeps the slab from becoming empty */
	r->p = uslab_cache_alloc(r->c);
	CHECK(r->p && r->q);
	if (r->b) {
		pthread_barrier_wait(r->b);   /* main frees p twice meanwhile */
		pthread_barrier_wait(r->b);
	}
	return NULL;
}

/* Thread T allocates p from its CPU slab; main frees p (a remote free: p
 * goes to the head of the slab's free list) and frees it again. */
static void double_free_remote(void *arg)
{
	bool thread_alive = arg != NULL;
	struct uslab_cache *c = mk("death_df_remote", 64);
	pthread_barrier_t b;
	struct remote_arg r = { c, NULL, NULL, thread_alive ? &b : NULL };
	if (thread_alive)
		CHECK(pthread_barrier_init(&b, NULL, 2) == 0);
	pthread_t t;
	CHECK(pthread_create(&t, NULL, remote_alloc_thread, &r) == 0);
	if (thread_alive)
		pthread_barrier_wait(&b);
	else
		CHECK(pthread_join(t, NULL) == 0);
	uslab_cache_free(c, r.p);
	uslab_cache_free(c, r.p);
}

/* The object's slab is not the CPU slab: fill slabs, then free an object
 * of the first (full) slab twice. */
static void double_free_other_slab(void *arg)
{
	bool partial = arg != NULL;
	struct uslab_cache *c = mk("death_df_slab", 64);
	struct uslab_cache_info info;
	cache_info(c, &info);
	size_t n = 2 * (size_t)info.objects_per_slab + 1;
	void **objs = calloc(n, sizeof *objs);
	CHECK(objs != NULL);
	for (size_t i = 0; i < n; i++)
		CHECK((objs[i] = uslab_cache_alloc(c)) != NULL);
	if (partial) {
		/* The slab of objs[0] is partial before the double free. */
		uslab_cache_free(c, objs[1]);
		uslab_cache_free(c, objs[2]);
	}
	uslab_cache_free(c, objs[0]);
	uslab_cache_free(c, objs[0]);
}

static void *free_one_thread(void *arg)
{
	void **a = arg;
	uslab_cache_free(a[0], a[1]);
	return NULL;     /* exit hands whatever this thread holds back to the slabs */
}

/* A full slab that is not the CPU slab; a thread frees p from it and exits,
 * so p is the only object on that slab's free list. Main frees p again; the
 * free must be caught at once or, if main only queues it per CPU, when main
 * hands its queue back to the slabs (shrink). */
static void double_free_after_owner_exit(void *arg)
{
	struct uslab_cache *c = mk("death_df_exited", 64);
	struct uslab_cache_info info;
	cache_info(c, &info);
	size_t n = 2 * (size_t)info.objects_per_slab + 1;
	void **objs = calloc(n, sizeof *objs);
	CHECK(objs != NULL);
	for (size_t i = 0; i < n; i++)
		CHECK((objs[i] = uslab_cache_alloc(c)) != NULL);
	void *a[2] = { c, objs[0] };
	pthread_t t;
	CHECK(pthread_create(&t, NULL, free_one_thread, a) == 0);
	CHECK(pthread_join(t, NULL) == 0);
	uslab_cache_free(c, objs[0]);
	(void)uslab_cache_shrink(c);
}

static void test_double_free(void)
{
	CHECK_DEATH("double free on the CPU slab", double_free_cpu_slab, NULL, "uslab: fatal:", "double free");
	CHECK_DEATH("double free of a 100000-byte object", double_free_big, NULL, "uslab: fatal:",
		    "double free");
	CHECK_DEATH("double free in a slab's later slot", later_slot, NULL, "uslab: fatal:", "double free");
	CHECK_DEATH("interior pointer in a slab's later slot", later_slot, (void *)1, "uslab: fatal:",
		    "invalid free");
	CHECK_DEATH("double free remote (owner alive)", double_free_remote, (void *)1, "uslab: fatal:",
		    "double free");
	CHECK_DEATH("double free remote (owner exited)", double_free_remote, NULL, "uslab: fatal:",
		    "double free");
	CHECK_DEATH("double free after the freeing thread exited", double_free_after_owner_exit, NULL,
		    "uslab: fatal:", "double free");
	CHECK_DEATH("double free, full slab not CPU slab", double_free_other_slab, NULL, "uslab: fatal:",
		    "double free");
	CHECK_DEATH("double free, partial slab not CPU slab", double_free_other_slab, (void *)1,
		    "uslab: fatal:", "double free");
}

/* ---- the report is one line ---------------------------------------------------- */

static void test_one_line(void)
{
	struct child_result *r = malloc(sizeof *r);
	CHECK(r != NULL);
	run_in_child(double_free_cpu_slab, NULL, 30, r);
	CHECK(WIFSIGNALED(r->status) && WTERMSIG(r->status) == SIGABRT);
	const char *f = strstr(r->out, "uslab: fatal:");
	CHECK(f != NULL);
	CHECKF(strstr(f, "0x") != NULL, "no address in: %s", f);
	const char *nl = strchr(f, '\n');
	CHECKF(nl && nl[1] == 0, "report is not exactly one line: %s", f);
	free(r);
}

int main(void)
{
	check_init("test_death");
	RUN(test_harness_can_fail);
	RUN(test_invalid_free);
	RUN(test_wrong_cache);
	RUN(test_double_free);
	RUN(test_one_line);
	return 0;
}
