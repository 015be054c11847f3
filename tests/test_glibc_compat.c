/*
 * The malloc family against glibc 2.36 (issue 15; docs/testing.md rows 3, 4,
 * 7, 11, 12, 15): a table of calls, each with what glibc 2.36 does and what
 * uslab does, printed as it runs. Where the two differ, README ("glibc
 * compatibility") says so. Rows: errno of every failing allocation
 * function (impossible sizes, bad alignments, and memory running out under
 * an address-space limit), the behaviours a program may rely on
 * (malloc_usable_size(NULL), realloc to the same size, memalign of a
 * non-power of two, valloc/pvalloc), M_PERTURB, every mallopt parameter,
 * glibc's MALLOC_* environment variables.
 *
 * Built twice: linked with libuslab-malloc.a (USLAB_LINKED) it checks the
 * uslab column; plain, it checks the glibc column when run as it is (the
 * proof that the column is what glibc does on this machine) and the uslab
 * column under LD_PRELOAD=libuslab-malloc.so.
 */
#include "check.h"

#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <limits.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/resource.h>

static bool uslab;   /* is uslab the malloc here? */
static unsigned failures;
static void *volatile sink;

/* ---- observations ---------------------------------------------------------- */

static const char *err_name(int e)
{
	switch (e) {
	case 0: return "errno 0";
	case ENOMEM: return "ENOMEM";
	case EINVAL: return "EINVAL";
	case 1789: return "errno kept";
	default: return "errno other";
	}
}

/* "NULL ENOMEM" or "ptr" */
static void obs_ptr(char *o, size_t n, void *p, int e)
{
	if (p)
		snprintf(o, n, "ptr");
	else
		snprintf(o, n, "NULL %s", err_name(e));
	free(p);
}

#define OBS_PTR(call) \
	do { \
		errno = 0; \
		void *p_ = (call); \
		obs_ptr(o, n, p_, errno); \
	} while (0)

/* One row: what `call` does; `glibc` and `uslab` are the expected
 * observations (NULL: not checked with that allocator). */
static void row(const char *call, const char *glibc, const char *us, void (*run)(char *, size_t))
{
	char o[160];
	run(o, sizeof o);
	const char *want = uslab ? us : glibc;
	bool ok = !want || !strcmp(o, want);
	printf("    %-52s %-28s %-28s %s%s\n", call, glibc ? glibc : "-", us ? us : "-", ok ? "" : "MISMATCH: ",
	       ok ? "" : o);
	if (!ok)
		failures++;
}

#define SAME(call, obs, fn) row(call, obs, obs, fn)

/* ---- errno on impossible requests ------------------------------------------- */

static void r_malloc_max(char *o, size_t n) { OBS_PTR(malloc(SIZE_MAX)); }
static void r_malloc_pd(char *o, size_t n) { OBS_PTR(malloc((size_t)PTRDIFF_MAX)); }
static void r_malloc_pd1(char *o, size_t n) { OBS_PTR(malloc((size_t)PTRDIFF_MAX + 1)); }
static void r_calloc_ovf(char *o, size_t n) { OBS_PTR(calloc(SIZE_MAX, 2)); }
static void r_calloc_ovf2(char *o, size_t n) { OBS_PTR(calloc((size_t)1 << 32, (size_t)1 << 32)); }
static void r_memalign_big(char *o, size_t n) { OBS_PTR(memalign(64, SIZE_MAX)); }
static void r_memalign_badal(char *o, size_t n) { OBS_PTR(memalign(SIZE_MAX / 2 + 2, 10)); }
static void r_memalign_bigal(char *o, size_t n) { OBS_PTR(memalign(SIZE_MAX / 2 + 1, 10)); }
static void r_aligned_big(char *o, size_t n) { OBS_PTR(aligned_alloc(64, SIZE_MAX)); }
static void r_aligned_65(char *o, size_t n) { OBS_PTR(aligned_alloc(65, 64)); }
static void r_aligned_0(char *o, size_t n) { OBS_PTR(aligned_alloc(0, 64)); }
static void r_aligned_bigal(char *o, size_t n) { OBS_PTR(aligned_alloc(SIZE_MAX / 2 + 1, 64)); }
static void r_aligned_badal(char *o, size_t n) { OBS_PTR(aligned_alloc(SIZE_MAX / 2 + 2, 64)); }
static void r_valloc_max(char *o, size_t n) { OBS_PTR(valloc(SIZE_MAX)); }
static void r_pvalloc_max(char *o, size_t n) { OBS_PTR(pvalloc(SIZE_MAX)); }

