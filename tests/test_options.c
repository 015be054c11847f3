/*
 * The USLAB_OPTIONS parser (src/options.c), on good and malformed input.
 *
 * options_parse() is hidden but linked in from the static library; the
 * parsed values are read back from `opt` (src/slab.h), and their effects
 * from caches created afterwards. Every sub-test restores `opt`.
 *
 * each_option       every process option and its alias spelling sets its
 *                   field; the last of repeated tokens wins; tabs/newlines
 *                   separate tokens; nothing is printed for good input
 * effects           slub_max_order, slub_min_order, slub_min_objects and
 *                   slub_cpu_partial change the caches created afterwards
 * per_cache         NAME:key=value for each key is applied when a cache of
 *                   that name is created (not to other names, not to caches
 *                   that exist already); a value out of range for the cache
 *                   gets one warning at create and the default stays
 * malformed         each bad token (unknown, missing/extra value, not a
 *                   number, out of range, '=' alone, ':=' , ':' ..., empty
 *                   NAME or key, name too long) prints exactly one warning
 *                   line that names it, and changes nothing; good tokens
 *                   around it still apply
 * long_and_odd      very long tokens (100,000 bytes), huge numbers, control
 *                   bytes, 10,000 tokens: no crash, one line per bad token,
 *                   the line stays short
 * too_many          the per-cache table is full after 32 entries: one
 *                   warning per extra entry (in a child: the table is static)
 * from_environment  the variable is read at init: the test re-executes itself
 *                   with USLAB_OPTIONS set and checks the caches it creates
 *                   and the single warning for the bad token
 */
#include "check.h"
#include "cpu.h"
#include "debug.h"

static struct uslab_opts saved;

static void opt_save(void) { saved = opt; }
static void opt_restore(void) { opt = saved; }

/* Parse s; return what it printed (lines) into buf. */
static size_t parse_capture(const char *s, char *buf, size_t size)
{
	struct stderr_capture cap;
	stderr_capture_begin(&cap);
	options_parse(s);
	return stderr_capture_end(&cap, buf, size);
}

