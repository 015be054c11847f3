/*
 * A tiny test harness: CHECK macros that print file:line and the expression
 * and exit 1, a runner that times each sub-test, helpers that run a function
 * in a forked child with its stderr captured (death tests), capture of this
 * process's own stderr, and RSS from /proc/self/statm.
 *
 * Header only; every test includes it once. Sizes of stress tests shrink
 * under sanitizers with SCALE(normal, sanitized).
 */
#ifndef USLAB_TEST_CHECK_H
#define USLAB_TEST_CHECK_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "uslab.h"

#ifdef USLAB_SANITIZER
#define SCALE(normal, sanitized) (sanitized)
#define UNDER_SANITIZER 1
#else
#define SCALE(normal, sanitized) (normal)
#define UNDER_SANITIZER 0
#endif

/* ThreadSanitizer keeps shadow memory for every byte ever touched, so RSS
 * bounds mean little there. */
#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif

#define MiB (1024UL * 1024UL)

/* ---- failing ----------------------------------------------------------- */

static void check_fail(const char *file, int line, const char *expr, const char *fmt, ...)
	__attribute__((noreturn, unused));
static void check_fail(const char *file, int line, const char *expr, const char *fmt, ...)
{
	char msg[1024];
	int n = snprintf(msg, sizeof msg, "%s:%d: CHECK failed: %s", file, line, expr);
	if (n < 0)
		n = 0;
	if (fmt && (size_t)n < sizeof msg) {
		va_list ap;
		va_start(ap, fmt);
		size_t m = (size_t)n;
		m += (size_t)snprintf(msg + m, sizeof msg - m, " -- ");
		if (m < sizeof msg)
			vsnprintf(msg + m, sizeof msg - m, fmt, ap);
		va_end(ap);
	}
	fflush(stdout);
	/* One write so that lines of several threads do not interleave. */
	size_t len = strlen(msg);
	if (len < sizeof msg - 1)
		msg[len++] = '\n';
	if (write(2, msg, len) < 0)
		_exit(1);
	/* _exit: other threads may still be inside the allocator; atexit
	 * handlers (the PASS line) must not run. */
	_exit(1);
}