static void obs_posix_memalign(char *o, size_t n, size_t align, size_t size)
{
	void *out = (void *)0x77;
	errno = 0;
	int r = posix_memalign(&out, align, size);
	int e = errno;
	snprintf(o, n, "%s, %s%s", r == 0 ? "0" : r == ENOMEM ? "ENOMEM" : r == EINVAL ? "EINVAL" : "other",
		 err_name(e), r && out != (void *)0x77 ? ", *out set" : "");
	if (!r)
		free(out);
}
static void r_pm_big(char *o, size_t n) { obs_posix_memalign(o, n, 64, SIZE_MAX); }
static void r_pm_3(char *o, size_t n) { obs_posix_memalign(o, n, 3, 64); }
static void r_pm_0(char *o, size_t n) { obs_posix_memalign(o, n, 0, 64); }
static void r_pm_4(char *o, size_t n) { obs_posix_memalign(o, n, 4, 64); }
static void r_pm_24(char *o, size_t n) { obs_posix_memalign(o, n, 24, 64); }

static void obs_realloc_keep(char *o, size_t n, bool array)
{
	char *p = malloc(100);
	strcpy(p, "kept");
	errno = 0;
	void *q = array ? reallocarray(p, SIZE_MAX, 2) : realloc(p, SIZE_MAX);
	int e = errno;
	snprintf(o, n, "%s %s%s", q ? "ptr" : "NULL", err_name(e), !q && !strcmp(p, "kept") ? ", block kept" : "");
	free(q ? q : p);
}
static void r_realloc_max(char *o, size_t n) { obs_realloc_keep(o, n, false); }
static void r_reallocarray_ovf(char *o, size_t n) { obs_realloc_keep(o, n, true); }

/* ---- errno when memory runs out (an address-space limit, in a child) ---------- */

#define BIG (256UL << 20)
static char *oom_out;   /* shared with the child */

static size_t vm_bytes(void)
{
	unsigned long pages = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	CHECK(f && fscanf(f, "%lu", &pages) == 1);
	fclose(f);
	return pages * 4096;
}

/* Run fn in a child whose address space may grow by 32 MiB at most. */
static void oom_row(char *o, size_t n, void (*fn)(char *, size_t))
{
	oom_out[0] = 0;
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		struct rlimit rl = { vm_bytes() + (32UL << 20), RLIM_INFINITY };
		rl.rlim_max = rl.rlim_cur;
		if (setrlimit(RLIMIT_AS, &rl))
			_exit(1);
		fn(oom_out, 160);
		_exit(0);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status 0x%x", st);
	snprintf(o, n, "%s", oom_out);
}

static void f_malloc(char *o, size_t n) { OBS_PTR(malloc(BIG)); }
static void f_calloc(char *o, size_t n) { OBS_PTR(calloc(1, BIG)); }
static void f_memalign(char *o, size_t n) { OBS_PTR(memalign(4096, BIG)); }
static void f_aligned(char *o, size_t n) { OBS_PTR(aligned_alloc(4096, BIG)); }
static void f_valloc(char *o, size_t n) { OBS_PTR(valloc(BIG)); }
static void f_pvalloc(char *o, size_t n) { OBS_PTR(pvalloc(BIG)); }
static void f_pm(char *o, size_t n) { obs_posix_memalign(o, n, 4096, BIG); }
static void f_realloc(char *o, size_t n)
{
	char *p = malloc(100);
	strcpy(p, "kept");
	errno = 0;
	void *q = realloc(p, BIG);
	int e = errno;
	snprintf(o, n, "%s %s%s", q ? "ptr" : "NULL", err_name(e), !q && !strcmp(p, "kept") ? ", block kept" : "");
}
/* Small (or large) blocks until one fails: the segments themselves run out. */
static void until_fail(char *o, size_t n, size_t size)
{
	void *p;
	unsigned long k = 0;
	errno = 0;
	while ((p = malloc(size)) != NULL && k < 100000000UL) {
		((volatile char *)p)[0] = 1;
		k++;
	}
	snprintf(o, n, "%s after many", p ? "never NULL" : err_name(errno));
}
static void f_small(char *o, size_t n) { until_fail(o, n, 1000); }
static void f_large(char *o, size_t n) { until_fail(o, n, 40000); }

