/*
 * slub_debug misuse suite (docs/testing.md rows 16, 19-26, 28, 30): every case
 * runs in a forked child (or, for USLAB_OPTIONS cases, a child that
 * re-executes this program with the options set) and the parent checks how
 * the child ended and what it wrote to stderr:
 *
 *   - a fatal report dies by SIGABRT, has exactly one line
 *     "uslab: BUG <cache>: <problem>", INFO lines, and ends with
 *     "uslab: fatal: <problem> at <ptr> (cache '<cache>')";
 *   - validation and report_continue print the same report but go on.
 *
 * This test sets its own debug flags per cache: a USLAB_OPTIONS in the
 * environment (the debug variant of scripts/test.sh sets slub_debug=FZPU for
 * every cache) is dropped by re-executing without it, since extra letters
 * would change the expected reports.
 *
 * The parent stays single-threaded so that forking is safe.
 */
#include "check.h"

#include "cpu.h"
#include "debug.h"   /* debug_set_orig_size(), struct uslab_cache, page_obj_slab() */

#include <pthread.h>

#define FZPU (USLAB_CONSISTENCY_CHECKS | USLAB_RED_ZONE | USLAB_POISON | USLAB_STORE_USER)

static struct uslab_cache *mkd(const char *name, size_t size, unsigned long flags)
{
	struct uslab_cache *c = uslab_cache_create(name, size, 0, USLAB_NO_MERGE | flags, NULL);
	CHECK(c != NULL);
	return c;
}

static void *xalloc(struct uslab_cache *c)
{
	void *p = uslab_cache_alloc(c);
	CHECK(p != NULL);
	return p;
}

/* The child tells the parent which object the report must name. */
static void say_obj(const void *p)
{
	fprintf(stderr, "OBJ=%p\n", p);
	fflush(stderr);
}

/* ---- report checks ----------------------------------------------------------- */

static unsigned count_lines(const char *out, const char *prefix)
{
	unsigned n = 0;
	size_t k = strlen(prefix);
	for (const char *l = out; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l))
		if (strncmp(l, prefix, k) == 0)
			n++;
	return n;
}

/* The last line of out (without its newline) into buf. */
static void last_line(const char *out, char *buf, size_t size)
{
	size_t len = strlen(out);
	while (len && out[len - 1] == '\n')
		len--;
	size_t start = len;
	while (start && out[start - 1] != '\n')
		start--;
	size_t n = MIN(len - start, size - 1);
	memcpy(buf, out + start, n);
	buf[n] = 0;
}

/* The address the child announced with say_obj(), as text, or "". */
static void announced_obj(const char *out, char *buf, size_t size)
{
	const char *o = strstr(out, "OBJ=");
	buf[0] = 0;
	if (o)
		snprintf(buf, size, "%.*s", (int)strcspn(o + 4, "\n"), o + 4);
}

/*
 * Is `out` one kernel-shaped report for `cache` and `bug`? NULL if so, else
 * what is wrong. fatal: it must end with the "uslab: fatal:" line.
 */
static const char *report_shape(const char *out, const char *cache, const char *bug, bool fatal)
{
	static char why[512];
	char want[256];
	snprintf(want, sizeof want, "uslab: BUG %s: %s\n", cache, bug);
	if (!strstr(out, want)) {
		snprintf(why, sizeof why, "no line '%.*s'", (int)strlen(want) - 1, want);
		return why;
	}
	if (count_lines(out, "uslab: BUG ") != 1)
		return "not exactly one BUG line";
	if (count_lines(out, "uslab: INFO: Slab ") != 1 || count_lines(out, "uslab: INFO: Object ") != 1)
		return "no INFO: Slab / INFO: Object lines";
	if (!strstr(out, "uslab: =====") || !strstr(out, "uslab: -----"))
		return "no ===== / ----- frame";
	if (!fatal)
		return NULL;
	char last[512];
	last_line(out, last, sizeof last);
	snprintf(want, sizeof want, "uslab: fatal: %s at 0x", bug);
	if (strncmp(last, want, strlen(want)) != 0) {
		snprintf(why, sizeof why, "last line is not '%s...': '%s'", want, last);
		return why;
	}
	snprintf(want, sizeof want, "(cache '%s')", cache);
	size_t ll = strlen(last), wl = strlen(want);
	if (ll < wl || strcmp(last + ll - wl, want) != 0)
		return "the fatal line does not end with the cache name";
	char obj[64];
	announced_obj(out, obj, sizeof obj);
	if (obj[0]) {
		snprintf(want, sizeof want, " at %s ", obj);
		if (!strstr(last, want))
			return "the fatal line does not name the object the child announced";
	}
	if (count_lines(out, "uslab: fatal:") != 1)
		return "not exactly one fatal line";
	return NULL;
}

/*
 * Run fn(arg) in a child that must die by SIGABRT with a kernel-shaped
 * report of `bug` in `cache`, containing every extra needle too.
 */
static bool check_report_v(const char *what, void (*fn)(void *), void *arg, const char *cache, const char *bug,
			   const char *const *needles)
{
	struct child_result *r = malloc(sizeof *r);
	CHECK(r != NULL);
	run_in_child(fn, arg, 30, r);
	const char *why = NULL;
	if (!WIFSIGNALED(r->status) || WTERMSIG(r->status) != SIGABRT)
		why = "the child did not die by SIGABRT";
	if (!why)
		why = report_shape(r->out, cache, bug, true);
	for (const char *const *n = needles; !why && *n; n++)
		if (!strstr(r->out, *n))
			why = *n;   /* the missing needle */
	char desc[128];
	child_describe(r, desc, sizeof desc);
	if (why)
		fprintf(stderr, "report test '%s': child %s: %s; its stderr:\n%s\n", what, desc, why, r->out);
	else
		printf("    %-44s reported: BUG %s: %s\n", what, cache, bug);
	free(r);
	return why == NULL;
}

