/*
 * Cache merging (the 2015 slab_nomerge thread; docs/design.md "merging").
 *
 * compatible_merge   a second cache of a compatible layout is an alias of the
 *                    first: its own name, get_info.alias_of names the root,
 *                    the root counts it, both serve and free objects, numbers
 *                    are shared
 * no_merge_flag      USLAB_NO_MERGE on either side prevents it
 * ctor_prevents      a constructor on either side prevents it
 * incompatible       a size too far apart or an alignment the stride does not
 *                    keep prevents it
 * size_align_sweep   for many sizes x alignments (and HWCACHE_ALIGN), all
 *                    alive at once so that many merge: every object is at
 *                    least as big and as aligned as asked (each byte of the
 *                    requested size written, neighbours checked), and
 *                    get_info agrees (slab_object_size >= size, align)
 * destroy_orders     destroy alias then root, root then alias (the alias
 *                    keeps working), several aliases in mixed order: nothing
 *                    printed, no leak (the root leaves the stats table, a new
 *                    cache of that layout is a root again, slabs go back)
 * stats_table        uslab_stats_print shows "alias NAME -> ROOT" lines
 * nomerge_option     USLAB_OPTIONS=slab_nomerge (and slub_nomerge), read at
 *                    init: the test binary re-executes itself with the
 *                    variable set and checks in that fresh process that no
 *                    cache merges
 */
#include "check.h"

#include <limits.h>

static void info_of(struct uslab_cache *c, struct uslab_cache_info *in) { cache_info(c, in); }

static bool is_alias_of(struct uslab_cache *c, struct uslab_cache *root)
{
	struct uslab_cache_info in;
	info_of(c, &in);
	return strcmp(in.alias_of, uslab_cache_name(root)) == 0;
}

static bool is_root(struct uslab_cache *c)
{
	struct uslab_cache_info in;
	info_of(c, &in);
	return in.alias_of[0] == 0;
}

static struct uslab_cache *mk(const char *name, size_t size, size_t align, unsigned long flags, void (*ctor)(void *))
{
	struct uslab_cache *c = uslab_cache_create(name, size, align, flags, ctor);
	CHECKF(c != NULL, "create %s: errno %d", name, errno);
	return c;
}

/* ---- compatible caches merge ---------------------------------------------- */

static void compatible_merge(void)
{
	/* 1000 bytes: a size no other test in this process uses. */
	struct uslab_cache *a = mk("merge-a", 1000, 0, 0, NULL);
	struct uslab_cache *b = mk("merge-b", 1000, 0, 0, NULL);
	struct uslab_cache *c = mk("merge-c", 996, 0, 0, NULL);   /* stride 1008 either way */
	CHECK(a != b && b != c);
	CHECK(strcmp(uslab_cache_name(a), "merge-a") == 0);
	CHECK(strcmp(uslab_cache_name(b), "merge-b") == 0);
	CHECK(strcmp(uslab_cache_name(c), "merge-c") == 0);
	CHECK_EQ(uslab_cache_size(b), 1000);
	CHECK_EQ(uslab_cache_size(c), 996);
	CHECK(is_root(a));
	CHECK(is_alias_of(b, a));
	CHECK(is_alias_of(c, a));
	struct uslab_cache_info ia, ib, ic;
	info_of(a, &ia);
	info_of(b, &ib);
	info_of(c, &ic);
	CHECK_EQ(ia.aliases, 2);
	CHECK(strcmp(ib.name, "merge-b") == 0);
	CHECK_EQ(ib.object_size, 1000);
	CHECK_EQ(ic.object_size, 996);
	CHECK_EQ(ib.slab_object_size, ia.slab_object_size);

	/* objects of all three come from the same slabs and are counted once */
	enum { N = 300 };
	void *pa[N], *pb[N], *pc[N];
	for (int i = 0; i < N; i++) {
		pa[i] = uslab_cache_alloc(a);
		pb[i] = uslab_cache_alloc(b);
		pc[i] = uslab_cache_zalloc(c);
		CHECK(pa[i] && pb[i] && pc[i]);
		memset(pa[i], 0xa1, 1000);
		memset(pb[i], 0xb2, 1000);
		for (int k = 0; k < 996; k++)
			CHECK(((unsigned char *)pc[i])[k] == 0);
		memset(pc[i], 0xc3, 996);
	}
	CHECK_EQ(cache_active(a), 3 * N);
	CHECK_EQ(cache_active(b), 3 * N);
	for (int i = 0; i < N; i++) {
		for (int k = 0; k < 1000; k++)
			CHECK(((unsigned char *)pa[i])[k] == 0xa1 && ((unsigned char *)pb[i])[k] == 0xb2);
		uslab_cache_free(a, pa[i]);
		uslab_cache_free(b, pb[i]);
	}
	uslab_cache_free_bulk(c, N, pc);
	CHECK_EQ(cache_active(a), 0);
	CHECK_EQ(uslab_cache_validate(b), 0);
	destroy_silently(c);
	destroy_silently(b);
	destroy_silently(a);
}