#define OOM(name, fn) static void name(char *o, size_t n) { oom_row(o, n, fn); }
OOM(r_oom_malloc, f_malloc)
OOM(r_oom_calloc, f_calloc)
OOM(r_oom_realloc, f_realloc)
OOM(r_oom_memalign, f_memalign)
OOM(r_oom_aligned, f_aligned)
OOM(r_oom_valloc, f_valloc)
OOM(r_oom_pvalloc, f_pvalloc)
OOM(r_oom_pm, f_pm)
OOM(r_oom_small, f_small)
OOM(r_oom_large, f_large)

/* ---- behaviours ---------------------------------------------------------------- */

static void r_usable_null(char *o, size_t n) { snprintf(o, n, "%zu", malloc_usable_size(NULL)); }

static void obs_realloc_same(char *o, size_t n, size_t from, size_t to)
{
	void *p = malloc(from);
	void *q = realloc(p, to);
	snprintf(o, n, "%s", q == p ? "same pointer" : "moved");
	free(q);
}
static void r_realloc_100(char *o, size_t n) { obs_realloc_same(o, n, 100, 100); }
static void r_realloc_5000(char *o, size_t n) { obs_realloc_same(o, n, 5000, 5000); }
static void r_realloc_200k(char *o, size_t n) { obs_realloc_same(o, n, 200000, 200000); }
static void r_realloc_shrink(char *o, size_t n) { obs_realloc_same(o, n, 200000, 100000); }
static void r_realloc_usable(char *o, size_t n)
{
	void *p = malloc(100);
	void *q = realloc(p, malloc_usable_size(p));
	snprintf(o, n, "%s", q == p ? "same pointer" : "moved");
	free(q);
}

static unsigned align_of(void *p) { return p ? (unsigned)__builtin_ctzl((uintptr_t)p) : 0; }

static void obs_memalign(char *o, size_t n, size_t al, unsigned want_log2)
{
	errno = 0;
	void *p = memalign(al, 100);
	if (!p)
		snprintf(o, n, "NULL %s", err_name(errno));
	else
		snprintf(o, n, "ptr, %s 2^%u", align_of(p) >= want_log2 ? "aligned to" : "NOT aligned to", want_log2);
	free(p);
}
static void r_memalign_24(char *o, size_t n) { obs_memalign(o, n, 24, 5); }
static void r_memalign_3(char *o, size_t n) { obs_memalign(o, n, 3, 2); }
static void r_memalign_0(char *o, size_t n) { obs_memalign(o, n, 0, 3); }
static void r_memalign_1000(char *o, size_t n) { obs_memalign(o, n, 1000, 10); }
static void r_memalign_65537(char *o, size_t n) { obs_memalign(o, n, 65537, 17); }