#define CHECK_REPORT(what, fn, arg, cache, bug, ...) \
	do { \
		const char *const check_needles_[] = { __VA_ARGS__ NULL }; \
		CHECKF(check_report_v(what, fn, arg, cache, bug, check_needles_), "%s", what); \
	} while (0)

/* Run fn(arg) in a child that must exit 0; its stderr into r. */
static void run_ok(const char *what, void (*fn)(void *), void *arg, struct child_result *r)
{
	run_in_child(fn, arg, 60, r);
	char desc[128];
	child_describe(r, desc, sizeof desc);
	CHECKF(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0, "%s: child %s; stderr:\n%s", what, desc, r->out);
}

/* ---- children that run with USLAB_OPTIONS: this program, re-executed ----------- */

struct scenario {
	const char *name;
	void (*fn)(void *);
};
static const struct scenario *scenario_find(const char *name);

static char self_exe[4096];

struct exec_arg {
	const char *name, *options;
};

/* In the child: become scenario `name` with USLAB_OPTIONS set. */
static void exec_scenario(void *p)
{
	const struct exec_arg *a = p;
	setenv("USLAB_OPTIONS", a->options, 1);
	execl(self_exe, self_exe, "--scenario", a->name, (char *)NULL);
	_exit(126);
}

/* Run scenario `name` in a fresh process with USLAB_OPTIONS=options. */
static void run_exec(const char *name, const char *options, unsigned timeout_s, struct child_result *res)
{
	struct exec_arg a = { name, options };
	run_in_child(exec_scenario, &a, timeout_s, res);
}

/* ==== double free (row 19, 20) ================================================== */

struct df_arg {
	const char *cache;
	unsigned long flags;
	size_t size;
};

static void df_immediate(void *arg)
{
	struct df_arg *a = arg;
	struct uslab_cache *c = mkd(a->cache, a->size, a->flags);
	void *q = xalloc(c), *p = xalloc(c);
	(void)q;
	say_obj(p);
	uslab_cache_free(c, p);
	uslab_cache_free(c, p);
}

/* Other objects freed in between: p is deep in the free list. */
static void df_delayed(void *arg)
{
	struct df_arg *a = arg;
	struct uslab_cache *c = mkd(a->cache, a->size, a->flags);
	void *keep = xalloc(c), *p = xalloc(c), *o[10];
	(void)keep;
	for (int i = 0; i < 10; i++)
		o[i] = xalloc(c);
	say_obj(p);
	uslab_cache_free(c, p);
	for (int i = 0; i < 10; i++)
		uslab_cache_free(c, o[i]);
	for (int i = 0; i < 5; i++)
		o[i] = xalloc(c);   /* allocations in between too */
	uslab_cache_free(c, p);
}

/* A shrink between the two frees (the slab survives: `keep` is live). */
static void df_after_shrink(void *arg)
{
	struct df_arg *a = arg;
	struct uslab_cache *c = mkd(a->cache, a->size, a->flags);
	void *keep = xalloc(c), *p = xalloc(c);
	(void)keep;
	say_obj(p);
	uslab_cache_free(c, p);
	CHECK(uslab_cache_shrink(c) == 1);
	uslab_cache_free(c, p);
}

struct obj_ref {
	struct uslab_cache *c;
	void *p;
};

static void *free_in_thread(void *arg)
{
	struct obj_ref *o = arg;
	uslab_cache_free(o->c, o->p);
	return NULL;
}

/* Freed by main, freed again by another thread. */
static void df_other_thread(void *arg)
{
	struct df_arg *a = arg;
	struct uslab_cache *c = mkd(a->cache, a->size, a->flags);
	void *keep = xalloc(c), *p = xalloc(c);
	(void)keep;
	say_obj(p);
	uslab_cache_free(c, p);
	struct obj_ref o = { c, p };
	pthread_t t;
	CHECK(pthread_create(&t, NULL, free_in_thread, &o) == 0);
	pthread_join(t, NULL);
}

/* Freed by another thread (which exits), freed again by main. */
static void df_thread_then_main(void *arg)
{
	struct df_arg *a = arg;
	struct uslab_cache *c = mkd(a->cache, a->size, a->flags);
	void *keep = xalloc(c), *p = xalloc(c);
	(void)keep;
	say_obj(p);
	struct obj_ref o = { c, p };
	pthread_t t;
	CHECK(pthread_create(&t, NULL, free_in_thread, &o) == 0);
	CHECK(pthread_join(t, NULL) == 0);
	uslab_cache_free(c, p);
}

#define DF "Object already free (double free)"

static void test_double_free(void)
{
	struct df_arg fzpu = { "dbg_df", FZPU, 64 }, f = { "dbg_df_F", USLAB_CONSISTENCY_CHECKS, 64 },
		      z = { "dbg_df_Z", USLAB_RED_ZONE, 64 }, big = { "dbg_df_big", FZPU, 100000 },
		      small = { "dbg_df_8", FZPU, 8 };
	CHECK_REPORT("immediate (FZPU)", df_immediate, &fzpu, "dbg_df", DF, "uslab: INFO: Allocated in 0x",
		     "uslab: INFO: Freed in 0x", "uslab: Redzone ", "uslab: Object ", "FIX dbg_df: aborting",);
	CHECK_REPORT("immediate (F)", df_immediate, &f, "dbg_df_F", DF, );
	CHECK_REPORT("immediate (Z)", df_immediate, &z, "dbg_df_Z", DF, );
	CHECK_REPORT("immediate, 8-byte objects", df_immediate, &small, "dbg_df_8", DF, );
	CHECK_REPORT("immediate, 100000-byte objects", df_immediate, &big, "dbg_df_big", DF, );
	CHECK_REPORT("delayed (FZPU)", df_delayed, &fzpu, "dbg_df", DF, "uslab: INFO: Freed in 0x", );
	CHECK_REPORT("delayed (F)", df_delayed, &f, "dbg_df_F", DF, );
	CHECK_REPORT("delayed (Z)", df_delayed, &z, "dbg_df_Z", DF, );
	CHECK_REPORT("after a shrink (FZPU)", df_after_shrink, &fzpu, "dbg_df", DF, );
	CHECK_REPORT("second free by another thread", df_other_thread, &fzpu, "dbg_df", DF,
		     "uslab: INFO: Freed in 0x", );
	CHECK_REPORT("first free by another thread", df_thread_then_main, &fzpu, "dbg_df", DF, );
	CHECK_REPORT("second free by another thread (F)", df_other_thread, &f, "dbg_df_F", DF, );
}