static unsigned count_lines(const char *s)
{
	unsigned n = 0;
	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* Good input: nothing printed. */
static void parse_quiet(const char *s)
{
	char buf[4096];
	size_t n = parse_capture(s, buf, sizeof buf);
	CHECKF(n == 0, "'%s' printed: %s", s, buf);
}

/* Bad token: exactly one line, naming it (or its first 90 bytes), and no
 * change to the options. */
static void parse_bad(const char *tok)
{
	char buf[8192];
	struct uslab_opts before = opt;
	size_t n = parse_capture(tok, buf, sizeof buf);
	CHECKF(n > 0 && count_lines(buf) == 1, "'%.100s': expected one warning line, got %zu bytes:\n%s", tok, n, buf);
	char want[96];
	snprintf(want, sizeof want, "'%.90s", tok);
	CHECKF(strstr(buf, want) != NULL, "warning does not name '%.100s': %s", tok, buf);
	CHECKF(strncmp(buf, "uslab: ", 7) == 0, "warning without the uslab prefix: %s", buf);
	CHECKF(n < 400, "warning line of %zu bytes", n);
	CHECKF(memcmp(&before, &opt, sizeof opt) == 0, "'%.100s' changed the options", tok);
}

static struct uslab_cache *mk(const char *name, size_t size)
{
	struct uslab_cache *c = uslab_cache_create(name, size, 0, USLAB_NO_MERGE, NULL);
	CHECKF(c != NULL, "create %s", name);
	return c;
}

static unsigned long tget(struct uslab_cache *c, const char *name)
{
	unsigned long v = 0;
	CHECK(uslab_cache_tune_get(c, name, &v) == 0);
	return v;
}

/* ---- every option ------------------------------------------------------------ */

static void each_option(void)
{
	opt_save();
	parse_quiet("slab_nomerge");
	CHECK(opt.nomerge);
	opt_restore();
	parse_quiet("slub_nomerge");
	CHECK(opt.nomerge);
	opt_restore();

	static const struct {
		const char *name, *alias;
		size_t off;
		unsigned long max;
	} uints[] = {
		{ "slub_max_order", "slab_max_order", offsetof(struct uslab_opts, max_order), 9 },
		{ "slub_min_order", "slab_min_order", offsetof(struct uslab_opts, min_order), 9 },
		{ "slub_min_objects", "slab_min_objects", offsetof(struct uslab_opts, min_objects), 32767 },
		{ "slub_cpu_partial", "slab_cpu_partial", offsetof(struct uslab_opts, cpu_partial), 65535 },
	};
	for (unsigned i = 0; i < sizeof uints / sizeof uints[0]; i++) {
		const unsigned long vals[] = { 0, 1, uints[i].max / 2, uints[i].max };
		for (unsigned j = 0; j < 4; j++) {
			for (int sp = 0; sp < 2; sp++) {
				char tok[64];
				snprintf(tok, sizeof tok, "%s=%lu", sp ? uints[i].alias : uints[i].name, vals[j]);
				parse_quiet(tok);
				unsigned long got;
				if (uints[i].off == offsetof(struct uslab_opts, cpu_partial))
					got = (unsigned long)opt.cpu_partial;
				else
					got = *(unsigned *)((char *)&opt + uints[i].off);
				CHECKF(got == vals[j], "%s: got %lu", tok, got);
				opt_restore();
			}
		}
	}
	parse_quiet("show_stats");
	CHECK(opt.show_stats);
	opt_restore();
	parse_quiet("export");
	CHECK(opt.export_stats);
	opt_restore();

	/* several tokens, odd separators, repeats: the last wins */
	parse_quiet("  slub_max_order=1\tslub_min_objects=7\n\nslab_max_order=2 \t slab_nomerge  ");
	CHECK_EQ(opt.max_order, 2);
	CHECK_EQ(opt.min_objects, 7);
	CHECK(opt.nomerge);
	opt_restore();
	parse_quiet("");
	parse_quiet("   \t\n  ");
	parse_quiet(NULL);
	CHECK(memcmp(&saved, &opt, sizeof opt) == 0);
	/* leading zeros are still decimal */
	parse_quiet("slub_max_order=0002");
	CHECK_EQ(opt.max_order, 2);
	opt_restore();
}

/* ---- effects on new caches ------------------------------------------------------ */

static void effects(void)
{
	struct uslab_cache_info in;
	/* the first cache runs options_init() (USLAB_OPTIONS): save after it */
	struct uslab_cache *d = mk("opt-eff-default", 1000);
	opt_save();
	cache_info(d, &in);
	unsigned default_order = in.order;
	CHECK(default_order >= 4);   /* every slab fills a 64 KiB slot at least (order 4) */

	/* a maximum below a slot's order gives slabs of one slot */
	parse_quiet("slub_max_order=0");
	struct uslab_cache *c = mk("opt-eff-max0", 1000);
	cache_info(c, &in);
	CHECK_EQ(in.order, 4);
	/* an object that needs more than the maximum still gets its minimum */
	struct uslab_cache *big = mk("opt-eff-big", 100000);
	cache_info(big, &in);
	CHECK_EQ(in.order, in.min_order);
	CHECK_EQ(in.min_order, 5);
	opt_restore();

	parse_quiet("slub_min_order=6");
	struct uslab_cache *m = mk("opt-eff-min6", 64);
	cache_info(m, &in);
	CHECK(in.order >= 6);
	opt_restore();

	struct uslab_cache *o1 = mk("opt-eff-obj-default", 64);
	cache_info(o1, &in);
	unsigned o1_order = in.order;
	parse_quiet("slub_min_objects=1500");   /* 1500 x 64 bytes: order 5 */
	struct uslab_cache *o2 = mk("opt-eff-obj1500", 64);
	cache_info(o2, &in);
	CHECKF(in.order == 5 && in.order > o1_order, "order %u (default %u)", in.order, o1_order);
	/* (debug caches' wider stride: order 5 holds fewer than 1500) */
	CHECK(in.objects_per_slab >= 1500 || (cache_debugged(&in) && in.objects_per_slab == 131072 / in.slab_object_size));
	opt_restore();

	parse_quiet("slub_cpu_partial=5");
	struct uslab_cache *p = mk("opt-eff-cp5", 64);
	CHECK_EQ(tget(p, "cpu_partial"), 5);
	opt_restore();
	parse_quiet("slab_cpu_partial=0");
	struct uslab_cache *p0 = mk("opt-eff-cp0", 64);
	CHECK_EQ(tget(p0, "cpu_partial"), 0);
	opt_restore();

	/* after restore, caches get the defaults again */
	struct uslab_cache *again = mk("opt-eff-again", 1000);
	cache_info(again, &in);
	CHECK_EQ(in.order, default_order);

	struct uslab_cache *all[] = { d, c, big, m, o1, o2, p, p0, again };
	for (unsigned i = 0; i < sizeof all / sizeof all[0]; i++)
		destroy_silently(all[i]);
}

/* ---- per-cache options ----------------------------------------------------------- */

static void per_cache(void)
{
	opt_save();
	struct uslab_cache *late = mk("opt-pc-late", 512);
	unsigned long late_cp = tget(late, "cpu_partial");
	CHECK(late_cp != 5);

	parse_quiet("opt-pc:cpu_partial=77 opt-pc:min_partial=3 opt-pc:order=6 opt-pc:sheaf_capacity=5 opt-pc:barn_full=4 opt-pc-late:cpu_partial=5");
	CHECK(memcmp(&saved, &opt, sizeof opt) == 0);   /* no process option changed */
	/* an existing cache is not changed */
	CHECK_EQ(tget(late, "cpu_partial"), late_cp);

	struct uslab_cache *c = mk("opt-pc", 512);
	CHECK_EQ(tget(c, "cpu_partial"), 77);
	CHECK_EQ(tget(c, "min_partial"), 3);
	CHECK_EQ(tget(c, "order"), 6);
	struct uslab_cache_info in;
	cache_info(c, &in);
	CHECK_EQ(tget(c, "sheaf_capacity"), cache_debugged(&in) ? 0 : 5);   /* debug caches: no sheaves */
	CHECK_EQ(tget(c, "barn_full"), 4);
	CHECK_EQ(in.order, 6);
	CHECK_EQ(in.cpu_partial, 77);
	/* other names are untouched; the name must match exactly */
	struct uslab_cache *other = mk("opt-pc2", 512);
	struct uslab_cache *prefix = mk("opt-p", 512);
	CHECK(tget(other, "cpu_partial") != 77);
	CHECK(tget(prefix, "cpu_partial") != 77);
	/* a cache created later under the named name gets it */
	struct uslab_cache *late2 = mk("opt-pc-late", 512);
	CHECK_EQ(tget(late2, "cpu_partial"), 5);

	/* a value the cache cannot take: one warning at create, defaults kept */
	parse_quiet("opt-pc-bad:order=5");
	char buf[4096];
	struct stderr_capture cap;
	stderr_capture_begin(&cap);
	struct uslab_cache *bad = mk("opt-pc-bad", 200000);   /* needs order 6 */
	size_t n = stderr_capture_end(&cap, buf, sizeof buf);
	CHECKF(n > 0 && count_lines(buf) == 1 && strstr(buf, "opt-pc-bad"), "got: %s", buf);
	cache_info(bad, &in);
	CHECK_EQ(in.order, 6);

	struct uslab_cache *all[] = { late, c, other, prefix, late2, bad };
	for (unsigned i = 0; i < sizeof all / sizeof all[0]; i++)
		destroy_silently(all[i]);
	opt_restore();
}

/* ---- malformed input ---------------------------------------------------------------- */

static void malformed(void)
{
	opt_save();
	static const char *const bad[] = {
		"bogus", "slab_nomergex", "xslab_nomerge", "SLAB_NOMERGE", "slab_nomerge=1", "slab_nomerge=",
		"show_stats=0", "slub_max_order", "slub_max_order=", "slub_max_order=abc", "slub_max_order=1x",
		"slub_max_order=-1", "slub_max_order=+1", "slub_max_order=0x3", "slub_max_order=1.5",
		"slub_max_order==1", "slub_max_order=1=2", "slub_max_order=10", "slub_min_order=10",
		"slub_min_objects=32768", "slub_cpu_partial=65536", "slub_cpu_partial=99999999999999999999999",
		"=", "==", "=5", ":", "::", ":=", ":=5", "a:", "a:b", "a:=1", ":cpu_partial=1", "x:cpu_partial",
		"x:cpu_partial=", "x:cpu_partial=abc", "x:cpu_partial=-3", "x:unknown=1", "x:order=1:2",
		"x:cpu_partial=1=1", "cpu_partial=5", "order=1",
		"a-name-that-is-longer-than-sixty-three-bytes-and-so-too-long-for-any-cache:order=1",
	};
	for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++)
		parse_bad(bad[i]);

	/* good tokens around bad ones still apply; one line per bad token */
	char buf[8192];
	size_t n = parse_capture("slub_max_order=2 bogus1 slub_min_objects=9 = bogus2 slab_nomerge", buf, sizeof buf);
	CHECK(n > 0);
	CHECKF(count_lines(buf) == 3 && strstr(buf, "'bogus1'") && strstr(buf, "'='") && strstr(buf, "'bogus2'"),
	       "got:\n%s", buf);
	CHECK_EQ(opt.max_order, 2);
	CHECK_EQ(opt.min_objects, 9);
	CHECK(opt.nomerge);
	opt_restore();
	/* a value split off by a space: two bad tokens */
	n = parse_capture("slub_max_order= 1", buf, sizeof buf);
	CHECKF(count_lines(buf) == 2, "got:\n%s", buf);
	CHECK(memcmp(&saved, &opt, sizeof opt) == 0);
}