/* "page-aligned, usable U" (U exact below a page, else ">= N pages") */
static void obs_pagey(char *o, size_t n, void *p, size_t want)
{
	size_t u = p ? malloc_usable_size(p) : 0;
	if (!p)
		snprintf(o, n, "NULL");
	else if (want)
		snprintf(o, n, "%s, usable %s %zu", align_of(p) >= 12 ? "page-aligned" : "NOT page-aligned",
			 u >= want ? ">=" : "<", want);
	else
		snprintf(o, n, "%s, usable %zu", align_of(p) >= 12 ? "page-aligned" : "NOT page-aligned", u);
	free(p);
}
static void r_pvalloc_0(char *o, size_t n) { obs_pagey(o, n, pvalloc(0), 0); }
static void r_valloc_0(char *o, size_t n) { obs_pagey(o, n, valloc(0), 0); }
static void r_valloc_1(char *o, size_t n) { obs_pagey(o, n, valloc(1), 1); }
static void r_valloc_5000(char *o, size_t n) { obs_pagey(o, n, valloc(5000), 5000); }
static void r_pvalloc_1(char *o, size_t n) { obs_pagey(o, n, pvalloc(1), 4096); }
static void r_pvalloc_4097(char *o, size_t n) { obs_pagey(o, n, pvalloc(4097), 8192); }

static void r_zero(char *o, size_t n)
{
	void *a = malloc(0), *b = malloc(0), *c = calloc(0, 0), *d = realloc(NULL, 0);
	snprintf(o, n, "%s", a && b && c && d && a != b ? "unique pointers" : "NULL or shared");
	free(a);
	free(b);
	free(c);
	free(d);
}

static void r_realloc_0(char *o, size_t n)
{
	void *p = malloc(100);
	errno = 1789;
	void *q = realloc(p, 0);
	snprintf(o, n, "%s, %s", q ? "ptr" : "NULL", err_name(errno));
	free(q);
}

static void r_free_errno(char *o, size_t n)
{
	static const size_t sz[] = { 100, 5000, 100000, 3 << 20 };
	bool kept = true;
	for (unsigned i = 0; i < 4; i++) {
		void *p = malloc(sz[i]);
		errno = 1789;
		free(p);
		kept &= errno == 1789;
	}
	errno = 1789;
	free(NULL);
	kept &= errno == 1789;
	snprintf(o, n, "%s", kept ? "errno kept" : "errno changed");
}

static void r_malloc_info_bad(char *o, size_t n)
{
	FILE *f = fopen("/dev/null", "w");
	errno = 1789;
	int r = malloc_info(1, f);
	snprintf(o, n, "returns %d, %s", r, err_name(errno));
	fclose(f);
}

static void r_malloc_info(char *o, size_t n)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	int r = malloc_info(0, f);
	fclose(f);
	snprintf(o, n, "returns %d, %s", r, buf && !strncmp(buf, "<malloc", 7) ? "<malloc ...>" : "no XML");
	free(buf);
}

static void r_mallinfo2(char *o, size_t n)
{
	void *p = malloc(5000);
	struct mallinfo2 m = mallinfo2();
	snprintf(o, n, "%s", m.arena >= m.uordblks && m.uordblks >= 5000 ? "arena >= in use >= 5000" : "implausible");
	free(p);
}

static void r_trim(char *o, size_t n)
{
	int r = malloc_trim(0);
	snprintf(o, n, "%s", r == 0 || r == 1 ? "0 or 1" : "other");
}

/* ---- M_PERTURB ---------------------------------------------------------------- */

static void obs_fill(char *o, size_t n, const unsigned char *p, size_t len, int byte)
{
	size_t k = 0;
	for (size_t i = 0; i < len; i++)
		k += p[i] == byte;
	snprintf(o, n, "%s 0x%02x", k == len ? "all" : k ? "some" : "none", byte);
}

static void r_perturb_malloc(char *o, size_t n)
{
	unsigned char *p = malloc(5000);
	obs_fill(o, n, p, 5000, 0x5a);
	free(p);
}
static void r_perturb_memalign(char *o, size_t n)
{
	unsigned char *p = memalign(64, 5000);
	obs_fill(o, n, p, 5000, 0x5a);
	free(p);
}
static void r_perturb_calloc(char *o, size_t n)
{
	unsigned char *p = calloc(1, 5000);
	obs_fill(o, n, p, 5000, 0);
	free(p);
}
/* Freed bytes: a read after free, which is how glibc's perturb is seen.
 * Both allocators keep list pointers in some freed blocks (a few bytes),
 * glibc in some and not others: "filled" is at least 98 %. */