#define CHECK(cond) \
	do { \
		if (!(cond)) \
			check_fail(__FILE__, __LINE__, #cond, NULL); \
	} while (0)

#define CHECKF(cond, ...) \
	do { \
		if (!(cond)) \
			check_fail(__FILE__, __LINE__, #cond, __VA_ARGS__); \
	} while (0)

/* Compare two integers and print both values on failure. */
#define CHECK_EQ(a, b) \
	do { \
		uintmax_t check_a_ = (uintmax_t)(a), check_b_ = (uintmax_t)(b); \
		if (check_a_ != check_b_) \
			check_fail(__FILE__, __LINE__, #a " == " #b, "%ju != %ju", check_a_, check_b_); \
	} while (0)

/* A call that must return NULL with errno set to e. */
#define CHECK_NULL_ERRNO(call, e) \
	do { \
		errno = 0; \
		void *check_r_ = (void *)(call); \
		int check_e_ = errno; \
		if (check_r_ != NULL || check_e_ != (e)) \
			check_fail(__FILE__, __LINE__, #call " == NULL && errno == " #e, \
				   "returned %p, errno %d (%s)", check_r_, check_e_, strerror(check_e_)); \
	} while (0)

/* ---- the statistics as text --------------------------------------------- */

/* uslab_stats_print(opts) into a buffer: the whole text, NUL-terminated, in
 * a static buffer that the next call overwrites (2 MiB: every cache of a
 * test's run, a row or object of about 1.5 KiB each; text past it is cut). */
struct check_text {
	char buf[2 << 20];
	size_t len;
};
static inline void check_text_write(void *arg, const char *s)
{
	struct check_text *t = arg;
	size_t n = strlen(s);
	if (t->len + n < sizeof t->buf) {
		memcpy(t->buf + t->len, s, n + 1);
		t->len += n;
	}
}
static inline char *check_stats_text(unsigned long opts)
{
	static struct check_text t;
	t.len = 0;
	t.buf[0] = 0;
	uslab_stats_print(check_text_write, &t, opts);
	return t.buf;
}

/* ---- timing and the PASS line ------------------------------------------ */

static inline double check_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* No verdict may depend on how fast the machine runs (CI runs two tests at
 * once on two cores, sanitizers are 2-20x slower): a wait for something
 * that must happen eventually is polled up to this bound, which only a
 * hang reaches, and how long it took is printed, never checked. Speed
 * targets belong in the benchmarks. */
#define CHECK_HANG_S 30.0

static double check_t0;
static const char *check_name;
static pid_t check_main_pid;

static void check_atexit(void)
{
	if (getpid() != check_main_pid)
		return;
	printf("PASS %s (%.2f s%s)\n", check_name, check_now() - check_t0,
	       UNDER_SANITIZER ? ", sanitizer sizes" : "");
	fflush(stdout);
}

/* Call first in main(). The PASS line with the total time is printed when
 * main returns normally. */
static inline void check_init(const char *name)
{
	check_t0 = check_now();
	check_name = name;
	check_main_pid = getpid();
	setvbuf(stdout, NULL, _IOLBF, 0);
	atexit(check_atexit);
}

/* Run one sub-test and print its time. */
#define RUN(fn) \
	do { \
		double run_t0_ = check_now(); \
		printf("  %-44s ...\n", #fn); \
		fn(); \
		printf("  %-44s ok (%.3f s)\n", #fn, check_now() - run_t0_); \
	} while (0)

/* ---- children ------------------------------------------------------------ */

struct child_result {
	int status;          /* from waitpid */
	char out[16384];     /* the child's stderr (truncated) */
	size_t len;
};

/*
 * Run fn(arg) in a forked child whose stderr goes into res->out. The child
 * exits 0 if fn returns. A child that hangs is killed by SIGALRM after
 * `timeout_s` seconds. The caller must be single-threaded (or know that no
 * other thread holds a lock the child needs).
 */
static inline void run_in_child(void (*fn)(void *), void *arg, unsigned timeout_s, struct child_result *res)
{
	int fds[2];
	CHECK(pipe(fds) == 0);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		if (dup2(fds[1], 2) < 0)
			_exit(127);
		close(fds[1]);
		alarm(timeout_s);
		fn(arg);
		fflush(NULL);
		_exit(0);
	}
	close(fds[1]);
	res->len = 0;
	for (;;) {
		char tmp[4096];
		ssize_t n = read(fds[0], tmp, sizeof tmp);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		size_t room = sizeof res->out - 1 - res->len;
		size_t take = (size_t)n < room ? (size_t)n : room;
		memcpy(res->out + res->len, tmp, take);
		res->len += take;
	}
	res->out[res->len] = 0;
	close(fds[0]);
	while (waitpid(pid, &res->status, 0) < 0)
		CHECK(errno == EINTR);
}

static inline void child_describe(const struct child_result *r, char *buf, size_t size)
{
	if (WIFEXITED(r->status))
		snprintf(buf, size, "exited with status %d", WEXITSTATUS(r->status));
	else if (WIFSIGNALED(r->status))
		snprintf(buf, size, "killed by signal %d (%s)", WTERMSIG(r->status), strsignal(WTERMSIG(r->status)));
	else
		snprintf(buf, size, "wait status 0x%x", r->status);
}

/* Case-insensitive substring test. */
static inline bool check_contains(const char *hay, const char *needle)
{
	return strcasestr(hay, needle) != NULL;
}

/*
 * Run fn(arg) in a child; true if the child died by SIGABRT and its stderr
 * contains every string of the NULL-terminated list (case-insensitively).
 * On a mismatch, prints what happened and returns false.
 */
static inline bool check_death_v(const char *what, void (*fn)(void *), void *arg, const char *const *needles)
{
	struct child_result *r = malloc(sizeof *r);
	CHECK(r != NULL);
	run_in_child(fn, arg, 30, r);
	bool ok = WIFSIGNALED(r->status) && WTERMSIG(r->status) == SIGABRT;
	const char *missing = NULL;
	for (const char *const *n = needles; *n; n++) {
		if (!check_contains(r->out, *n)) {
			ok = false;
			missing = *n;
			break;
		}
	}
	char desc[128];
	child_describe(r, desc, sizeof desc);
	if (!ok) {
		fprintf(stderr, "death test '%s': child %s, expected SIGABRT%s%s%s; its stderr:\n%s%s",
			what, desc, missing ? " and text '" : "", missing ? missing : "", missing ? "'" : "",
			r->out, r->len && r->out[r->len - 1] == '\n' ? "" : "\n");
	} else {
		printf("    %-40s died as expected: %.*s", what, (int)strcspn(r->out, "\n") + 1, r->out);
		if (!strchr(r->out, '\n'))
			printf("\n");
	}
	free(r);
	return ok;
}

#define CHECK_DEATH(what, fn, arg, ...) \
	do { \
		const char *const check_needles_[] = { __VA_ARGS__, NULL }; \
		CHECKF(check_death_v(what, fn, arg, check_needles_), "%s", what); \
	} while (0)

/* ---- capturing this process's stderr ------------------------------------ */

struct stderr_capture {
	int saved;
	FILE *tmp;
};

/* fd 2 is process-wide: one capture at a time. */
static pthread_mutex_t stderr_capture_lock = PTHREAD_MUTEX_INITIALIZER;

static inline void stderr_capture_begin(struct stderr_capture *c)
{
	pthread_mutex_lock(&stderr_capture_lock);
	fflush(stderr);
	c->tmp = tmpfile();
	CHECK(c->tmp != NULL);
	c->saved = dup(2);
	CHECK(c->saved >= 0);
	CHECK(dup2(fileno(c->tmp), 2) == 2);
}

/* Stop capturing; returns what was written (NUL-terminated, truncated to
 * size - 1) and echoes it to the real stderr prefixed "captured: " so that
 * nothing a sanitizer printed is lost. */
static inline size_t stderr_capture_end(struct stderr_capture *c, char *buf, size_t size)
{
	fflush(stderr);
	CHECK(dup2(c->saved, 2) == 2);
	close(c->saved);
	rewind(c->tmp);
	size_t n = fread(buf, 1, size - 1, c->tmp);
	buf[n] = 0;
	fclose(c->tmp);
	pthread_mutex_unlock(&stderr_capture_lock);
	if (n)
		fprintf(stderr, "captured stderr: %s%s", buf, buf[n - 1] == '\n' ? "" : "\n");
	return n;
}

/* Destroy a cache that must be empty: destroy must print nothing. */
static inline void destroy_silently(struct uslab_cache *c)
{
	struct stderr_capture cap;
	char buf[4096];
	stderr_capture_begin(&cap);
	uslab_cache_destroy(c);
	size_t n = stderr_capture_end(&cap, buf, sizeof buf);
	CHECKF(n == 0, "destroy of an empty cache printed: %s", buf);
}

/* ---- memory ---------------------------------------------------------------- */

/* Resident set size in bytes, read independently of the library. */
static inline size_t test_rss(void)
{
	char buf[128];
	size_t rss = 0;
	int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0);
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	CHECK(n > 0);
	buf[n] = 0;
	unsigned long size_pages, rss_pages;
	CHECK(sscanf(buf, "%lu %lu", &size_pages, &rss_pages) == 2);
	rss = rss_pages * (size_t)sysconf(_SC_PAGESIZE);
	return rss;
}

static inline uint64_t cache_active(struct uslab_cache *c)
{
	struct uslab_cache_info info;
	memset(&info, 0, sizeof info);
	info.version = USLAB_CACHE_INFO_VERSION;
	CHECK(uslab_cache_get_info(c, &info) == 0);
	return info.active_objects;
}

/* Objects in KFENCE's pool now (every cache): KFENCE is on by default,
 * and a sampled object is live but in no slab. */
static inline uint64_t kfence_in_use(void)
{
	struct uslab_process_info pi = { .version = USLAB_PROCESS_INFO_VERSION };
	CHECK(uslab_process_get_info(&pi) == 0);
	return pi.kfence_in_use;
}
/* KFENCE samples taken so far (every cache). */
static inline uint64_t kfence_allocs(void)
{
	struct uslab_process_info pi = { .version = USLAB_PROCESS_INFO_VERSION };
	CHECK(uslab_process_get_info(&pi) == 0);
	return pi.kfence_allocs;
}

static inline void cache_info(struct uslab_cache *c, struct uslab_cache_info *info)
{
	memset(info, 0, sizeof *info);
	info->version = USLAB_CACHE_INFO_VERSION;
	CHECK(uslab_cache_get_info(c, info) == 0);
}

/* Allocations and frees counted by the event counters: the sum of every
 * item whose name says where an allocation (free) was served, looked up by
 * name so that new paths (FREE_PCS for per-CPU object queues)
 * are counted as they are added. */
static inline uint64_t ev_sum_named(const struct uslab_cache_info *info, const char *const *names)
{
	uint64_t sum = 0;
	for (int i = 0; i < USLAB_NR_STAT_ITEMS; i++) {
		const char *n = uslab_stat_name((enum uslab_stat_item)i);
		for (const char *const *w = names; n && *w; w++)
			if (strcmp(n, *w) == 0)
				sum += info->events[i];
	}
	return sum;
}

/* Does the cache of this snapshot keep its CPU parts per CPU (the rseq
 * backend runs it: sheaves mode, not debugged)? Then a thread holds none
 * of its objects, there are at most as many parts as CPUs, and shrink
 * takes back what every part holds. */
static inline bool cache_per_cpu(const struct uslab_cache_info *info)
{
	return !strcmp(uslab_cpu_backend(), "rseq") && info->cpu_mode == USLAB_CPU_SHEAVES &&
	       !(info->flags & (USLAB_CONSISTENCY_CHECKS | USLAB_RED_ZONE | USLAB_POISON | USLAB_STORE_USER |
				USLAB_TRACE));
}
/* CPUs a process may run on (the per-CPU backend's parts are at most one
 * per CPU that ran the cache). */
static inline unsigned check_ncpus_conf(void)
{
	long n = sysconf(_SC_NPROCESSORS_CONF);
	return n > 0 ? (unsigned)n : 1;
}

/* Does slub_debug (a debug flag, or USLAB_OPTIONS=slub_debug) apply to the
 * cache? Then every operation takes the slow path. */
static inline bool cache_debugged(const struct uslab_cache_info *info)
{
	return info->flags & (USLAB_CONSISTENCY_CHECKS | USLAB_RED_ZONE | USLAB_POISON | USLAB_STORE_USER |
			      USLAB_TRACE);
}

/* For tests about what slub_debug changes by design (debug caches never
 * merge and have no CPU queue): run `debug_check` while slub_debug is on
 * for every cache, then run the test again without it, so that the rest of
 * the test checks the non-debug semantics. Call first in main(). */
static inline void rerun_without_slub_debug(char **argv, void (*debug_check)(void))
{
	const char *o = getenv("USLAB_OPTIONS");
	if (!o || (!strstr(o, "slub_debug") && !strstr(o, "slab_debug")))
		return;
	printf("  slub_debug on: %s, then the test again without it\n", "checking what debug caches do");
	debug_check();
	fflush(stdout);
	unsetenv("USLAB_OPTIONS");
	execv("/proc/self/exe", argv);
	perror("execv /proc/self/exe");
	exit(1);
}

static inline uint64_t ev_allocs(const struct uslab_cache_info *info)
{
	static const char *const names[] = { "ALLOC_FASTPATH", "ALLOC_PCS", "ALLOC_SLOWPATH", "ALLOC_BULK", NULL };
	return ev_sum_named(info, names);
}

static inline uint64_t ev_frees(const struct uslab_cache_info *info)
{
	static const char *const names[] = { "FREE_FASTPATH", "FREE_SLOWPATH", "FREE_PCS", "FREE_BULK", NULL };
	return ev_sum_named(info, names);
}

/* Operations on the lock-free fast paths: a sheaf (PCS) or the CPU free
 * list of classic mode (FASTPATH). */
static inline uint64_t ev_fast_allocs(const struct uslab_cache_info *info)
{
	static const char *const names[] = { "ALLOC_FASTPATH", "ALLOC_PCS", NULL };
	return ev_sum_named(info, names);
}

static inline uint64_t ev_fast_frees(const struct uslab_cache_info *info)
{
	static const char *const names[] = { "FREE_FASTPATH", "FREE_PCS", NULL };
	return ev_sum_named(info, names);
}

/* ---- re-executing with other options ------------------------------------ */

/* USLAB_OPTIONS without the tokens that start with one of drop[] (NULL
 * ended), plus `add` (NULL: nothing); if that differs from what is set,
 * re-execute exe with it (before anything is allocated: options are read
 * once). Returns only when nothing changed. */
static inline void check_reexec_options(const char *exe, char **argv, const char *const *drop, const char *add)
{
	const char *env = getenv("USLAB_OPTIONS");
	char out[1024] = "";
	size_t len = 0;
	for (const char *s = env ? env : ""; *s;) {
		while (*s == ' ' || *s == '\t' || *s == '\n')
			s++;
		const char *t = s;
		while (*s && *s != ' ' && *s != '\t' && *s != '\n')
			s++;
		if (s == t)
			break;
		bool skip = false;
		for (const char *const *d = drop; *d && !skip; d++)
			skip = !strncmp(t, *d, strlen(*d));
		if (skip)
			continue;
		len += (size_t)snprintf(out + len, sizeof out - len, "%.*s ", (int)(s - t), t);
		CHECK(len < sizeof out - 64);
	}
	if (add)
		snprintf(out + len, sizeof out - len, "%s", add);
	else if (len)
		out[len - 1] = 0;   /* the last token's space */
	if (env ? !strcmp(env, out) : !*out)
		return;
	printf("  re-executing with USLAB_OPTIONS=%s\n", out);
	fflush(stdout);
	setenv("USLAB_OPTIONS", out, 1);
	execv(exe, argv);
	CHECKF(false, "execv %s: %s", exe, strerror(errno));
}

/* ---- random numbers ---------------------------------------------------- */

static inline uint64_t rnd_next(uint64_t *s)
{
	/* splitmix64 */
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static inline bool rnd_chance(uint64_t *s, unsigned percent)
{
	return rnd_next(s) % 100 < percent;
}

#endif