/* ==== invalid pointers, wrong cache (rows 18, 21) ================================ */

static void free_ptr(void *arg)
{
	intptr_t off = (intptr_t)arg;
	struct uslab_cache *c = mkd("dbg_invalid", 64, FZPU);
	char *p = xalloc(c);
	(void)xalloc(c);
	uslab_cache_free(c, p + off);
}

static void free_stack(void *arg)
{
	struct uslab_cache *c = mkd("dbg_invalid", 64, FZPU);
	(void)xalloc(c);
	char buf[128] __attribute__((aligned(64)));
	memset(buf, 0, sizeof buf);
	uslab_cache_free(c, buf);
}

struct wc_arg {
	unsigned long flags_a, flags_b;
};

static void free_wrong_cache(void *arg)
{
	struct wc_arg *w = arg;
	struct uslab_cache *a = mkd("dbg_wc_alpha", 64, w->flags_a);
	struct uslab_cache *b = mkd("dbg_wc_bravo", 64, w->flags_b);
	(void)xalloc(b);
	void *p = xalloc(a);
	uslab_cache_free(b, p);
}

static void test_invalid_and_wrong(void)
{
	CHECK_DEATH("stack pointer (FZPU)", free_stack, NULL, "uslab: fatal: invalid free at 0x", "dbg_invalid");
	CHECK_DEATH("interior obj+8 (FZPU)", free_ptr, (void *)(intptr_t)8, "uslab: fatal: invalid free at 0x",
		    "dbg_invalid");
	CHECK_DEATH("interior obj+1 (FZPU)", free_ptr, (void *)(intptr_t)1, "uslab: fatal: invalid free",
		    "dbg_invalid");
	CHECK_DEATH("obj+64: the right red zone", free_ptr, (void *)(intptr_t)64, "uslab: fatal: invalid free",
		    "dbg_invalid");
	CHECK_DEATH("obj-8: the left red zone", free_ptr, (void *)(intptr_t)-8, "uslab: fatal: invalid free",
		    "dbg_invalid");
	struct wc_arg both = { FZPU, FZPU }, from_dbg = { FZPU, 0 }, to_dbg = { 0, FZPU };
	CHECK_DEATH("wrong cache, both debug", free_wrong_cache, &both, "uslab: fatal: wrong cache",
		    "'dbg_wc_alpha'", "'dbg_wc_bravo'");
	CHECK_DEATH("wrong cache, debug object to plain cache", free_wrong_cache, &from_dbg,
		    "uslab: fatal: wrong cache", "'dbg_wc_alpha'", "'dbg_wc_bravo'");
	CHECK_DEATH("wrong cache, plain object to debug cache", free_wrong_cache, &to_dbg,
		    "uslab: fatal: wrong cache", "'dbg_wc_alpha'", "'dbg_wc_bravo'");
}

/* ==== overflows: red zones (rows 25, 26) ========================================= */

struct oob_arg {
	const char *cache;
	unsigned long flags;
	size_t size;
	long off;        /* first byte written, from the object */
	size_t len;      /* bytes written */
};

static void oob(void *arg)
{
	struct oob_arg *o = arg;
	struct uslab_cache *c = mkd(o->cache, o->size, o->flags);
	char *keep = xalloc(c), *p = xalloc(c);
	(void)keep;
	memset(p, 0x11, o->size);   /* the whole object is the caller's */
	say_obj(p);
	memset(p + o->off, 0x41, o->len);
	uslab_cache_free(c, p);
}

static void test_overflow(void)
{
	static struct oob_arg r1 = { "dbg_oob", USLAB_RED_ZONE, 64, 64, 1 }, r8 = { "dbg_oob", USLAB_RED_ZONE, 64, 64, 8 },
			      l1 = { "dbg_oob", USLAB_RED_ZONE, 64, -1, 1 }, l8 = { "dbg_oob", USLAB_RED_ZONE, 64, -8, 8 },
			      r1f = { "dbg_oob_fzpu", FZPU, 64, 64, 1 }, l8f = { "dbg_oob_fzpu", FZPU, 64, -8, 8 },
			      r1odd = { "dbg_oob_20", USLAB_RED_ZONE, 20, 20, 1 },
			      r8odd = { "dbg_oob_20", FZPU, 20, 20, 8 },
			      l16 = { "dbg_oob", USLAB_RED_ZONE, 64, -16, 1 };
	const char *R = "Right Redzone overwritten", *L = "Left Redzone overwritten";
	CHECK_REPORT("1 byte right (Z)", oob, &r1, "dbg_oob", R, "@offset=64. First byte 0x41 instead of 0xcc", );
	CHECK_REPORT("8 bytes right (Z)", oob, &r8, "dbg_oob", R, "@offset=64. First byte 0x41 instead of 0xcc", );
	CHECK_REPORT("1 byte left (Z)", oob, &l1, "dbg_oob", L, "@offset=-1. First byte 0x41 instead of 0xcc", );
	CHECK_REPORT("8 bytes left (Z)", oob, &l8, "dbg_oob", L, "@offset=-8. First byte 0x41 instead of 0xcc", );
	CHECK_REPORT("first byte of the left zone (Z)", oob, &l16, "dbg_oob", L, "@offset=-16. First byte 0x41", );
	CHECK_REPORT("1 byte right (FZPU)", oob, &r1f, "dbg_oob_fzpu", R, "@offset=64. First byte 0x41",
		     "uslab: INFO: Allocated in 0x", );
	CHECK_REPORT("8 bytes left (FZPU)", oob, &l8f, "dbg_oob_fzpu", L, "@offset=-8. First byte 0x41", );
	CHECK_REPORT("1 byte right of a 20-byte object (Z)", oob, &r1odd, "dbg_oob_20", R,
		     "@offset=20. First byte 0x41 instead of 0xcc", );
	CHECK_REPORT("8 bytes right of a 20-byte object (FZPU)", oob, &r8odd, "dbg_oob_20", R, "@offset=20. ", );
}