/* ---- what prevents merging -------------------------------------------------- */

static void no_merge_flag(void)
{
	struct uslab_cache *a = mk("nomerge-a", 1200, 0, USLAB_NO_MERGE, NULL);
	struct uslab_cache *b = mk("nomerge-b", 1200, 0, 0, NULL);          /* not into a */
	struct uslab_cache *c = mk("nomerge-c", 1200, 0, USLAB_NO_MERGE, NULL); /* not into b */
	struct uslab_cache *d = mk("nomerge-d", 1200, 0, 0, NULL);          /* into b */
	CHECK(is_root(a));
	CHECK(is_root(b));
	CHECK(is_root(c));
	CHECK(is_alias_of(d, b));
	struct uslab_cache_info in;
	info_of(a, &in);
	CHECK_EQ(in.aliases, 0);
	info_of(c, &in);
	CHECK_EQ(in.aliases, 0);
	destroy_silently(d);
	destroy_silently(c);
	destroy_silently(b);
	destroy_silently(a);
}

static void ctor_zero(void *p) { memset(p, 0, 1300); }

static void ctor_prevents(void)
{
	struct uslab_cache *a = mk("ctor-a", 1300, 0, 0, ctor_zero);
	struct uslab_cache *b = mk("ctor-b", 1300, 0, 0, NULL);        /* not into a (a has a ctor) */
	struct uslab_cache *c = mk("ctor-c", 1300, 0, 0, ctor_zero);   /* not into b (c has one) */
	struct uslab_cache *d = mk("ctor-d", 1300, 0, 0, ctor_zero);   /* not into a or c */
	CHECK(is_root(a) && is_root(b) && is_root(c) && is_root(d));
	/* constructed state is kept: the ctor ran on c's objects, not b's rules */
	void *p = uslab_cache_alloc(c);
	CHECK(p != NULL);
	for (int k = 0; k < 1300; k++)
		CHECK(((unsigned char *)p)[k] == 0);
	uslab_cache_free(c, p);
	destroy_silently(d);
	destroy_silently(c);
	destroy_silently(b);
	destroy_silently(a);
}

static void incompatible(void)
{
	struct uslab_cache *a = mk("incompat-a", 1400, 0, 0, NULL);
	struct uslab_cache *b = mk("incompat-b", 1420, 0, 0, NULL);       /* larger than a's stride */
	struct uslab_cache *c = mk("incompat-c", 1400, 1024, 0, NULL);    /* a's stride is not 1024-aligned */
	struct uslab_cache *d = mk("incompat-d", 1300 + 64, 0, 0, NULL);  /* much smaller: would waste */
	CHECK(is_root(a) && is_root(b) && is_root(c) && is_root(d));
	destroy_silently(d);
	destroy_silently(c);
	destroy_silently(b);
	destroy_silently(a);
}