/* ---- long and odd input ------------------------------------------------------------------ */

static void long_and_odd(void)
{
	opt_save();
	enum { L = 100000 };
	char *s = malloc(L + 64);
	CHECK(s != NULL);
	char buf[8192];

	memset(s, 'a', L);
	s[L] = 0;
	parse_bad(s);

	memcpy(s, "slub_max_order=", 15);
	memset(s + 15, '1', L - 15);
	s[L] = 0;
	parse_bad(s);

	memset(s, '=', L);
	s[L] = 0;
	parse_bad(s);

	memset(s, ':', L);
	s[L] = 0;
	parse_bad(s);

	for (size_t i = 0; i < L; i++)
		s[i] = ":="[i % 2];
	s[L] = 0;
	parse_bad(s);

	/* a long NAME and a long key */
	memset(s, 'n', L);
	memcpy(s + L - 16, ":cpu_partial=1", 15);
	parse_bad(s);
	memcpy(s, "x:", 2);
	memset(s + 2, 'k', L - 4);
	memcpy(s + L - 2, "=1", 3);
	parse_bad(s);

	/* control and high bytes */
	parse_bad("\x01\x02\x7f");
	parse_bad("\xff\xfe=1");
	parse_bad("slub_max_order=\x01");

	/* 10,000 bad tokens: one line each */
	size_t len = 0;
	for (int i = 0; i < 10000; i++)
		len += (size_t)snprintf(s + len, L + 64 - len, "b%d ", i % 10);
	struct stderr_capture cap;
	stderr_capture_begin(&cap);
	options_parse(s);
	fflush(stderr);
	/* count lines straight from the temporary file: it is large */
	long bytes = lseek(2, 0, SEEK_END);
	char *all = malloc((size_t)bytes + 1);
	CHECK(all != NULL);
	CHECK(pread(2, all, (size_t)bytes, 0) == bytes);
	all[bytes] = 0;
	unsigned lines = count_lines(all);
	free(all);
	stderr_capture_end(&cap, buf, 1);   /* echo nothing */
	CHECKF(lines == 10000, "%u warning lines for 10000 bad tokens", lines);
	CHECK(memcmp(&saved, &opt, sizeof opt) == 0);
	free(s);
}