/* ---- the slack of a kmalloc-like class: an 18-byte request in 32 bytes ------------ */

static void slack(void *arg)
{
	size_t write_len = (size_t)(uintptr_t)arg;   /* bytes written from offset 0 */
	struct uslab_cache *c = mkd("dbg_kmalloc-32", 32, USLAB_RED_ZONE);
	char *keep = xalloc(c), *p = xalloc(c);
	(void)keep;
	debug_set_orig_size(c, p, 18);
	say_obj(p);
	memset(p, 0x41, write_len);
	uslab_cache_free(c, p);
	CHECK(uslab_cache_validate(c) == 0);
}

static void test_slack(void)
{
	CHECK_REPORT("byte 18 of an 18-byte request (32-byte class)", slack, (void *)(uintptr_t)19,
		     "dbg_kmalloc-32", "Right Redzone overwritten", "@offset=18. First byte 0x41 instead of 0xcc", );
	CHECK_REPORT("bytes 18..31 of an 18-byte request", slack, (void *)(uintptr_t)32, "dbg_kmalloc-32",
		     "Right Redzone overwritten", "@offset=18. ", );
	struct child_result *r = malloc(sizeof *r);
	CHECK(r != NULL);
	run_ok("the 18 requested bytes written", slack, (void *)(uintptr_t)18, r);
	CHECKF(count_lines(r->out, "uslab: ") == 0, "writing the requested bytes was reported:\n%s", r->out);
	free(r);
}

#ifdef USLAB_HAVE_MALLOC
/* uslab_malloc(18) under USLAB_OPTIONS=slub_debug: the class's slack past
 * 18 bytes is red zone. */
static void malloc_slack(void *arg)
{
	char *p = uslab_malloc(18);
	CHECK(p != NULL);
	say_obj(p);
	memset(p, 0x41, 19);
	uslab_free(p);
}

/* Row 10: every byte malloc_usable_size() admits to is the caller's, with
 * slub_debug too. */
static void malloc_usable(void *arg)
{
	char *p = uslab_malloc(18);
	CHECK(p != NULL);
	size_t u = uslab_malloc_usable_size(p);
	CHECK(u >= 18);
	memset(p, 0x41, u);
	uslab_free(p);
	fprintf(stderr, "usable %zu\n", u);
}
#endif

static void test_malloc_slack(void)
{
#ifdef USLAB_HAVE_MALLOC
	struct child_result *r = malloc(sizeof *r);
	CHECK(r != NULL);
	run_exec("malloc_slack", "slub_debug=FZPU", 30, r);
	CHECKF(WIFSIGNALED(r->status) && WTERMSIG(r->status) == SIGABRT, "uslab_malloc(18) overflow: stderr:\n%s",
	       r->out);
	CHECKF(strstr(r->out, "Right Redzone overwritten") && strstr(r->out, "@offset=18. ") &&
		       strstr(r->out, "uslab: fatal: Right Redzone overwritten at 0x"),
	       "uslab_malloc(18), byte 18 written: stderr:\n%s", r->out);
	printf("    uslab_malloc(18) + 1 byte reported\n");
	run_exec("malloc_usable", "slub_debug=FZPU", 30, r);
	CHECKF(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0 && count_lines(r->out, "uslab: ") == 0,
	       "uslab_malloc(18) under slub_debug, all usable bytes written: stderr:\n%s", r->out);
	printf("    uslab_malloc(18): all usable bytes written, nothing reported (%s)\n", r->out);
	free(r);
#else
	printf("    skipped: no malloc family (src/malloc.c) in this tree\n");
#endif
}

/* ==== write after free: poison (row 24) ========================================== */

struct uaf_arg {
	const char *cache;
	unsigned long flags;
	size_t off;      /* byte damaged after the free */
	unsigned char v;
	bool validate;   /* found by uslab_cache_validate() instead of allocation */
};

static void uaf(void *arg)
{
	struct uaf_arg *u = arg;
	struct uslab_cache *c = mkd(u->cache, 64, u->flags);
	unsigned char *keep = xalloc(c), *p = xalloc(c);
	(void)keep;
	uslab_cache_free(c, p);
	say_obj(p);
	if (u->off == 0)
		*(uint64_t *)p = 0x1122334455667788ULL;   /* the first word */
	else
		p[u->off] = u->v;
	if (u->validate) {
		CHECK(uslab_cache_validate(c) == 1);
		CHECK(uslab_cache_validate(c) == 1);   /* again: the damage is still there */
		return;
	}
	void *q = uslab_cache_alloc(c);   /* must be p again, and must not be handed out */
	fprintf(stderr, "allocation returned %p\n", q);
}