/* ---- the size and alignment guarantee ------------------------------------- */

struct sweep_cache {
	struct uslab_cache *c;
	size_t size, align;
	unsigned long flags;
	void *obj[3];
};

static void sweep_fill(void *p, size_t size, unsigned tag)
{
	unsigned char *b = p;
	for (size_t i = 0; i < size; i++)
		b[i] = (unsigned char)(tag * 7 + i);
}

static bool sweep_ok(const void *p, size_t size, unsigned tag)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < size; i++)
		if (b[i] != (unsigned char)(tag * 7 + i))
			return false;
	return true;
}

static void size_align_sweep(void)
{
	static const size_t aligns[] = { 0, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192 };
	enum { NA = sizeof aligns / sizeof aligns[0] };
	size_t sizes[256];
	unsigned ns = 0;
	for (size_t s = 1; s <= 72; s++)
		sizes[ns++] = s;
	for (size_t s = 73; s <= 4200 && ns < 200; s = s * 23 / 20 + 1)
		sizes[ns++] = s;
	sizes[ns++] = 8191;
	sizes[ns++] = 8192;
	sizes[ns++] = 8200;
	sizes[ns++] = 65536 + 8;
	size_t n = (size_t)ns * NA * 2;
	struct sweep_cache *sc = calloc(n, sizeof *sc);
	CHECK(sc != NULL);
	size_t k = 0, merged = 0;
	for (unsigned i = 0; i < ns; i++) {
		for (unsigned j = 0; j < NA; j++) {
			for (unsigned hw = 0; hw < 2; hw++) {
				struct sweep_cache *e = &sc[k];
				char name[64];
				snprintf(name, sizeof name, "sweep-%zu-%zu%s", sizes[i], aligns[j], hw ? "-hw" : "");
				e->size = sizes[i];
				e->align = aligns[j];
				e->flags = hw ? USLAB_HWCACHE_ALIGN : 0;
				e->c = mk(name, e->size, e->align, e->flags, NULL);
				k++;
			}
		}
	}
	CHECK_EQ(k, n);
	/* Objects of every cache, all alive together, each filled over its
	 * full requested size. */
	for (size_t x = 0; x < n; x++) {
		struct sweep_cache *e = &sc[x];
		struct uslab_cache_info in;
		info_of(e->c, &in);
		if (in.alias_of[0])
			merged++;
		size_t want_align = e->align ? e->align : (e->size >= 16 ? 16 : 8);
		if (e->flags & USLAB_HWCACHE_ALIGN) {
			/* SLAB_HWCACHE_ALIGN: the cache line, or the power-of-two
			 * fraction of it that still exceeds the size */
			size_t ralign = 64;
			while (e->size <= ralign / 2)
				ralign /= 2;
			if (ralign > want_align)
				want_align = ralign;
		}
		CHECKF(in.slab_object_size >= e->size, "%s: stride %zu < size %zu", in.name, in.slab_object_size,
		       e->size);
		/* The stride keeps every object aligned (slabs are page aligned,
		 * or aligned to the alignment when it exceeds a page). An alias
		 * reports its root's numbers, whose own alignment may be smaller
		 * than the alias asked for: only the stride must agree. */
		CHECKF(in.slab_object_size % want_align == 0 &&
		       (in.alias_of[0] || in.align % want_align == 0),
		       "%s: align %zu, stride %zu, asked %zu", in.name, in.align, in.slab_object_size, want_align);
		for (int o = 0; o < 3; o++) {
			void *p = uslab_cache_alloc(e->c);
			CHECK(p != NULL);
			CHECKF((uintptr_t)p % want_align == 0, "%s (%s): object %p not aligned to %zu", in.name,
			       in.alias_of[0] ? in.alias_of : "root", p, want_align);
			sweep_fill(p, e->size, (unsigned)(x * 3 + (size_t)o));
			e->obj[o] = p;
		}
	}
	for (size_t x = 0; x < n; x++) {
		struct sweep_cache *e = &sc[x];
		for (int o = 0; o < 3; o++)
			CHECKF(sweep_ok(e->obj[o], e->size, (unsigned)(x * 3 + (size_t)o)),
			       "cache of size %zu align %zu: object %d overwritten by a neighbour", e->size, e->align, o);
	}
	printf("    %zu caches, %zu of them aliases\n", n, merged);
	CHECKF(merged > n / 4, "only %zu of %zu caches merged", merged, n);
	/* free through the cache each came from, destroy in a shuffled order */
	uint64_t seed = 5;
	for (size_t x = 0; x < n; x++)
		for (int o = 0; o < 3; o++)
			uslab_cache_free(sc[x].c, sc[x].obj[o]);
	for (size_t x = n; x > 1; x--) {
		size_t y = rnd_next(&seed) % x;
		struct sweep_cache t = sc[x - 1];
		sc[x - 1] = sc[y];
		sc[y] = t;
	}
	for (size_t x = 0; x < n; x++)
		destroy_silently(sc[x].c);
	free(sc);
}