/* ---- the per-cache table is bounded ------------------------------------------------------ */

static void too_many_child(void *arg)
{
	char buf[8192];
	unsigned warned = 0;
	/* this process has used 8 entries already (per_cache); fill the rest */
	for (int i = 0; i < 40; i++) {
		char tok[64];
		snprintf(tok, sizeof tok, "fill%d:cpu_partial=%d", i, i);
		struct stderr_capture cap;
		stderr_capture_begin(&cap);
		options_parse(tok);
		size_t n = stderr_capture_end(&cap, buf, sizeof buf);
		if (n) {
			CHECKF(count_lines(buf) == 1 && strstr(buf, tok), "got: %s", buf);
			warned++;
		}
	}
	CHECKF(warned >= 8 && warned <= 40, "%u warnings", warned);
	/* entries that fit are applied */
	struct uslab_cache *c = mk("fill0", 64);
	CHECK_EQ(tget(c, "cpu_partial"), 0);
	destroy_silently(c);
	c = mk("fill5", 64);
	CHECK_EQ(tget(c, "cpu_partial"), 5);
	destroy_silently(c);
	/* the one that did not fit is not */
	c = mk("fill39", 64);
	CHECK(tget(c, "cpu_partial") != 39);
	destroy_silently(c);
}

static void too_many(void)
{
	struct child_result *r = malloc(sizeof *r);
	CHECK(r != NULL);
	run_in_child(too_many_child, NULL, 30, r);
	char desc[128];
	child_describe(r, desc, sizeof desc);
	CHECKF(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0, "child %s:\n%s", desc, r->out);
	free(r);
}