static void test_write_after_free(void)
{
	const char *B = "Poison overwritten (write after free)";
	static struct uaf_arg w0 = { "dbg_uaf", FZPU, 0, 0, false }, w50 = { "dbg_uaf", FZPU, 50, 0x00, false },
			      wl = { "dbg_uaf", FZPU, 63, 0x6b, false }, p50 = { "dbg_uaf_P", USLAB_POISON, 50, 0x5a, false };
	CHECK_REPORT("first word, at the next allocation", uaf, &w0, "dbg_uaf", B,
		     "@offset=0. First byte 0x88 instead of 0x6b", "uslab: INFO: Freed in 0x", );
	CHECK_REPORT("byte 50, at the next allocation", uaf, &w50, "dbg_uaf", B,
		     "@offset=50. First byte 0x0 instead of 0x6b", );
	CHECK_REPORT("last byte, at the next allocation", uaf, &wl, "dbg_uaf", B,
		     "@offset=63. First byte 0x6b instead of 0xa5", );
	CHECK_REPORT("byte 50, P only", uaf, &p50, "dbg_uaf_P", B, "@offset=50. First byte 0x5a instead of 0x6b", );

	/* The same damage found by validation: one report per run, no abort. */
	static struct uaf_arg v[] = { { "dbg_uaf_v", FZPU, 0, 0, true },
				      { "dbg_uaf_v", FZPU, 50, 0x00, true },
				      { "dbg_uaf_v", FZPU, 63, 0x6b, true } };
	const char *offs[] = { "@offset=0. First byte 0x88", "@offset=50. First byte 0x0 ",
			       "@offset=63. First byte 0x6b instead of 0xa5" };
	struct child_result *r = malloc(sizeof *r);
	CHECK(r != NULL);
	for (int i = 0; i < 3; i++) {
		run_ok("validate after a write after free", uaf, &v[i], r);
		CHECKF(count_lines(r->out, "uslab: BUG dbg_uaf_v: Poison overwritten (write after free)") == 2,
		       "validate twice: expected 2 reports:\n%s", r->out);
		CHECKF(count_lines(r->out, "uslab: BUG ") == 2, "%s", r->out);
		CHECKF(strstr(r->out, offs[i]) != NULL, "no '%s' in:\n%s", offs[i], r->out);
		CHECKF(!strstr(r->out, "fatal"), "validation is not fatal:\n%s", r->out);
		printf("    validate found the write at %s\n", offs[i]);
	}
	free(r);
}

/* ==== corrupted free pointer in a cache without debugging (row 23) ================== */

static void corrupt_fp(void *arg)
{
	uint64_t seed = (uint64_t)(uintptr_t)arg;
	struct uslab_cache *c = mkd("plain_fp", 64, 0);
	struct uslab_cache_info info;
	cache_info(c, &info);
	CHECK(!cache_debugged(&info));
	/* Without a constructor the free pointer is one word into the
	 * object (in its first cache line: cache.c). */
	size_t fp_off = 8;
	CHECK_EQ(fp_off, c->offset);
	char *keep = xalloc(c), *p = xalloc(c);
	(void)keep;
	uslab_cache_free(c, p);
	/* Shrink gives this thread's sheaf (or CPU slab) back: p goes onto
	 * its slab's free list, which keeps the slab (keep is live). The next
	 * refill walks that list. */
	uslab_cache_shrink(c);
	uint64_t garbage = rnd_next(&seed);
	memcpy(p + fp_off, &garbage, sizeof garbage);
	void *a = uslab_cache_alloc(c);
	void *b = uslab_cache_alloc(c);   /* would be the wild pointer */
	fprintf(stderr, "not caught: %p %p\n", a, b);
}

static void test_corrupt_freepointer(void)
{
	for (uintptr_t i = 1; i <= 16; i++) {
		char what[64];
		snprintf(what, sizeof what, "random free pointer #%u", (unsigned)i);
		CHECK_DEATH(what, corrupt_fp, (void *)i, "uslab: fatal: corrupted freelist", "(cache 'plain_fp')");
	}
}

/* ==== destroy with live objects (row 16) ======================================== */

static void leak(void *arg)
{
	unsigned long flags = (unsigned long)(uintptr_t)arg;
	struct uslab_cache *c = mkd(flags ? "dbg_leak_U" : "dbg_leak_plain", 48, flags);
	void *objs[3];
	for (int i = 0; i < 3; i++) {
		objs[i] = xalloc(c);
		say_obj(objs[i]);
	}
	void *extra = xalloc(c);
	uslab_cache_free(c, extra);
	fprintf(stderr, "--destroy--\n");
	uslab_cache_destroy(c);
	fprintf(stderr, "--after--\n");
	CHECK_EQ(cache_active(c), 3);   /* left in place */
	for (int i = 0; i < 3; i++)
		uslab_cache_free(c, objs[i]);
	CHECK(uslab_cache_validate(c) == 0);
	uslab_cache_destroy(c);
}