static void obs_freed(char *o, size_t n, size_t size)
{
	unsigned char *p = malloc(size);
	memset(p, 1, size);
	void *guard = malloc(100);   /* keeps glibc's block from merging into the top */
	free(p);
	size_t k = 0;
	size_t d = 0;
	for (size_t i = 0; i < size; i++) {
		k += p[i] == 0xa5;
		d += p[i] == 0x6b;
	}
	if (d * 100 >= size * 98)   /* slub_debug=P poisons slab objects at free, after the perturb fill */
		snprintf(o, n, "slub_debug poison 0x6b");
	else
		snprintf(o, n, "%s", k * 100 >= size * 98 ? "filled with 0xa5" : k ? "partly 0xa5" : "not filled");
	free(guard);
}
static void r_perturb_free(char *o, size_t n) { obs_freed(o, n, 5000); }
static void r_perturb_free_large(char *o, size_t n) { obs_freed(o, n, 100000); }

/* ---- mallopt ------------------------------------------------------------------- */

/* mallopt(param, v) for v = 1, 160, 161, -1, as "1 1 0 0" */
static void obs_mallopt(char *o, size_t n, int param)
{
	static const int v[] = { 1, 160, 161, -1 };
	int r[4];
	for (unsigned i = 0; i < 4; i++)
		r[i] = mallopt(param, v[i]);
	snprintf(o, n, "%d %d %d %d", r[0], r[1], r[2], r[3]);
}
#define MO(name, param) static void name(char *o, size_t n) { obs_mallopt(o, n, param); }
MO(m_mxfast, M_MXFAST)
MO(m_trim, M_TRIM_THRESHOLD)
MO(m_top, M_TOP_PAD)
MO(m_mmap, M_MMAP_THRESHOLD)
MO(m_mmapmax, M_MMAP_MAX)
MO(m_check, M_CHECK_ACTION)
MO(m_perturb, M_PERTURB)
MO(m_atest, M_ARENA_TEST)
MO(m_amax, M_ARENA_MAX)
MO(m_nlblks, M_NLBLKS)
MO(m_grain, M_GRAIN)
MO(m_keep, M_KEEP)
MO(m_unknown, 12345)
MO(m_unknown0, 0)
MO(m_unknown9, -9)

/* ---- what the thresholds do (RSS given back at free) ------------------------------ */

/* Does freeing a just-touched block of `size` bytes give its memory back at once? */
static void obs_given_back(char *o, size_t n, size_t size)
{
	char *p = malloc(size);
	memset(p, 1, size);
	void *guard = malloc(100);
	size_t before = test_rss();
	free(p);
	size_t after = test_rss();
	snprintf(o, n, "%s", before > after && before - after >= size / 2 ? "given back" : "kept");
	free(guard);
}
static void r_back_default(char *o, size_t n) { obs_given_back(o, n, 1 << 20); }
static void r_back_mmap(char *o, size_t n)
{
	CHECK(mallopt(M_MMAP_THRESHOLD, 64 * 1024) == 1);
	obs_given_back(o, n, 1 << 20);
	CHECK(mallopt(M_MMAP_THRESHOLD, -1) == 1);
}
static void r_back_trim(char *o, size_t n)
{
	CHECK(mallopt(M_TRIM_THRESHOLD, 0) == 1);
	obs_given_back(o, n, 100000);
	CHECK(mallopt(M_TRIM_THRESHOLD, 128 * 1024) == 1);
}
static void r_back_huge_pad(char *o, size_t n)
{
	CHECK(mallopt(M_TOP_PAD, 0) == 1);
	obs_given_back(o, n, 16 << 20);
	CHECK(mallopt(M_TOP_PAD, 64 << 20) == 1);
}

/* ---- glibc's environment variables --------------------------------------------------- */

/* `env` mode: what MALLOC_PERTURB_=165 (and the rest, set by the parent) do. */
static int env_mode(void)
{
	unsigned char *p = malloc(5000);
	size_t k = 0;
	for (size_t i = 0; i < 5000; i++)
		k += p[i] == 0x5a;
	printf("%s", k == 5000 ? "MALLOC_PERTURB_ applied" : "ignored");
	free(p);
	return 0;
}