/* ---- from the environment, at init --------------------------------------------------------- */

static int env_child(void)
{
	struct uslab_cache *a = mk("env-a", 1000);
	struct uslab_cache_info in;
	cache_info(a, &in);
	CHECK_EQ(in.order, 4);                 /* slub_max_order=0: one slot, the least there is */
	CHECK_EQ(tget(a, "cpu_partial"), 11);  /* env-a:cpu_partial=11 */
	struct uslab_cache *b = mk("env-b", 1000);
	CHECK_EQ(tget(b, "cpu_partial"), 4);   /* slub_cpu_partial=4 */
	struct uslab_cache *c = uslab_cache_create("env-c", 1000, 0, 0, NULL);
	struct uslab_cache *d = uslab_cache_create("env-d", 1000, 0, 0, NULL);
	cache_info(d, &in);
	CHECK(in.alias_of[0] == 0);            /* slab_nomerge */
	destroy_silently(d);
	destroy_silently(c);
	destroy_silently(b);
	destroy_silently(a);
	printf("env child ok\n");
	return 0;
}

static void from_environment(void)
{
	int fds[2];
	CHECK(pipe(fds) == 0);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		dup2(fds[1], 1);
		dup2(fds[1], 2);
		close(fds[1]);
		/* no other thread exists here: setenv is safe */
		setenv("USLAB_OPTIONS", "slub_max_order=0 env-a:cpu_partial=11 bogus_token\tslub_cpu_partial=4 slab_nomerge", 1);
		char *argv[] = { (char *)"test_options", (char *)"--env-child", NULL };
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	close(fds[1]);
	char out[16384];
	size_t len = 0;
	for (;;) {
		ssize_t r = read(fds[0], out + len, sizeof out - 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		len += (size_t)r;
		if (len == sizeof out - 1)
			break;
	}
	out[len] = 0;
	close(fds[0]);
	int status;
	while (waitpid(pid, &status, 0) < 0)
		CHECK(errno == EINTR);
	CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0 && strstr(out, "env child ok"), "status 0x%x, output:\n%s",
	       status, out);
	const char *w = strstr(out, "USLAB_OPTIONS");
	CHECKF(w && strstr(w, "'bogus_token'") && !strstr(w + 1, "USLAB_OPTIONS"),
	       "expected one warning naming bogus_token:\n%s", out);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--env-child"))
		return env_child();
	check_init("test_options");
	RUN(from_environment);
	RUN(each_option);
	RUN(effects);
	RUN(per_cache);
	RUN(malformed);
	RUN(long_and_odd);
	RUN(too_many);
	return 0;
}