static void test_destroy_live(void)
{
	struct child_result *r = malloc(sizeof *r);
	CHECK(r != NULL);
	run_ok("destroy with live objects (plain)", leak, NULL, r);
	const char *a = strstr(r->out, "--destroy--\n"), *b = strstr(r->out, "--after--\n");
	CHECK(a && b);
	a += strlen("--destroy--\n");
	const char *want = "uslab: cache 'dbg_leak_plain': destroy with 3 live objects; cache left in place\n";
	CHECKF((size_t)(b - a) == strlen(want) && strncmp(a, want, strlen(want)) == 0,
	       "plain destroy: expected exactly '%s', got:\n%.*s", want, (int)(b - a), a);
	CHECKF(strcmp(b, "--after--\n") == 0, "second destroy printed: %s", b);
	printf("    plain: %s", want);

	run_ok("destroy with live objects (U)", leak, (void *)(uintptr_t)USLAB_STORE_USER, r);
	a = strstr(r->out, "--destroy--\n");
	b = strstr(r->out, "--after--\n");
	CHECK(a && b);
	a += strlen("--destroy--\n");
	want = "uslab: cache 'dbg_leak_U': destroy with 3 live objects; cache left in place\n";
	CHECKF(strncmp(a, want, strlen(want)) == 0, "%s", r->out);
	char section[4096];
	snprintf(section, sizeof section, "%.*s", (int)(b - a), a);
	CHECKF(count_lines(section, "uslab: INFO: live object 0x") == 3 && count_lines(section, "uslab: ") == 4,
	       "expected the line and 3 INFO lines:\n%s", section);
	/* each live object is named with its allocation site, in leak() */
	for (const char *o = r->out; (o = strstr(o, "OBJ=")) != NULL; o += 4) {
		char want_obj[80];
		snprintf(want_obj, sizeof want_obj, "live object %.*s allocated in 0x", (int)strcspn(o + 4, "\n"), o + 4);
		const char *l = strstr(section, want_obj);
		CHECKF(l != NULL, "no '%s' in:\n%s", want_obj, section);
		unsigned long site = strtoul(l + strlen(want_obj), NULL, 16);
		CHECKF(site >= (uintptr_t)leak && site < (uintptr_t)leak + 4096,
		       "alloc site %#lx is not in leak() at %p", site, (void *)leak);
	}
	CHECKF(strcmp(b, "--after--\n") == 0, "second destroy printed: %s", b);
	printf("    U: one line and 3 INFO lines with the alloc site in leak()\n");
	free(r);
}

/* ==== validation (row 28) ======================================================== */

#define NV 6
static const size_t v_sizes[NV] = { 8, 24, 64, 200, 1000, 4096 };

/* A random workload over debug caches (and one plain cache); every
 * validation is 0 and silent. Then faults are injected: for cache i, i % 3
 * poison faults in free objects and (i + 1) % 3 red-zone faults in live
 * objects. Each validation must report each fault once. */
static void validate_workload(void *arg)
{
	bool inject = arg != NULL;
	struct uslab_cache *c[NV + 1];
	void **live[NV + 1];
	size_t nlive[NV + 1], cap = 3000;
	uint64_t seed = 42;
	for (int i = 0; i <= NV; i++) {
		char name[32];
		snprintf(name, sizeof name, i < NV ? "dbg_val_%zu" : "plain_val", i < NV ? v_sizes[i] : (size_t)0);
		c[i] = mkd(name, i < NV ? v_sizes[i] : 100, i < NV ? FZPU : 0);
		/* empty slabs stay: free objects can be damaged safely */
		CHECK(uslab_cache_tune_set(c[i], "min_partial", 1024) == 0);
		live[i] = calloc(cap, sizeof(void *));
		CHECK(live[i] != NULL);
		nlive[i] = 0;
	}
	for (int op = 0; op < 30000; op++) {
		int i = (int)(rnd_next(&seed) % (NV + 1));
		size_t sz = i < NV ? v_sizes[i] : 100;
		if (nlive[i] < cap && (nlive[i] == 0 || rnd_chance(&seed, 55))) {
			unsigned char *p = xalloc(c[i]);
			memset(p, (int)(op & 0xff), sz);   /* the whole object */
			live[i][nlive[i]++] = p;
		} else {
			size_t k = rnd_next(&seed) % nlive[i];
			uslab_cache_free(c[i], live[i][k]);
			live[i][k] = live[i][--nlive[i]];
		}
		if (op % 10000 == 9999)
			for (int j = 0; j <= NV; j++)
				CHECK_EQ(uslab_cache_validate(c[j]), 0);
	}
	for (int j = 0; j <= NV; j++)
		CHECK_EQ(uslab_cache_validate(c[j]), 0);
	fprintf(stderr, "--clean--\n");
	if (!inject) {
		for (int i = 0; i <= NV; i++)
			free(live[i]);   /* (LeakSanitizer checks the re-executed scenario) */
		return;
	}
	long faults = 0;
	long per[NV];
	for (int i = 0; i < NV; i++) {
		size_t sz = v_sizes[i];
		per[i] = 0;
		for (int k = 0; k < i % 3; k++) {   /* poison of a free object */
			CHECK(nlive[i] > 0);
			unsigned char *p = live[i][--nlive[i]];
			uslab_cache_free(c[i], p);
			p[sz / 2] ^= 0x01;
			per[i]++;
		}
		for (int k = 0; k < (i + 1) % 3; k++) {   /* red zone of a live object */
			CHECK(nlive[i] > 0);
			unsigned char *p = live[i][--nlive[i]];   /* no longer freed by anyone */
			if (k == 0)
				p[sz] = 0x00;   /* one past the end */
			else
				p[-1] = 0x00;   /* one before the start */
			per[i]++;
		}
		faults += per[i];
	}
	fprintf(stderr, "--injected %ld--\n", faults);
	/* Twice: the damage stays, and each run reports each fault once. The
	 * second run's reports are counted here (the parent's buffer holds
	 * one run's). */
	for (int round = 0; round < 2; round++) {
		struct stderr_capture cap;
		if (round)
			stderr_capture_begin(&cap);
		long sum = 0;
		for (int i = 0; i <= NV; i++) {
			long got = uslab_cache_validate(c[i]);
			CHECKF(got == (i < NV ? per[i] : 0), "cache %d: validate returned %ld", i, got);
			sum += got;
		}
		CHECK_EQ(sum, faults);
		if (round) {
			fflush(stderr);
			char *buf = malloc(1 << 20);
			CHECK(buf != NULL);
			CHECK(dup2(cap.saved, 2) == 2);   /* not stderr_capture_end(): it echoes */
			rewind(cap.tmp);
			buf[fread(buf, 1, (1 << 20) - 1, cap.tmp)] = 0;
			fprintf(stderr, "--second run: %u BUG lines--\n", count_lines(buf, "uslab: BUG dbg_val_"));
		}
		fprintf(stderr, "--validated %ld--\n", sum);
	}
}