/* ---- destroy orders --------------------------------------------------------- */

/* Does the stats table have a row for a real cache of this name? */
static bool has_row(const char *name)
{
	size_t n = strlen(name);
	for (const char *l = check_stats_text(USLAB_STATS_TABLE); *l;) {
		if (!strncmp(l, name, n) && l[n] == ' ')
			return true;
		const char *e = strchr(l, '\n');
		if (!e)
			break;
		l = e + 1;
	}
	return false;
}

static void use(struct uslab_cache *c, int n)
{
	void *p[64];
	CHECK(n <= 64);
	for (int i = 0; i < n; i++) {
		p[i] = uslab_cache_alloc(c);
		CHECK(p[i] != NULL);
		memset(p[i], 0x5a, uslab_cache_size(c));
	}
	for (int i = 0; i < n; i++)
		uslab_cache_free(c, p[i]);
}

static void destroy_orders(void)
{
	/* alias first, then root */
	struct uslab_cache *r = mk("dest-root1", 1500, 0, 0, NULL);
	struct uslab_cache *a = mk("dest-alias1", 1500, 0, 0, NULL);
	CHECK(is_alias_of(a, r));
	use(r, 50);
	use(a, 50);
	CHECK(has_row("dest-root1"));
	destroy_silently(a);
	CHECK(has_row("dest-root1"));
	struct uslab_cache_info in;
	info_of(r, &in);
	CHECK_EQ(in.aliases, 0);
	use(r, 10);
	destroy_silently(r);
	CHECK(!has_row("dest-root1"));
	/* the layout has no root now: a new cache is a root */
	struct uslab_cache *fresh = mk("dest-fresh1", 1500, 0, 0, NULL);
	CHECK(is_root(fresh));
	destroy_silently(fresh);

	/* root first, then alias: the alias keeps working on the root's slabs */
	r = mk("dest-root2", 1500, 0, 0, NULL);
	a = mk("dest-alias2", 1500, 0, 0, NULL);
	struct uslab_cache *a2 = mk("dest-alias2b", 1496, 0, 0, NULL);
	CHECK(is_alias_of(a, r) && is_alias_of(a2, r));
	void *held = uslab_cache_alloc(a);
	CHECK(held != NULL);
	use(r, 30);
	destroy_silently(r);
	CHECK(has_row("dest-root2"));    /* still serves its aliases */
	CHECK(is_alias_of(a, r));
	use(a, 40);
	use(a2, 40);
	/* a destroyed root takes no new aliases */
	fresh = mk("dest-fresh2", 1500, 0, 0, NULL);
	CHECK(is_root(fresh));
	destroy_silently(fresh);
	destroy_silently(a2);
	uslab_cache_free(a, held);
	CHECK_EQ(cache_active(a), 0);
	destroy_silently(a);
	CHECK(!has_row("dest-root2"));

	/* many aliases, destroyed around the root in a mixed order; memory goes
	 * back: the slabs counted by the process info shrink */
	struct uslab_process_info p0 = { .version = USLAB_PROCESS_INFO_VERSION }, p1 = p0;
	CHECK(uslab_process_get_info(&p0) == 0);
	for (int round = 0; round < 20; round++) {
		struct uslab_cache *cs[6];
		for (int i = 0; i < 6; i++) {
			char name[32];
			snprintf(name, sizeof name, "dest-many-%d-%d", round, i);
			cs[i] = mk(name, 1600, 0, 0, NULL);
			if (i)
				CHECK(is_alias_of(cs[i], cs[0]));
			use(cs[i], 64);
		}
		int order[6] = { 3, 0, 5, 1, 4, 2 };
		for (int i = 0; i < 6; i++) {
			int j = order[(i + round) % 6];
			destroy_silently(cs[j]);
		}
		char name[32];
		snprintf(name, sizeof name, "dest-many-%d-0", round);
		CHECK(!has_row(name));
	}
	CHECK(uslab_process_get_info(&p1) == 0);
	/* 20 rounds of 6 x 64 objects of 1600 bytes would be ~12 MiB if kept */
	CHECKF(p1.used_bytes <= p0.used_bytes + 2 * MiB, "page blocks in use grew from %llu to %llu bytes",
	       (unsigned long long)p0.used_bytes, (unsigned long long)p1.used_bytes);

	/* destroying an alias while the root has live objects elsewhere is quiet;
	 * the root's destroy with live objects names them */
	r = mk("dest-root3", 1700, 0, 0, NULL);
	a = mk("dest-alias3", 1700, 0, 0, NULL);
	CHECK(is_alias_of(a, r));
	void *live = uslab_cache_alloc(r);
	destroy_silently(a);
	struct stderr_capture cap;
	char buf[4096];
	stderr_capture_begin(&cap);
	uslab_cache_destroy(r);
	stderr_capture_end(&cap, buf, sizeof buf);
	CHECKF(strstr(buf, "dest-root3") && strstr(buf, "1 live object"), "got: %s", buf);
	uslab_cache_free(r, live);   /* left in place: still usable */
	destroy_silently(r);
	CHECK(!has_row("dest-root3"));
}