static void r_env(char *o, size_t n)
{
	int out[2], err[2];
	CHECK(pipe(out) == 0 && pipe(err) == 0);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		dup2(out[1], 1);
		dup2(err[1], 2);
		close(out[0]);
		close(err[0]);
		setenv("MALLOC_PERTURB_", "165", 1);
		setenv("MALLOC_ARENA_MAX", "1", 1);
		setenv("MALLOC_ARENA_TEST", "1", 1);
		setenv("MALLOC_TOP_PAD_", "1", 1);
		setenv("MALLOC_TRIM_THRESHOLD_", "0", 1);
		setenv("MALLOC_MMAP_THRESHOLD_", "4096", 1);
		setenv("MALLOC_MMAP_MAX_", "0", 1);
		setenv("MALLOC_CHECK_", "3", 1);
		setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=1:glibc.malloc.tcache_count=0", 1);
		execl("/proc/self/exe", "test_glibc_compat", "env", (char *)NULL);
		_exit(127);
	}
	close(out[1]);
	close(err[1]);
	char buf[256] = "", ebuf[256] = "";
	ssize_t k = read(out[0], buf, sizeof buf - 1);
	buf[k > 0 ? k : 0] = 0;
	k = read(err[0], ebuf, sizeof ebuf - 1);
	ebuf[k > 0 ? k : 0] = 0;
	close(out[0]);
	close(err[0]);
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "env child 0x%x", st);
	snprintf(o, n, "%s, %s", buf, ebuf[0] ? "stderr output" : "quiet");
}

/* ---- the table ------------------------------------------------------------------------- */