static void test_validate(void)
{
	struct child_result *r = malloc(sizeof *r);
	CHECK(r != NULL);
	run_ok("clean workload", validate_workload, NULL, r);
	CHECKF(strcmp(r->out, "--clean--\n") == 0, "a clean workload printed:\n%s", r->out);
	printf("    clean random workload: validate 0, nothing printed\n");

	run_ok("injected faults", validate_workload, (void *)1, r);
	const char *inj = strstr(r->out, "--injected ");
	CHECK(inj != NULL);
	CHECKF(strncmp(r->out, "--clean--\n", 10) == 0, "%s", r->out);
	long faults = strtol(inj + strlen("--injected "), NULL, 10);
	CHECK(faults == 12);   /* sum over i < 6 of i % 3 (poison) + (i + 1) % 3 (red zone): 6 + 6 */
	/* two validations of every cache: each fault reported once each time */
	CHECKF(count_lines(inj, "uslab: BUG ") == (unsigned)faults, "expected %ld BUG lines:\n%s", faults, r->out);
	CHECKF(count_lines(inj, "uslab: BUG dbg_val_") == (unsigned)faults, "%s", r->out);
	CHECKF(strstr(inj, "--second run: 12 BUG lines--") != NULL, "%s", r->out);
	unsigned pz = 0, rz = 0;
	for (const char *l = inj; (l = strstr(l, "uslab: BUG ")) != NULL; l++) {
		const char *colon = strstr(l, ": ");
		colon = colon ? strstr(colon + 2, ": ") : NULL;
		CHECK(colon != NULL);
		if (strncmp(colon + 2, "Poison overwritten", 18) == 0)
			pz++;
		else if (strncmp(colon + 2, "Right Redzone", 13) == 0 || strncmp(colon + 2, "Left Redzone", 12) == 0)
			rz++;
	}
	CHECKF(pz == 6 && rz == 6, "poison %u, red zone %u reports:\n%s", pz, rz, r->out);
	CHECK(count_lines(inj, "--validated 12--") == 2);
	CHECKF(!strstr(r->out, "plain_val"), "the plain cache was reported:\n%s", r->out);
	printf("    %ld injected faults: each reported once per validation, returns summed to %ld\n", faults, faults);
	free(r);

	/* With slab_freelist_random the clean workload is clean too. */
	r = malloc(sizeof *r);
	CHECK(r != NULL);
	run_exec("validate_clean", "slab_freelist_random", 60, r);
	CHECKF(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0 && strcmp(r->out, "--clean--\n") == 0,
	       "slab_freelist_random clean workload: stderr:\n%s", r->out);
	printf("    slab_freelist_random: clean\n");
	free(r);
}

/* ==== report_continue ============================================================ */

static void report_continue(void *arg)
{
	struct uslab_cache *c = mkd("dbg_rc", 64, FZPU);
	unsigned char *p = xalloc(c), *q = xalloc(c), *u = xalloc(c);
	CHECK_EQ(cache_active(c), 3);
	/* 1: overflow, then free: reported, p leaked */
	p[64] = 0;
	uslab_cache_free(c, p);
	CHECK_EQ(cache_active(c), 3);
	fprintf(stderr, "--1--\n");
	/* 2: double free: reported, nothing changes */
	uslab_cache_free(c, q);
	CHECK_EQ(cache_active(c), 2);
	uslab_cache_free(c, q);
	CHECK_EQ(cache_active(c), 2);
	fprintf(stderr, "--2--\n");
	/* 3: write after free: the damaged object is reported when it comes
	 * back, kept (leaked), and another one is handed out */
	uslab_cache_free(c, u);
	u[10] = 0;
	unsigned char *w = xalloc(c);
	CHECK(w != u);
	CHECK_EQ(cache_active(c), 3);   /* p and u leaked, w */
	fprintf(stderr, "--3--\n");
	/* later operations work */
	void *objs[1000];
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 1000; i++) {
			objs[i] = xalloc(c);
			memset(objs[i], i, 64);
		}
		for (int i = 0; i < 1000; i++)
			uslab_cache_free(c, objs[i]);
	}
	uslab_cache_free(c, w);
	CHECK_EQ(cache_active(c), 2);
	/* validation still sees p's red zone (p is allocated, leaked) */
	CHECK_EQ(uslab_cache_validate(c), 1);
	fprintf(stderr, "--done--\n");
}

static void test_report_continue(void)
{
	struct child_result *r = malloc(sizeof *r);
	CHECK(r != NULL);
	run_exec("report_continue", "report_continue", 60, r);
	char desc[128];
	child_describe(r, desc, sizeof desc);
	CHECKF(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0, "report_continue: child %s; stderr:\n%s", desc,
	       r->out);
	const char *s1 = strstr(r->out, "--1--"), *s2 = strstr(r->out, "--2--"), *s3 = strstr(r->out, "--3--"),
		   *d = strstr(r->out, "--done--");
	CHECKF(s1 && s2 && s3 && d, "%s", r->out);
	CHECKF(!strstr(r->out, "fatal"), "report_continue printed a fatal line:\n%s", r->out);
	char part[16384];
	snprintf(part, sizeof part, "%.*s", (int)(s1 - r->out), r->out);
	CHECKF(!report_shape(part, "dbg_rc", "Right Redzone overwritten", false) &&
		       strstr(part, "uslab: FIX dbg_rc: object 0x") && strstr(part, " leaked, continuing"),
	       "overflow: %s\n%s", report_shape(part, "dbg_rc", "Right Redzone overwritten", false), part);
	snprintf(part, sizeof part, "%.*s", (int)(s2 - s1), s1);
	CHECKF(!report_shape(part, "dbg_rc", DF, false) && strstr(part, "leaked, continuing"), "double free:\n%s", part);
	snprintf(part, sizeof part, "%.*s", (int)(s3 - s2), s2);
	CHECKF(!report_shape(part, "dbg_rc", "Poison overwritten (write after free)", false) &&
		       strstr(part, "leaked, continuing"),
	       "write after free:\n%s", part);
	snprintf(part, sizeof part, "%.*s", (int)(d - s3), s3);
	CHECKF(count_lines(part, "uslab: BUG ") == 1 && strstr(part, "uslab: BUG dbg_rc: Right Redzone overwritten"),
	       "validation after the reports: expected p's red zone once:\n%s", part);
	printf("    overflow, double free, write after free: reported, leaked, continued; "
	       "active counts and later operations right\n");
	free(r);
}