/* ---- the stats table ----------------------------------------------------------- */

static void stats_table(void)
{
	struct uslab_cache *r = mk("tbl-root", 1800, 0, 0, NULL);
	struct uslab_cache *a = mk("tbl-alias-one", 1800, 0, 0, NULL);
	struct uslab_cache *b = mk("tbl-alias-two", 1796, 0, 0, NULL);
	use(a, 5);
	const char *t = check_stats_text(USLAB_STATS_TABLE);
	CHECKF(strstr(t, "alias tbl-alias-one -> tbl-root\n") != NULL, "table:\n%s", t);
	CHECKF(strstr(t, "alias tbl-alias-two -> tbl-root\n") != NULL, "table:\n%s", t);
	CHECK(has_row("tbl-root"));
	CHECK(!has_row("tbl-alias-one"));   /* aliases have no row of their own */
	destroy_silently(a);
	t = check_stats_text(USLAB_STATS_TABLE);
	CHECK(strstr(t, "alias tbl-alias-one") == NULL);
	CHECK(strstr(t, "alias tbl-alias-two -> tbl-root\n") != NULL);
	destroy_silently(r);
	t = check_stats_text(USLAB_STATS_TABLE);
	CHECK(strstr(t, "alias tbl-alias-two -> tbl-root\n") != NULL);
	destroy_silently(b);
	t = check_stats_text(USLAB_STATS_TABLE);
	CHECK(strstr(t, "tbl-") == NULL);
}

