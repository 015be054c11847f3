/*
 * KFENCE at its default rate (issue 20): sampling by time, one allocation
 * every kfence_ms (100), with no kfence option given. test_kfence forces
 * every allocation into the pool (kfence=1); this checks the default.
 * main() drops any kfence or slub_debug token from USLAB_OPTIONS (debug
 * caches are never sampled) and re-executes itself.
 *
 *   uaf_loop       a long loop of malloc/free pairs (all fast paths) that
 *                  reads each freed block: the first sampled block's read
 *                  is reported as a use after free (in a child)
 *   oob_loop       the same with an object-cache loop that writes one byte
 *                  past each object: reported as an out-of-bounds write at
 *                  the free (the canary) (in a child)
 *   slow_program   a thread that allocates about 1000 times a second, on
 *                  its fast paths only: it is sampled within seconds. The
 *                  seconds are the policy clock's (os.h), held by the test
 *                  and moved 1 ms per allocation, so that the verdict does
 *                  not depend on how fast this machine runs the loop
 *   fork_child     a fork child samples on its own
 *   off            kfence=0 and kfence_ms=0 (a re-exec each): no sample in
 *                  a loop of millions of allocations, no pool mapped
 *
 * The loops and the fork child run by real time: a sample is due 100 ms
 * after the last one, and they wait up to 20 and 10 s for it (only a hang
 * of sampling fails).
 */
#include "check.h"
#include "kfence.h"
#include "os.h"   /* os_clock_hold(), os_clock_advance() */

#include <time.h>

static char self_exe[4096];

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void pinfo(struct uslab_process_info *pi)
{
	memset(pi, 0, sizeof *pi);
	pi->version = USLAB_PROCESS_INFO_VERSION;
	CHECK_EQ(uslab_process_get_info(pi), 0);
}

/* ---- a bug found in a long loop (children) ------------------------------------------ */

static void uaf_loop(void *arg)
{
	double end = now_s() + 20;
	while (now_s() < end) {
		for (int i = 0; i < 100000; i++) {
			volatile char *p = uslab_malloc(48);
			p[5] = 1;
			uslab_free((void *)p);
			if (p[5] == 0x7f)   /* the bug: a read after free (a sample's page faults) */
				fprintf(stderr, "-");
		}
	}
	fprintf(stderr, "no sample in 20 s\n");
}

static void oob_loop(void *arg)
{
	/* 40-byte objects 64-aligned: a slab object's byte 40 is its own padding
	 * (the loop does not corrupt the slabs), a sample's is canary */
	struct uslab_cache *c = uslab_cache_create("kfr-oob", 40, 64, 0, NULL);
	CHECK(c != NULL);
	double end = now_s() + 20;
	while (now_s() < end) {
		for (int i = 0; i < 100000; i++) {
			volatile char *p = uslab_cache_alloc(c);
			p[40] = 1;   /* the bug: one byte past the object */
			uslab_cache_free(c, (void *)p);
		}
	}
	fprintf(stderr, "no sample in 20 s\n");
}

static void loops(void)
{
	CHECK_DEATH("use after free, default rate", uaf_loop, NULL, "BUG: KFENCE: use-after-free read",
		    "cache=kmalloc-48", "uslab: fatal: KFENCE: use-after-free read at");
	CHECK_DEATH("out of bounds, default rate", oob_loop, NULL, "BUG: KFENCE: out-of-bounds write",
		    "cache=kfr-oob", "uslab: fatal: KFENCE: out-of-bounds write");
}

/* ---- a program that allocates rarely ------------------------------------------------ */

static void slow_program(void)
{
	struct uslab_process_info a, b;
	pinfo(&a);
	CHECK_EQ(a.kfence_ms, 100);
	/* 1000 allocations a second of the clock KFENCE reads: held, and moved
	 * 1 ms per allocation (a real sleep would make the rate, and so the
	 * verdict, depend on how this machine schedules us); within 10 s of
	 * it, a sample (about 0.1 s + 256 allocations: a fast path looks at
	 * the clock when its count wraps) */
	os_clock_hold(true);
	double t0 = now_s();
	unsigned long n = 0;
	do {   /* one block: fast paths only */
		void *p = uslab_malloc(64);
		CHECK(p != NULL);
		uslab_free(p);
		n++;
		os_clock_advance(1);
		pinfo(&b);
	} while (b.kfence_allocs == a.kfence_allocs && n < 10000);
	os_clock_hold(false);
	printf("    first sample after %lu allocations, %lu ms of the held clock (%.3f s real)\n", n, n, now_s() - t0);
	CHECK(b.kfence_allocs > a.kfence_allocs);
	CHECK(b.kfence_pool_bytes > 0);   /* mapped by the first sample */
}

/* ---- fork ------------------------------------------------------------------------------ */

static void fork_sampler(void *arg)
{
	struct uslab_process_info a, b;
	pinfo(&a);
	double end = now_s() + 10;
	do {
		for (int i = 0; i < 10000; i++)
			uslab_free(uslab_malloc(100));
		pinfo(&b);
	} while (b.kfence_allocs == a.kfence_allocs && now_s() < end);
	_exit(b.kfence_allocs > a.kfence_allocs ? 0 : 3);
}

static void fork_child(void)
{
	struct child_result *r = malloc(sizeof *r);
	CHECK(r != NULL);
	run_in_child(fork_sampler, NULL, 30, r);
	CHECKF(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0, "the child sampled nothing: %s", r->out);
	free(r);
}

/* ---- off ------------------------------------------------------------------------------- */

static int off_mode(void)
{
	check_init("test_kfence_rate (off)");
	printf("  USLAB_OPTIONS=%s\n", getenv("USLAB_OPTIONS"));
	double end = now_s() + 0.5;
	unsigned long n = 0;
	while (now_s() < end) {
		for (int i = 0; i < 100000; i++)
			uslab_free(uslab_malloc(32));
		n += 100000;
	}
	struct uslab_process_info pi;
	pinfo(&pi);
	printf("    %lu allocations: %llu sampled, pool %llu bytes\n", n, (unsigned long long)pi.kfence_allocs,
	       (unsigned long long)pi.kfence_pool_bytes);
	CHECK_EQ(pi.kfence_allocs, 0);
	CHECK_EQ(pi.kfence_pool_bytes, 0);
	return 0;
}

static void run_off(const char *opt)
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (!pid) {
		setenv("USLAB_OPTIONS", opt, 1);
		execl(self_exe, self_exe, "--off", (char *)NULL);
		_exit(127);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: status %#x", opt, st);
}

static void off(void)
{
	run_off("kfence=0");
	run_off("kfence_ms=0");
}

/* No kfence, slub_debug or hardened token: the defaults. */
static void set_options(char **argv)
{
	static const char *const drop[] = { "slub_debug", "slab_debug", "kfence", "hardened", NULL };
	check_reexec_options(self_exe, argv, drop, NULL);
}

int main(int argc, char **argv)
{
	ssize_t n = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
	CHECK(n > 0);
	self_exe[n] = 0;
	if (argc == 2 && !strcmp(argv[1], "--off"))
		return off_mode();
	set_options(argv);   /* before anything is allocated */
	check_init("test_kfence_rate");
	printf("  USLAB_OPTIONS=%s\n", getenv("USLAB_OPTIONS") ? getenv("USLAB_OPTIONS") : "(unset)");
	RUN(slow_program);
	RUN(loops);
	RUN(fork_child);
	RUN(off);
	return 0;
}