/* ==== T: tracing ================================================================= */

static void trace(void *arg)
{
	struct uslab_cache *c = mkd("dbg_trace", 40, USLAB_TRACE);
	void *p = xalloc(c);
	fprintf(stderr, "P=%p\n", p);
	uslab_cache_free(c, p);
}

static void test_trace(void)
{
	struct child_result *r = malloc(sizeof *r);
	CHECK(r != NULL);
	run_ok("trace", trace, NULL, r);
	const char *pl = strstr(r->out, "P=");
	CHECK(pl != NULL);
	char addr[64], want[128];
	snprintf(addr, sizeof addr, "%.*s", (int)strcspn(pl + 2, "\n"), pl + 2);
	snprintf(want, sizeof want, "uslab: TRACE dbg_trace alloc %s ", addr);
	CHECKF(strstr(r->out, want) != NULL, "no '%s' in:\n%s", want, r->out);
	snprintf(want, sizeof want, "uslab: TRACE dbg_trace free %s ", addr);
	CHECKF(strstr(r->out, want) != NULL, "no '%s' in:\n%s", want, r->out);
	CHECKF(count_lines(r->out, "uslab: TRACE ") == 2, "%s", r->out);
	CHECKF(strstr(r->out, "caller=0x") != NULL, "%s", r->out);
	printf("    TRACE lines for the alloc and the free of %s\n", addr);
	free(r);
}

/* ==== row 30: the report path takes no allocator lock ============================= */

struct holder {
	struct uslab_cache *c;
	pthread_barrier_t *b;
};

/* Sit with the cache's node lock (and the cache list mutex) held, as a
 * thread in a long operation would; never lets go. */
static void *hold_locks(void *arg)
{
	struct holder *h = arg;
	pthread_mutex_lock(&cache_mutex);
	pthread_mutex_lock(&h->c->node.list_lock);
	pthread_barrier_wait(h->b);
	for (;;)
		pause();
	return NULL;
}

static void report_under_lock(void *arg)
{
	bool other_cache = arg != NULL;
	struct uslab_cache *a = mkd("dbg_locked", 64, FZPU);
	struct uslab_cache *b = mkd("dbg_reporter", 64, FZPU);
	char *pa = xalloc(a), *pb = xalloc(b);
	(void)xalloc(b);
	pthread_barrier_t bar;
	CHECK(pthread_barrier_init(&bar, NULL, 2) == 0);
	struct holder h = { a, &bar };
	pthread_t t;
	CHECK(pthread_create(&t, NULL, hold_locks, &h) == 0);
	pthread_barrier_wait(&bar);
	if (other_cache) {
		/* a debug report on cache b while a's locks are held */
		pb[64] = 0x41;
		uslab_cache_free(b, pb);
	} else {
		/* a report on the locked cache itself: an invalid free */
		uslab_cache_free(a, pa + 8);
	}
}

static void test_report_under_locks(void)
{
	CHECK_REPORT("debug report while another cache's locks are held", report_under_lock, (void *)1,
		     "dbg_reporter", "Right Redzone overwritten", );
	CHECK_DEATH("invalid free while the cache's node lock is held", report_under_lock, NULL,
		    "uslab: fatal: invalid free", "dbg_locked");
}

/* ================================================================================== */

static const struct scenario scenarios[] = {
	{ "report_continue", report_continue },
	{ "validate_clean", validate_workload },
#ifdef USLAB_HAVE_MALLOC
	{ "malloc_slack", malloc_slack },
	{ "malloc_usable", malloc_usable },
#endif
};

static const struct scenario *scenario_find(const char *name)
{
	for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
		if (strcmp(scenarios[i].name, name) == 0)
			return &scenarios[i];
	return NULL;
}

int main(int argc, char **argv)
{
	ssize_t n = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
	CHECK(n > 0);
	self_exe[n] = 0;
	if (argc == 3 && strcmp(argv[1], "--scenario") == 0) {
		const struct scenario *s = scenario_find(argv[2]);
		CHECKF(s != NULL, "unknown scenario '%s'", argv[2]);
		s->fn(NULL);
		return 0;
	}
	const char *env = getenv("USLAB_OPTIONS");
	if (env && *env) {
		printf("test_debug: ignoring USLAB_OPTIONS='%s' (each case sets its own flags); re-executing\n", env);
		fflush(stdout);
		unsetenv("USLAB_OPTIONS");
		execv(self_exe, argv);
		CHECKF(false, "execv %s: %s", self_exe, strerror(errno));
	}
	check_init("test_debug");
	RUN(test_double_free);
	RUN(test_invalid_and_wrong);
	RUN(test_overflow);
	RUN(test_slack);
	RUN(test_write_after_free);
	RUN(test_corrupt_freepointer);
	RUN(test_destroy_live);
	RUN(test_validate);
	RUN(test_trace);
	RUN(test_report_under_locks);
	RUN(test_report_continue);
	RUN(test_malloc_slack);   /* last: needs the malloc family's slub_debug support */
	return 0;
}