static void table(void)
{
	printf("    %-52s %-28s %-28s\n", "call", "glibc 2.36", "uslab");
	/* first, before glibc's dynamic mmap threshold has moved */
	printf("  what the thresholds do\n");
	row("free(1 MiB block), defaults", "given back", "kept", r_back_default);
	SAME("free(1 MiB block), M_MMAP_THRESHOLD 64 KiB", "given back", r_back_mmap);
	row("free(100000-byte block), M_TRIM_THRESHOLD 0", NULL, "given back", r_back_trim);
	row("free(16 MiB block), M_TOP_PAD 0", NULL, "given back", r_back_huge_pad);
	printf("  errno of impossible requests\n");
	SAME("malloc(SIZE_MAX)", "NULL ENOMEM", r_malloc_max);
	SAME("malloc(PTRDIFF_MAX)", "NULL ENOMEM", r_malloc_pd);
	SAME("malloc(PTRDIFF_MAX + 1)", "NULL ENOMEM", r_malloc_pd1);
	SAME("calloc(SIZE_MAX, 2)", "NULL ENOMEM", r_calloc_ovf);
	SAME("calloc(2^32, 2^32)", "NULL ENOMEM", r_calloc_ovf2);
	SAME("realloc(p, SIZE_MAX)", "NULL ENOMEM, block kept", r_realloc_max);
	SAME("reallocarray(p, SIZE_MAX, 2)", "NULL ENOMEM, block kept", r_reallocarray_ovf);
	SAME("memalign(64, SIZE_MAX)", "NULL ENOMEM", r_memalign_big);
	SAME("memalign(SIZE_MAX/2 + 2, 10)", "NULL EINVAL", r_memalign_badal);
	SAME("memalign(SIZE_MAX/2 + 1, 10)", "NULL ENOMEM", r_memalign_bigal);
	SAME("aligned_alloc(64, SIZE_MAX)", "NULL ENOMEM", r_aligned_big);
	row("aligned_alloc(65, 64)", "ptr", "NULL EINVAL", r_aligned_65);
	row("aligned_alloc(0, 64)", "ptr", "NULL EINVAL", r_aligned_0);
	SAME("aligned_alloc(SIZE_MAX/2 + 1, 64)", "NULL ENOMEM", r_aligned_bigal);
	SAME("aligned_alloc(SIZE_MAX/2 + 2, 64)", "NULL EINVAL", r_aligned_badal);
	SAME("valloc(SIZE_MAX)", "NULL ENOMEM", r_valloc_max);
	SAME("pvalloc(SIZE_MAX)", "NULL ENOMEM", r_pvalloc_max);
	SAME("posix_memalign(&p, 64, SIZE_MAX)", "ENOMEM, ENOMEM", r_pm_big);
	SAME("posix_memalign(&p, 3, 64)", "EINVAL, errno 0", r_pm_3);
	SAME("posix_memalign(&p, 0, 64)", "EINVAL, errno 0", r_pm_0);
	SAME("posix_memalign(&p, 4, 64)", "EINVAL, errno 0", r_pm_4);
	SAME("posix_memalign(&p, 24, 64)", "EINVAL, errno 0", r_pm_24);
	printf("  errno when memory runs out (RLIMIT_AS: 32 MiB more)\n");
	SAME("malloc(256 MiB)", "NULL ENOMEM", r_oom_malloc);
	SAME("calloc(1, 256 MiB)", "NULL ENOMEM", r_oom_calloc);
	SAME("realloc(p, 256 MiB)", "NULL ENOMEM, block kept", r_oom_realloc);
	SAME("memalign(4096, 256 MiB)", "NULL ENOMEM", r_oom_memalign);
	SAME("aligned_alloc(4096, 256 MiB)", "NULL ENOMEM", r_oom_aligned);
	SAME("valloc(256 MiB)", "NULL ENOMEM", r_oom_valloc);
	SAME("pvalloc(256 MiB)", "NULL ENOMEM", r_oom_pvalloc);
	SAME("posix_memalign(&p, 4096, 256 MiB)", "ENOMEM, ENOMEM", r_oom_pm);
	SAME("malloc(1000) until NULL", "ENOMEM after many", r_oom_small);
	SAME("malloc(40000) until NULL", "ENOMEM after many", r_oom_large);
	printf("  behaviours\n");
	SAME("malloc_usable_size(NULL)", "0", r_usable_null);
	SAME("realloc(malloc(100), 100)", "same pointer", r_realloc_100);
	SAME("realloc(p, malloc_usable_size(p))", "same pointer", r_realloc_usable);
	SAME("realloc(malloc(5000), 5000)", "same pointer", r_realloc_5000);
	SAME("realloc(malloc(200000), 200000)", "same pointer", r_realloc_200k);
	SAME("realloc(malloc(200000), 100000)", "same pointer", r_realloc_shrink);
	SAME("memalign(24, 100)", "ptr, aligned to 2^5", r_memalign_24);
	SAME("memalign(3, 100)", "ptr, aligned to 2^2", r_memalign_3);
	SAME("memalign(0, 100)", "ptr, aligned to 2^3", r_memalign_0);
	SAME("memalign(1000, 100)", "ptr, aligned to 2^10", r_memalign_1000);
	SAME("memalign(65537, 100)", "ptr, aligned to 2^17", r_memalign_65537);
	row("pvalloc(0)", "page-aligned, usable 24", "page-aligned, usable 4096", r_pvalloc_0);
	row("valloc(0)", "page-aligned, usable 24", "page-aligned, usable 4096", r_valloc_0);
	SAME("valloc(1)", "page-aligned, usable >= 1", r_valloc_1);
	SAME("valloc(5000)", "page-aligned, usable >= 5000", r_valloc_5000);
	SAME("pvalloc(1)", "page-aligned, usable >= 4096", r_pvalloc_1);
	SAME("pvalloc(4097)", "page-aligned, usable >= 8192", r_pvalloc_4097);
	SAME("malloc(0) twice, calloc(0, 0), realloc(NULL, 0)", "unique pointers", r_zero);
	SAME("realloc(p, 0), errno preset", "NULL, errno kept", r_realloc_0);
	SAME("free() of each kind, errno preset", "errno kept", r_free_errno);
	SAME("malloc_info(1, f), errno preset", "returns 22, errno kept", r_malloc_info_bad);
	SAME("malloc_info(0, f)", "returns 0, <malloc ...>", r_malloc_info);
	SAME("mallinfo2()", "arena >= in use >= 5000", r_mallinfo2);
	SAME("malloc_trim(0)", "0 or 1", r_trim);
	printf("  M_PERTURB = 0xa5\n");
	CHECK(mallopt(M_PERTURB, 0xa5) == 1);
	SAME("malloc(5000)", "all 0x5a", r_perturb_malloc);
	SAME("memalign(64, 5000)", "all 0x5a", r_perturb_memalign);
	SAME("calloc(1, 5000)", "all 0x00", r_perturb_calloc);
	/* a kmalloc class: under slub_debug's P its poison is what a read after
	 * free sees ("slub_debug" alone means FZPU) */
	const char *dbg = getenv("USLAB_OPTIONS"), *sd = dbg ? strstr(dbg, "slub_debug") : NULL;
	bool poisoned = sd && (sd[10] != '=' || strcspn(sd + 11, "P ,") < strcspn(sd + 11, " ,"));
	row("free(malloc(5000)), read after", "filled with 0xa5",
	    poisoned ? "slub_debug poison 0x6b" : "filled with 0xa5", r_perturb_free);
	SAME("free(malloc(100000)), read after", "filled with 0xa5", r_perturb_free_large);
	CHECK(mallopt(M_PERTURB, 0) == 1);
	printf("  mallopt(param, v) for v = 1, 160, 161, -1\n");
	SAME("M_MXFAST", "1 1 0 0", m_mxfast);
	SAME("M_TRIM_THRESHOLD", "1 1 1 1", m_trim);
	SAME("M_TOP_PAD", "1 1 1 1", m_top);
	SAME("M_MMAP_THRESHOLD", "1 1 1 1", m_mmap);
	SAME("M_MMAP_MAX", "1 1 1 1", m_mmapmax);
	SAME("M_CHECK_ACTION", "1 1 1 1", m_check);
	SAME("M_PERTURB", "1 1 1 1", m_perturb);
	SAME("M_ARENA_TEST", "1 1 1 1", m_atest);
	SAME("M_ARENA_MAX", "1 1 1 1", m_amax);
	SAME("M_NLBLKS (SVID, unused)", "1 1 1 1", m_nlblks);
	SAME("M_GRAIN (SVID, unused)", "1 1 1 1", m_grain);
	SAME("M_KEEP (SVID, unused)", "1 1 1 1", m_keep);
	row("12345 (unknown)", "1 1 1 1", "0 0 0 0", m_unknown);
	row("0 (unknown)", "1 1 1 1", "0 0 0 0", m_unknown0);
	row("-9 (unknown)", "1 1 1 1", "0 0 0 0", m_unknown9);
	/* back to the defaults */
	CHECK(mallopt(M_PERTURB, 0) == 1);
	CHECK(mallopt(M_TRIM_THRESHOLD, 128 * 1024) == 1);
	CHECK(mallopt(M_TOP_PAD, 64 << 20) == 1);
	CHECK(mallopt(M_MMAP_THRESHOLD, -1) == 1);
	printf("  environment\n");
	row("MALLOC_PERTURB_=165 and other MALLOC_*, GLIBC_TUNABLES", "MALLOC_PERTURB_ applied, quiet",
	    "ignored, quiet", r_env);
	CHECKF(failures == 0, "%u rows differ from the %s column", failures, uslab ? "uslab" : "glibc");
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "env"))
		return env_mode();
#if USLAB_LINKED
	uslab = true;
#else
	uslab = dlsym(RTLD_DEFAULT, "uslab_malloc") != NULL;
#endif
	static char name[80];
	snprintf(name, sizeof name, "test_glibc_compat (%s)",
		 USLAB_LINKED ? "uslab, linked" : uslab ? "uslab, LD_PRELOAD" : "glibc");
	check_init(name);
	if (!uslab && strcmp(gnu_get_libc_version(), "2.36")) {
		printf("glibc %s: the glibc column is 2.36's; skipped\n", gnu_get_libc_version());
		return 77;
	}
	oom_out = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(oom_out != MAP_FAILED);
	RUN(table);
	return 0;
}