/* ---- slab_nomerge from USLAB_OPTIONS, in a fresh process -------------------- */

/* Runs in the re-executed binary: no cache merges. */
static int nomerge_child(void)
{
	struct uslab_cache *a = mk("env-a", 1000, 0, 0, NULL);
	struct uslab_cache *b = mk("env-b", 1000, 0, 0, NULL);
	struct uslab_cache *c = mk("env-c", 64, 0, 0, NULL);
	struct uslab_cache *d = mk("env-d", 60, 0, 0, NULL);
	CHECK(is_root(a) && is_root(b) && is_root(c) && is_root(d));
	struct uslab_cache_info in;
	info_of(a, &in);
	CHECK_EQ(in.aliases, 0);
	use(a, 10);
	use(b, 10);
	destroy_silently(a);
	destroy_silently(b);
	destroy_silently(c);
	destroy_silently(d);
	printf("nomerge child ok\n");
	return 0;
}

static void run_self(const char *options, const char *mode, int *status, char *out, size_t outsz)
{
	int fds[2];
	CHECK(pipe(fds) == 0);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		/* The parent has no other thread at this point, so setenv is safe. */
		close(fds[0]);
		dup2(fds[1], 1);
		dup2(fds[1], 2);
		close(fds[1]);
		char *argv[] = { (char *)"test_merge", (char *)mode, NULL };
		setenv("USLAB_OPTIONS", options, 1);
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	close(fds[1]);
	size_t len = 0;
	for (;;) {
		ssize_t r = read(fds[0], out + len, outsz - 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		len += (size_t)r;
		if (len == outsz - 1)
			break;
	}
	out[len] = 0;
	close(fds[0]);
	while (waitpid(pid, status, 0) < 0)
		CHECK(errno == EINTR);
}

static void nomerge_option(void)
{
	static const char *const spellings[] = { "slab_nomerge", "slub_nomerge", "slub_max_order=3 slab_nomerge" };
	for (unsigned i = 0; i < sizeof spellings / sizeof spellings[0]; i++) {
		int status;
		char out[8192];
		run_self(spellings[i], "--nomerge-child", &status, out, sizeof out);
		CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0 && strstr(out, "nomerge child ok"),
		       "USLAB_OPTIONS='%s': child status 0x%x, output:\n%s", spellings[i], status, out);
		CHECKF(strstr(out, "USLAB_OPTIONS") == NULL, "'%s' warned:\n%s", spellings[i], out);
	}
	/* and the control: without the option, the same child sees merging */
	int status;
	char out[8192];
	run_self("", "--nomerge-child", &status, out, sizeof out);
	CHECKF(!(WIFEXITED(status) && WEXITSTATUS(status) == 0), "without slab_nomerge the caches did not merge:\n%s",
	       out);
	CHECKF(strstr(out, "is_root") != NULL, "unexpected failure of the control child:\n%s", out);
}

/* Under slub_debug for every cache: debug caches never merge (as the kernel). */
static void debug_never_merges(void)
{
	struct uslab_cache *a = mk("dbg-merge-a", 1000, 0, 0, NULL);
	struct uslab_cache *b = mk("dbg-merge-b", 1000, 0, 0, NULL);
	struct uslab_cache_info ia;
	info_of(a, &ia);
	CHECK(cache_debugged(&ia));
	CHECK(is_root(a) && is_root(b));
	uslab_cache_destroy(b);
	uslab_cache_destroy(a);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--nomerge-child"))
		return nomerge_child();
	rerun_without_slub_debug(argv, debug_never_merges);
	check_init("test_merge");
	RUN(nomerge_option);
	RUN(compatible_merge);
	RUN(no_merge_flag);
	RUN(ctor_prevents);
	RUN(incompatible);
	RUN(stats_table);
	RUN(destroy_orders);
	RUN(size_align_sweep);
	return 0;
}
