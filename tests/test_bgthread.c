/*
 * The uslab thread (issues 11 and 19): the API and the option, fork in a
 * threaded program (the child starts its own thread on its first slow path
 * and its decay works), exit from any thread while the thread sleeps, runs
 * passes, serves the export (with or without decay passes) or is being
 * stopped (the process exits at once); the export's serving thread under
 * stress (readers' requests and commands, cache churn, the thread's role
 * switched and stopped, forks whose children serve their own files); and
 * the idle child that test_uslabinfo_idle.sh reads.
 *
 *   test_bgthread                     the tests
 *   test_bgthread idle-child N [MODE] make cache "idle_a" with N objects,
 *                                     print "READY pid active_objects", then
 *                                     until stdin closes: read (blocked in
 *                                     read(2), the default), sleep (in
 *                                     nanosleep), spin (a CPU loop of fast-path
 *                                     allocations and frees from "spin_b"), or
 *                                     fork (fork; the child takes one slow path,
 *                                     prints READY with its own pid and blocks
 *                                     in read(2); the parent waits for it)
 *   test_bgthread option-child W      (internal) the option path; W: 1 decay
 *                                     thread, s serving thread, 0 none; t, e,
 *                                     n: the default once the program starts
 *                                     a thread (option_child)
 *   test_bgthread exit-child MODE     (internal) exit while the thread runs
 *   test_bgthread serve-child         (internal) the serving thread's stress
 *                                     test, run with USLAB_OPTIONS=export
 *   test_bgthread last-child          (internal) the main thread exits first,
 *                                     a worker last (the process must end)
 *
 * dlopen/dlclose of libuslab.so is tests/test_bg_dlopen.c.
 *
 * No verdict depends on how fast the machine runs: whatever a thread must
 * eventually do (appear, stop, decay, serve, exit) is polled up to
 * CHECK_HANG_S, a bound only a hang reaches, and times are printed. Sleeps
 * here pace the stress; none stands in for a wait on another thread.
 */
#include "check.h"
#include "cpu.h"
#include "bgthread.h"

#include "export.h"

#include <dirent.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#if UNDER_TSAN
/* TSan kills a child of a multi-threaded fork that starts a thread: ours
 * does, by design. And fork's prepare handler holds every allocator lock
 * at once (two per cache: more than the 64 TSan's deadlock detector can
 * track once the malloc family's classes exist). */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
	return "die_after_fork=0 detect_deadlocks=0";
}
#endif

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* Threads of process pid (0: this one) named `name` (from /proc, not the
 * library). */
static int named_threads(int pid, const char *name)
{
	char dir[64];
	if (pid)
		snprintf(dir, sizeof dir, "/proc/%d/task", pid);
	else
		snprintf(dir, sizeof dir, "/proc/self/task");
	DIR *d = opendir(dir);
	CHECK(d != NULL);
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char path[400], comm[32] = "";
		snprintf(path, sizeof path, "%s/%s/comm", dir, e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof comm, f)) {
			comm[strcspn(comm, "\n")] = 0;
			n += !strcmp(comm, name);
		}
		fclose(f);
	}
	closedir(d);
	return n;
}

/* The thread with decay passes is named uslab-bg; serving the export only,
 * uslab-export. */
static int bg_threads(void)
{
	return named_threads(0, "uslab-bg");
}

static int export_threads(void)
{
	return named_threads(0, "uslab-export");
}

/* Is this process's thread named `name` blocked in futex(2) (its
 * /proc/self/task/TID/syscall names the call a blocked thread is in)? */
static bool thread_in_futex(const char *name)
{
	DIR *d = opendir("/proc/self/task");
	CHECK(d != NULL);
	bool in = false;
	struct dirent *e;
	while (!in && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char path[300], line[128] = "";
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		bool named = fgets(line, sizeof line, f) && (line[strcspn(line, "\n")] = 0, !strcmp(line, name));
		fclose(f);
		if (!named)
			continue;
		snprintf(path, sizeof path, "/proc/self/task/%s/syscall", e->d_name);
		f = fopen(path, "r");
		CHECKF(f != NULL, "%s: %s", path, strerror(errno));
		in = fgets(line, sizeof line, f) && strtol(line, NULL, 10) == SYS_futex && strncmp(line, "running", 7);
		fclose(f);
	}
	closedir(d);
	return in;
}

/* Wait (bounded) until count() == want. */
static bool wait_count(int (*count)(void), int want, double seconds)
{
	double t0 = check_now();
	while (count() != want) {
		if (check_now() - t0 > seconds)
			return false;
		sleep_ms(5);
	}
	return true;
}

/* Wait (bounded) until bg_threads() == want. */
static bool wait_threads(int want, double seconds)
{
	return wait_count(bg_threads, want, seconds);
}

static bool running(void)
{
	struct bg_stats st;
	bg_get_stats(&st);
	return st.running;
}

static uint64_t dirty_bytes(void)
{
	struct uslab_process_info p;
	memset(&p, 0, sizeof p);
	p.version = 1;
	CHECK(uslab_process_get_info(&p) == 0);
	return p.dirty_bytes;
}

/* A burst of malloc'ed objects, all freed: dirty memory to decay. */
static void burst(size_t bytes, uint64_t seed)
{
	size_t cap = bytes / 16 + 1, n = 0, sum = 0;
	void **v = mmap(NULL, cap * sizeof *v, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(v != MAP_FAILED);
	while (sum < bytes && n < cap) {
		size_t sz = 16 + rnd_next(&seed) % 1009;
		v[n] = uslab_malloc(sz);
		CHECK(v[n] != NULL);
		memset(v[n], 0x33, sz);
		sum += sz;
		n++;
	}
	for (size_t i = 0; i < n; i++)
		uslab_free(v[i]);
	munmap(v, cap * sizeof *v);
}

/* Wait (bounded) until almost nothing is dirty. */
static bool wait_clean(double seconds)
{
	double t0 = check_now();
	while (dirty_bytes() > 512 * 1024) {
		if (check_now() - t0 > seconds)
			return false;
		sleep_ms(10);
	}
	return true;
}

/* How long run_self() lets a child run before it kills it: a hang (its own
 * waits are bounded by CHECK_HANG_S). */
static double run_self_limit = 2 * CHECK_HANG_S;

/* Run this program with args in a child (USLAB_OPTIONS += extra); its
 * exit status and how long it took. */
static int run_self(const char *const *args, const char *extra, double *secs)
{
	double t0 = check_now();
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		if (extra) {
			const char *old = getenv("USLAB_OPTIONS");
			char buf[512];
			snprintf(buf, sizeof buf, "%s%s%s", old ? old : "", old && *old ? " " : "", extra);
			setenv("USLAB_OPTIONS", buf, 1);
		}
		char *argv[8];
		int i = 0;
		argv[i++] = (char *)"test_bgthread";
		for (; args[i - 1] && i < 7; i++)
			argv[i] = (char *)args[i - 1];
		argv[i] = NULL;
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	int st;
	for (;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);
		CHECK(w >= 0);
		if (w == pid)
			break;
		if (check_now() - t0 > run_self_limit) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			check_fail(__FILE__, __LINE__, "child", "%s did not exit within %.0f s", args[0], run_self_limit);
		}
		sleep_ms(2);
	}
	*secs = check_now() - t0;
	return st;
}

/* The malloc family's classes are made at its first call; do it before any
 * thread does (tests here are not about concurrent first calls). */
static void malloc_init_once(void)
{
	void *x = uslab_malloc(1);
	CHECK(x != NULL);
	uslab_free(x);
}

/* ---- the API -------------------------------------------------------------------- */

static void test_api(void)
{
	errno = 0;
	CHECK(uslab_background_thread(2) == -1 && errno == EINVAL);
	CHECK(uslab_background_thread(-1) == -1 && errno == EINVAL);
	CHECK(!running());
	CHECK(bg_threads() == 0);
	for (int round = 0; round < 3; round++) {
		CHECK(uslab_background_thread(1) == 0);
		CHECK(running());
		CHECK(uslab_background_thread(1) == 0);   /* already: nothing */
		CHECKF(wait_threads(1, CHECK_HANG_S), "%d uslab-bg threads, want 1", bg_threads());
		CHECK(uslab_background_thread(0) == 0);
		CHECK(!running());
		CHECKF(wait_threads(0, CHECK_HANG_S), "%d uslab-bg threads after stop", bg_threads());
		CHECK(uslab_background_thread(0) == 0);   /* not running: nothing */
	}
	/* signals go to the program's threads, never to ours */
	CHECK(uslab_background_thread(1) == 0);
	CHECK(wait_threads(1, CHECK_HANG_S));
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	bool checked = false;
	while ((e = readdir(d))) {
		char path[300], line[256], comm[32] = "";
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		bool ours = fgets(comm, sizeof comm, f) && !strncmp(comm, "uslab-bg", 8);
		fclose(f);
		if (!ours)
			continue;
		snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
		f = fopen(path, "r");
		CHECK(f != NULL);
		while (fgets(line, sizeof line, f))
			if (!strncmp(line, "SigBlk:", 7)) {
				unsigned long long blk = strtoull(line + 7, NULL, 16);
				const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGCHLD,
						     SIGALRM, SIGPIPE, SIGPROF, SIGWINCH, SIGRTMIN + 1 };
				for (unsigned k = 0; k < sizeof sigs / sizeof sigs[0]; k++)
					CHECKF(blk & (1ULL << (sigs[k] - 1)), "uslab-bg does not block signal %d: %s",
					       sigs[k], line);
				checked = true;
			}
		fclose(f);
	}
	closedir(d);
	CHECK(checked);
	CHECK(uslab_background_thread(0) == 0);
	CHECK(wait_threads(0, CHECK_HANG_S));
}

/* ---- USLAB_OPTIONS ----------------------------------------------------------------- */

/* A thread of the program's own: slow paths until told to stop. */
static _Atomic bool own_stop;

static void *own_thread(void *arg)
{
	uint64_t seed = (uintptr_t)arg;
	while (!atomic_load(&own_stop)) {
		burst(256 * 1024, seed++);   /* more than the parts hold: slow paths */
		sleep_ms(2);
	}
	return NULL;
}

/* Built twice: linked with libuslab.a (malloc is glibc's), and as
 * test_bgthread_malloc with libuslab-malloc.a (malloc is ours), which runs
 * test_option only. */
#ifndef MALLOC_OURS
#define MALLOC_OURS 0
#endif

/* want: '1' a thread with decay passes, 's' one that only serves the
 * export, '0' none; once the program starts a thread of its own: 't' a
 * decay thread (the malloc family's default), 'e' the serving thread, then
 * decay passes too (the same, with export), 'n' none even then, 'S' the
 * serving thread only even then (libuslab alone, malloc not ours). */
static int option_child(char want)
{
	/* (where malloc is ours, libc's own allocations before main ran init,
	 * and the constructor was the safe point) */
	CHECKF(MALLOC_OURS || (!running() && bg_threads() == 0 && export_threads() == 0),
	       "a thread before the first allocation");
	void *x = uslab_malloc(100);   /* init, then a slow path: the safe point */
	CHECK(x != NULL);
	uslab_free(x);
	struct bg_stats st;
	if (want == '1') {
		CHECKF(wait_threads(1, CHECK_HANG_S), "background_thread given, %d threads after a slow path", bg_threads());
		bg_get_stats(&st);
		CHECK(st.running && st.decay);
		CHECK(export_threads() == 0);
		CHECK_EQ(page_purge_delay_ms, 150);
	} else if (want == 's') {
		CHECKF(wait_count(export_threads, 1, CHECK_HANG_S), "export given, %d uslab-export threads after a slow path",
		       export_threads());
		bg_get_stats(&st);
		CHECK(st.running && !st.decay && bg_threads() == 0);
		sleep_ms(50);   /* a window for a wrong pass: a slower machine only shrinks it */
		bg_get_stats(&st);
		CHECKF(st.passes == 0, "a serving thread ran %llu decay passes", (unsigned long long)st.passes);
	} else if (want == 't' || want == 'e' || want == 'n' || want == 'S') {
		if (want == 'e' || want == 'S')
			CHECKF(wait_count(export_threads, 1, CHECK_HANG_S), "export given, no uslab-export thread");
		sleep_ms(50);   /* single-threaded so far: no decay thread */
		CHECKF(bg_threads() == 0, "a decay thread before the program had threads");
		atomic_store(&own_stop, false);
		pthread_t t;
		CHECK(pthread_create(&t, NULL, own_thread, (void *)(uintptr_t)7) == 0);
		if (want == 'n' || want == 'S') {
			sleep_ms(300);   /* (program_threaded() looks every 100 ms at most) */
			bg_get_stats(&st);
			CHECKF(bg_threads() == 0 && !st.decay, "no default here, yet a decay thread");
			CHECKF(want == 'S' ? export_threads() == 1 : !st.running, "%d serving threads", export_threads());
		} else {
			CHECKF(wait_threads(1, CHECK_HANG_S), "a program thread, yet %d decay threads", bg_threads());
			bg_get_stats(&st);
			CHECK(st.running && st.decay && export_threads() == 0);
		}
		atomic_store(&own_stop, true);
		pthread_join(t, NULL);
	} else {
		sleep_ms(50);
		CHECKF(!running() && bg_threads() == 0 && export_threads() == 0, "background_thread=0, yet a thread");
	}
	return 0;
}

static void test_option(void)
{
	/* where malloc is ours: linked with libuslab-malloc.a, unless a
	 * sanitizer's runtime took the malloc symbols (ASan, TSan) */
	struct bg_stats bs;
	bg_get_stats(&bs);
	const bool ours = MALLOC_OURS && bs.malloc_ours;
#if !USLAB_SANITIZER
	CHECKF(bs.malloc_ours == MALLOC_OURS, "malloc is %suslab's", bs.malloc_ours ? "" : "not ");
#endif
	if (MALLOC_OURS && !ours)
		printf("    malloc is the sanitizer's here: the default's cases are libuslab's\n");
	const struct {
		const char *opts;
		const char *want;
	} cases[] = {
		{ "background_thread decay_ms=150", "1" },
		{ "background_thread=1 decay_ms=150", "1" },
		{ "background_thread=0 decay_ms=150", "0" },
		{ "decay_ms=150", "0" },
		{ "export decay_ms=150", "s" },
		{ "export background_thread decay_ms=150", "1" },
		{ "export background_thread=0 decay_ms=150", "0" },
		/* a program thread: the malloc family's default starts one where
		 * malloc is ours (test_bgthread_malloc), libuslab alone never */
		{ "decay_ms=150", ours ? "t" : "n" },
		{ "export decay_ms=150", ours ? "e" : "S" },
		{ "background_thread=0 decay_ms=150", "n" },
	};
	for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		double secs;
		const char *args[] = { "option-child", cases[i].want, NULL };
		int st = run_self(args, cases[i].opts, &secs);
		CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "USLAB_OPTIONS='%s': child status 0x%x", cases[i].opts, st);
		printf("    USLAB_OPTIONS='%s': %s\n", cases[i].opts,
		       cases[i].want[0] == '1'   ? "a thread (uslab-bg)"
		       : cases[i].want[0] == 's' ? "a serving thread (uslab-export)"
		       : cases[i].want[0] == 't' ? "none while single-threaded, then uslab-bg once the program starts a thread"
		       : cases[i].want[0] == 'e' ? "uslab-export, then uslab-bg once the program starts a thread"
		       : cases[i].want[0] == 'n' ? "none, also once the program starts a thread"
		       : cases[i].want[0] == 'S' ? "uslab-export, serving only also once the program starts a thread"
						 : "no thread");
	}
}

/* ---- fork in a threaded program ------------------------------------------------------ */

static _Atomic bool workers_stop;
static struct uslab_cache *fork_cache;

static void *fork_worker(void *arg)
{
	uint64_t seed = (uintptr_t)arg;
	void *held[256];
	bool from_cache[256];
	unsigned n = 0;
	while (!atomic_load(&workers_stop)) {
		for (int k = 0; k < 64; k++) {
			bool c = rnd_chance(&seed, 50);
			void *x = c ? uslab_cache_alloc(fork_cache) : uslab_malloc(16 + rnd_next(&seed) % 1000);
			CHECK(x != NULL);
			unsigned j = n;
			if (n == 256) {   /* replace a random one */
				j = (unsigned)(rnd_next(&seed) % n);
				if (from_cache[j])
					uslab_cache_free(fork_cache, held[j]);
				else
					uslab_free(held[j]);
			} else {
				n++;
			}
			held[j] = x;
			from_cache[j] = c;
		}
	}
	for (unsigned i = 0; i < n; i++) {
		if (from_cache[i])
			uslab_cache_free(fork_cache, held[i]);
		else
			uslab_free(held[i]);
	}
	return NULL;
}

static void fork_child_body(int round)
{
	alarm((unsigned)(3 * CHECK_HANG_S));   /* a hang: beyond the waits below */
	/* no thread in the child until its first slow path */
	struct bg_stats st;
	bg_get_stats(&st);
	CHECKF(!st.running && st.pending, "child: running %d pending %d", st.running, st.pending);
	CHECK(bg_threads() == 0);
	burst(SCALE(8, 2) * MiB, 100 + (uint64_t)round);   /* slow paths: the thread starts again */
	CHECKF(wait_threads(1, CHECK_HANG_S), "child: %d uslab-bg threads after its slow paths", bg_threads());
	bg_get_stats(&st);
	CHECK(st.running && !st.pending && st.starts == 1);
	CHECKF(wait_clean(CHECK_HANG_S), "child: %llu dirty bytes %.0f s after its burst", (unsigned long long)dirty_bytes(),
	       CHECK_HANG_S);
	/* the cache API and the forking thread's parts work */
	void *x = uslab_cache_alloc(fork_cache);
	CHECK(x != NULL);
	uslab_cache_free(fork_cache, x);
	if (round & 1)
		exit(0);   /* destructors: the thread is stopped, within a bound */
	_exit(0);
}

static void test_fork_threaded(void)
{
	page_purge_delay_ms = 100;
	fork_cache = uslab_cache_create("bg_fork", 200, 0, 0, NULL);
	CHECK(fork_cache != NULL);
	CHECK(uslab_background_thread(1) == 0);
	enum { W = 3 };
	pthread_t t[W];
	atomic_store(&workers_stop, false);
	for (int i = 0; i < W; i++)
		CHECK(pthread_create(&t[i], NULL, fork_worker, (void *)(uintptr_t)(i + 1)) == 0);
	for (int round = 0; round < SCALE(6, 3); round++) {
		sleep_ms(30);
		fflush(NULL);
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0)
			fork_child_body(round);
		int status;
		double t0 = check_now();
		CHECK(waitpid(pid, &status, 0) == pid);
		CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d: status 0x%x", round, status);
		printf("    fork %d: child restarted its thread, decayed, exited in %.2f s\n", round, check_now() - t0);
		CHECK(running());
	}
	atomic_store(&workers_stop, true);
	for (int i = 0; i < W; i++)
		pthread_join(t[i], NULL);
	CHECK(running() && bg_threads() == 1);
	burst(SCALE(8, 2) * MiB, 7);
	double t0 = check_now();
	CHECKF(wait_clean(CHECK_HANG_S), "parent: %llu dirty bytes %.0f s after a burst", (unsigned long long)dirty_bytes(),
	       CHECK_HANG_S);
	printf("    parent: its burst decayed in %.2f s\n", check_now() - t0);
	CHECK(uslab_background_thread(0) == 0);
	CHECK_EQ(cache_active(fork_cache), 0);
	destroy_silently(fork_cache);
}

/* A child that forks while the thread is stopped runs none. */
static void test_fork_stopped(void)
{
	CHECK(uslab_background_thread(1) == 0);
	CHECK(uslab_background_thread(0) == 0);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		alarm(10);
		burst(MiB, 9);
		sleep_ms(20);
		CHECK(!running() && bg_threads() == 0);
		_exit(0);
	}
	int status;
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status 0x%x", status);
}

/* ---- exit from any thread ---------------------------------------------------------------- */

static _Atomic bool exit_churn_on;

static void *exit_churn(void *arg)
{
	uint64_t seed = 5;
	while (atomic_load(&exit_churn_on)) {
		void *v[64];
		for (int i = 0; i < 64; i++)
			v[i] = uslab_malloc(16 + rnd_next(&seed) % 4000);
		for (int i = 0; i < 64; i++)
			uslab_free(v[i]);
	}
	return arg;
}

/* When exit was called: written to $BG_EXIT_STAMP, which the parent reads
 * after the child is gone. */
static void exit_stamp(void)
{
	const char *path = getenv("BG_EXIT_STAMP");
	if (!path)
		return;
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	fprintf(f, "%.6f\n", check_now());
	fclose(f);
}

static void *exit_now(void *arg)
{
	sleep_ms(30);
	exit_stamp();
	exit((int)(uintptr_t)arg);
}

static void *stop_thread(void *arg)
{
	(void)arg;
	uslab_background_thread(0);
	return NULL;
}

/* MODE: sleeping (no deadline), busy (passes every 10 ms and a thread
 * churning), export (asleep on the export's futex), serve (export alone:
 * the thread only serves, asleep on the export's futex), stopping (another
 * thread stops it meanwhile), main (main returns while the thread runs). */
static int exit_child(const char *mode)
{
	page_purge_delay_ms = !strcmp(mode, "busy") ? 0 : 100;
	if (strcmp(mode, "serve"))
		CHECK(uslab_background_thread(1) == 0);
	burst(4 * MiB, 11);
	if (!strcmp(mode, "serve")) {
		CHECKF(wait_count(export_threads, 1, CHECK_HANG_S), "export alone: no uslab-export thread");
		/* until it sleeps on the export's futex (not a fixed nap: a
		 * loaded machine may not have run it yet) */
		double t0 = check_now();
		while (!thread_in_futex("uslab-export")) {
			CHECKF(check_now() - t0 < CHECK_HANG_S, "the uslab-export thread never slept");
			sleep_ms(2);
		}
	}
	pthread_t t;
	if (!strcmp(mode, "busy")) {
		atomic_store(&exit_churn_on, true);
		CHECK(pthread_create(&t, NULL, exit_churn, NULL) == 0);
	} else if (!strcmp(mode, "stopping")) {
		CHECK(pthread_create(&t, NULL, stop_thread, NULL) == 0);
		pthread_detach(t);
	} else if (!strcmp(mode, "sleeping") || !strcmp(mode, "export")) {
		double t0 = check_now();
		while (!atomic_load(&mem_bg_sleeping) && check_now() - t0 < CHECK_HANG_S)
			sleep_ms(5);
		CHECK(atomic_load(&mem_bg_sleeping));
	}
	if (!strcmp(mode, "main")) {
		exit_stamp();
		return 7;
	}
	CHECK(pthread_create(&t, NULL, exit_now, (void *)(uintptr_t)7) == 0);
	for (;;)
		pause();
}

static void test_exit_any_thread(void)
{
	static const char *const modes[] = { "sleeping", "busy", "export", "serve", "stopping", "main" };
	char stamp[64];
	snprintf(stamp, sizeof stamp, "/tmp/uslab-bg-exit-%d", (int)getpid());
	setenv("BG_EXIT_STAMP", stamp, 1);
	for (unsigned i = 0; i < sizeof modes / sizeof modes[0]; i++) {
		const char *args[] = { "exit-child", modes[i], NULL };
		double secs;
		unlink(stamp);
		int st = run_self(args, !strcmp(modes[i], "export") || !strcmp(modes[i], "serve") ? "export" : NULL, &secs);
		double gone = check_now(), called = 0;
		CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 7, "exit while the thread is %s: status 0x%x", modes[i], st);
		FILE *f = fopen(stamp, "r");
		CHECK(f != NULL && fscanf(f, "%lf", &called) == 1);
		fclose(f);
		printf("    exit(7) while the thread is %-8s: gone %.1f ms after exit() was called\n", modes[i],
		       (gone - called) * 1000);
		/* exit waits for the thread at most the destructor's bound (100 ms)
		 * whatever it is doing, then the process goes: a few ms on an idle
		 * machine (printed). Only a hang fails: an exit that waited for a
		 * thread asleep with no deadline would never end. */
		CHECKF(gone - called < CHECK_HANG_S, "exit while %s hung for %.2f s", modes[i], gone - called);
	}
	unlink(stamp);
	unsetenv("BG_EXIT_STAMP");
}

/* ---- the export's serving thread under stress ------------------------------------------- */

static void nap_us(unsigned us)
{
	struct timespec ts = { 0, (long)us * 1000L };
	nanosleep(&ts, NULL);
}

/* This process's export header, mapped as uslabinfo maps it. */
static struct export_header *map_export(void)
{
	const char *path = uslab_export_path();
	CHECK(path != NULL);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	CHECKF(fd >= 0, "open %s: %s", path, strerror(errno));
	void *m = mmap(NULL, sizeof(struct export_header), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(m != MAP_FAILED);
	close(fd);
	return m;
}

/* A request as uslabinfo posts it (req, then wake and FUTEX_WAKE); its number. */
static uint64_t post_request(struct export_header *h)
{
	uint64_t r = atomic_fetch_add(&h->req, 1) + 1;
	atomic_fetch_add(&h->wake, 1);
	syscall(SYS_futex, (uint32_t *)&h->wake, FUTEX_WAKE, 1, NULL, NULL, 0);
	return r;
}

static bool wait_ack(struct export_header *h, uint64_t r, double seconds)
{
	double t0 = check_now();
	while ((int64_t)(atomic_load_explicit(&h->ack, memory_order_acquire) - r) < 0) {
		if (check_now() - t0 > seconds)
			return false;
		nap_us(200);
	}
	return true;
}

/* Wait (bounded) until the header's `bg` is bits and the slow-path hook is
 * set (or not) as a served export wants. */
/* Is a start pending (the malloc family's default waits for the program's
 * first thread on the slow-path hook)? */
static bool start_pending(void)
{
	struct bg_stats st;
	bg_get_stats(&st);
	return st.pending;
}

static bool wait_served(struct export_header *h, uint32_t bits, double seconds)
{
	double t0 = check_now();
	/* served: no slow-path hook, but while a start waits */
	while (atomic_load(&h->bg) != bits || (atomic_load(&slab_slow_hook) == NULL) != (bits != 0 && !start_pending())) {
		if (check_now() - t0 > seconds)
			return false;
		sleep_ms(2);
	}
	return true;
}

/* A command through the mailbox, as uslabinfo posts it; readers share the
 * slot (claimed by CAS). */
static void post_command(struct export_header *h, uint32_t op, const char *cache, const char *key, uint64_t value)
{
	struct export_cmd *c = &h->cmd;
	double t0 = check_now();
	for (uint32_t st = CMD_EMPTY; !atomic_compare_exchange_strong(&c->state, &st, CMD_CLAIMED); st = CMD_EMPTY) {
		CHECKF(check_now() - t0 < CHECK_HANG_S, "the mailbox stayed in state %u for %.0f s", st, CHECK_HANG_S);
		nap_us(200);
	}
	atomic_store(&c->owner, (int32_t)getpid());
	c->op = op;
	snprintf(c->cache, sizeof c->cache, "%s", cache);
	snprintf(c->key, sizeof c->key, "%s", key);
	c->value = value;
	atomic_store_explicit(&c->state, CMD_POSTED, memory_order_release);
	post_request(h);
	uint32_t st;
	while ((st = atomic_load_explicit(&c->state, memory_order_acquire)) != CMD_DONE) {
		CHECKF(check_now() - t0 < CHECK_HANG_S, "command %u on '%s' not done in %.0f s (state %u, bg %u)", op,
		       cache, CHECK_HANG_S, st, atomic_load(&h->bg));
		nap_us(200);
	}
	CHECKF(c->err == 0, "command %u on '%s': error %d: %s", op, cache, c->err, c->msg);
	if (op == EXPORT_OP_VALIDATE)
		CHECKF(c->result == 0, "validate '%s': %lld problems", cache, (long long)c->result);
	atomic_store(&c->state, CMD_EMPTY);
}

static _Atomic bool serve_stop, readers_stop;   /* workers, readers: stop */
static _Atomic uint64_t serve_requests, serve_commands, serve_rounds;
static struct uslab_cache *serve_stable;

/* Cache churn (every create and destroy refreshes the snapshot), objects
 * of a cache the readers' commands act on, and the malloc family. */
static void *serve_worker(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg;
	uint64_t seed = 77 + id;
	void *held[128];
	for (unsigned round = 0; !atomic_load(&serve_stop); round++) {
		char name[32];
		snprintf(name, sizeof name, "serve_w%u_%u", id, round % 4);
		struct uslab_cache *c = uslab_cache_create(name, 32 + rnd_next(&seed) % 512, 0, USLAB_NO_MERGE, NULL);
		CHECK(c != NULL);
		unsigned n = 1 + (unsigned)(rnd_next(&seed) % 128);
		for (unsigned i = 0; i < n; i++)
			CHECK((held[i] = uslab_cache_alloc(c)) != NULL);
		for (unsigned i = 0; i < 16; i++) {
			void *x = uslab_cache_alloc(serve_stable);
			CHECK(x != NULL);
			memset(x, 0x5a, 200);
			uslab_cache_free(serve_stable, x);
			void *m = uslab_malloc(16 + rnd_next(&seed) % 2000);
			CHECK(m != NULL);
			uslab_free(m);
		}
		for (unsigned i = 0; i < n; i++)
			uslab_cache_free(c, held[i]);
		destroy_silently(c);
		atomic_fetch_add_explicit(&serve_rounds, 1, memory_order_relaxed);
	}
	return NULL;
}

/* uslabinfo, in a thread: refresh requests (each must be answered) and now
 * and then a command (shrink, set; validate only once the workers have
 * stopped: its walk of the page descriptors races with new slabs, which
 * test_mixed.c's USLAB_MIXED_VALIDATE_IN_USE describes). */
static void *serve_reader(void *arg)
{
	uint64_t seed = 991 + (uintptr_t)arg;
	struct export_header *h = map_export();
	for (unsigned i = 0; !atomic_load(&readers_stop); i++) {
		if (i % 8 == 7) {
			if (rnd_chance(&seed, 50))
				post_command(h, EXPORT_OP_SHRINK, "serve_stable", "", 0);
			else
				post_command(h, EXPORT_OP_SET, "serve_stable", "min_partial", 1 + rnd_next(&seed) % 8);
			atomic_fetch_add_explicit(&serve_commands, 1, memory_order_relaxed);
			continue;
		}
		uint64_t r = post_request(h);
		CHECKF(wait_ack(h, r, CHECK_HANG_S), "request %llu not answered in %.0f s (ack %llu, bg %u)",
		       (unsigned long long)r, CHECK_HANG_S, (unsigned long long)atomic_load(&h->ack), atomic_load(&h->bg));
		atomic_fetch_add_explicit(&serve_requests, 1, memory_order_relaxed);
		if (rnd_chance(&seed, 50))
			nap_us(100);
	}
	munmap(h, sizeof *h);
	return NULL;
}

/* A child forked while the serving thread and every other thread run: no
 * thread and no file until its first allocation slow path; then a file
 * named by its own pid, served by its own thread. */
static void serve_fork_child(void)
{
	alarm((unsigned)(3 * CHECK_HANG_S));   /* a hang: beyond the waits below */
	struct bg_stats st;
	bg_get_stats(&st);
	CHECKF(!st.running && st.pending, "forked child: running %d pending %d", st.running, st.pending);
	CHECK(uslab_export_path() == NULL);
	burst(4 * MiB, 5);   /* slow paths: more objects of each class than its inherited parts hold */
	char want[64];
	snprintf(want, sizeof want, "/" EXPORT_PREFIX "%d" EXPORT_SUFFIX, (int)getpid());
	double t0 = check_now();
	while (!uslab_export_path() || !strstr(uslab_export_path(), want)) {
		CHECKF(check_now() - t0 < CHECK_HANG_S, "forked child: no export file of its own");
		sleep_ms(2);
	}
	CHECKF(wait_count(export_threads, 1, CHECK_HANG_S), "forked child: %d uslab-export threads", export_threads());
	struct export_header *h = map_export();
	CHECK(h->pid == (int)getpid());
	CHECKF(wait_served(h, EXPORT_BG_SERVE, CHECK_HANG_S), "forked child: bg %u", atomic_load(&h->bg));
	uint64_t r = post_request(h);
	CHECKF(wait_ack(h, r, CHECK_HANG_S), "forked child: request not answered");
	/* _exit, not exit: the parent's other threads were mid-way through
	 * allocations of their own (LeakSanitizer would call them leaks); the
	 * file goes by hand, as exit's destructor would remove it */
	unlink(uslab_export_path());
	_exit(0);
}

static int serve_child(void)
{
	alarm((unsigned)(6 * CHECK_HANG_S));   /* a hang: beyond run_self_limit, which kills it first */
	malloc_init_once();   /* init (the export file), then a slow path: the thread starts */
	CHECKF(uslab_export_path() != NULL, "run with USLAB_OPTIONS=export");
	CHECKF(wait_count(export_threads, 1, CHECK_HANG_S), "export alone: %d uslab-export threads", export_threads());
	CHECK(bg_threads() == 0);
	struct export_header *h = map_export();
	CHECKF(wait_served(h, EXPORT_BG_SERVE, CHECK_HANG_S), "bg %u, slow-path hook %p", atomic_load(&h->bg),
	       (void *)atomic_load(&slab_slow_hook));
	struct bg_stats st, st2;
	bg_get_stats(&st);
	CHECK(st.running && !st.decay);
	uint64_t r = post_request(h);
	CHECKF(wait_ack(h, r, CHECK_HANG_S), "an idle process's request not answered in %.0f s", CHECK_HANG_S);
	bg_get_stats(&st2);
	CHECK(st2.serves > st.serves && st2.passes == 0);
	serve_stable = uslab_cache_create("serve_stable", 200, 0, USLAB_NO_MERGE, NULL);
	CHECK(serve_stable != NULL);

	enum { W = 2, R = 2 };
	pthread_t w[W], rd[R];
	atomic_store(&serve_stop, false);
	atomic_store(&readers_stop, false);
	for (int i = 0; i < W; i++)
		CHECK(pthread_create(&w[i], NULL, serve_worker, (void *)(uintptr_t)i) == 0);
	for (int i = 0; i < R; i++)
		CHECK(pthread_create(&rd[i], NULL, serve_reader, (void *)(uintptr_t)i) == 0);

	/* phase 1: serving only, with forks */
	for (int k = 0; k < SCALE(3, 2); k++) {
		sleep_ms(SCALE(150, 300));
		fflush(NULL);
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0)
			serve_fork_child();
		int status;
		double t0 = check_now();
		while (waitpid(pid, &status, WNOHANG) != pid) {
			CHECKF(check_now() - t0 < 4 * CHECK_HANG_S, "forked child %d did not exit in %.0f s", (int)pid,
			       4 * CHECK_HANG_S);
			sleep_ms(2);
		}
		CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "forked child: status 0x%x", status);
		CHECK(wait_served(h, EXPORT_BG_SERVE, CHECK_HANG_S));   /* the parent's thread goes on */
	}
	uint64_t after1 = atomic_load(&serve_requests);

	/* phase 2: the thread's role switched (decay too) and the thread stopped
	 * (served by slow paths meanwhile) while everything runs */
	for (int round = 0; round < SCALE(20, 8); round++) {
		CHECK(uslab_background_thread(1) == 0);
		bg_get_stats(&st);
		CHECK(st.running && st.decay);
		CHECKF(wait_served(h, EXPORT_BG_SERVE | EXPORT_BG_DECAY, CHECK_HANG_S), "round %d: bg %u", round,
		       atomic_load(&h->bg));
		CHECKF(wait_count(bg_threads, 1, CHECK_HANG_S), "round %d: %d uslab-bg threads", round, bg_threads());
		sleep_ms(10);
		CHECK(uslab_background_thread(0) == 0);
		bg_get_stats(&st);
		CHECK(!st.running);
		/* stopped: not served, and the slow path polls again at once */
		CHECKF(atomic_load(&h->bg) == 0 && atomic_load(&slab_slow_hook) != NULL, "round %d: bg %u hook %p", round,
		       atomic_load(&h->bg), (void *)atomic_load(&slab_slow_hook));
		sleep_ms(10);
	}
	/* the readers first: with the thread stopped, the workers' slow paths
	 * answer their last requests */
	atomic_store(&readers_stop, true);
	for (int i = 0; i < R; i++)
		pthread_join(rd[i], NULL);
	atomic_store(&serve_stop, true);
	for (int i = 0; i < W; i++)
		pthread_join(w[i], NULL);
	CHECK(atomic_load(&serve_requests) > after1 && after1 > 0 && atomic_load(&serve_commands) > 0);

	/* no thread: a request is served on an allocation slow path. Each
	 * round takes more objects than any part holds, so it reaches slow
	 * paths in every mode: a small burst of the same sizes can be served
	 * by warm parts alone (home mode), and a slow path within EXPORT_MIN_MS
	 * of the last refresh leaves the request to the next one */
	r = post_request(h);
	double t0 = check_now();
	while (!wait_ack(h, r, 0.01)) {
		CHECKF(check_now() - t0 < CHECK_HANG_S, "no thread: a request not served by slow paths in %.0f s",
		       CHECK_HANG_S);
		enum { MANY = 4096 };
		void **v = mmap(NULL, MANY * sizeof *v, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		CHECK(v != MAP_FAILED);
		for (int i = 0; i < MANY; i++)
			CHECK((v[i] = uslab_cache_alloc(serve_stable)) != NULL);
		for (int i = 0; i < MANY; i++)
			uslab_cache_free(serve_stable, v[i]);
		munmap(v, MANY * sizeof *v);
	}
	/* and the thread again, serving at once; validate, now that all is quiet */
	CHECK(uslab_background_thread(1) == 0);
	CHECK(wait_served(h, EXPORT_BG_SERVE | EXPORT_BG_DECAY, CHECK_HANG_S));
	r = post_request(h);
	CHECK(wait_ack(h, r, CHECK_HANG_S));
	post_command(h, EXPORT_OP_VALIDATE, "", "", 0);
	CHECK(uslab_background_thread(0) == 0);
	printf("    %llu requests, %llu commands answered; %llu worker rounds; %d forks\n",
	       (unsigned long long)atomic_load(&serve_requests), (unsigned long long)atomic_load(&serve_commands),
	       (unsigned long long)atomic_load(&serve_rounds), SCALE(3, 2));
	fflush(stdout);
	CHECK_EQ(cache_active(serve_stable), 0);
	destroy_silently(serve_stable);
	munmap(h, sizeof *h);
	return 0;
}

static void test_serve_stress(void)
{
	const char *args[] = { "serve-child", NULL };
	double secs;
	run_self_limit = 5 * CHECK_HANG_S;
	int st = run_self(args, "export", &secs);
	run_self_limit = 2 * CHECK_HANG_S;
	CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "serve-child: status 0x%x", st);
}

/* ---- the idle child of test_uslabinfo_idle.sh --------------------------------------------- */

/* Has stdin's writer gone (without reading or blocking)? */
static bool stdin_closed(void)
{
	struct pollfd p = { .fd = 0, .events = POLLIN };
	if (poll(&p, 1, 0) <= 0)
		return false;
	char b;
	return (p.revents & (POLLHUP | POLLERR)) || read(0, &b, 1) <= 0;
}

static int idle_child(long n, const char *mode)
{
	alarm(300);   /* a last bound if the test that started us is gone */
	struct uslab_cache *c = uslab_cache_create("idle_a", 100, 0, USLAB_NO_MERGE, NULL);
	CHECK(c != NULL);
	void **v = calloc((size_t)n + 1, sizeof *v);
	for (long i = 0; i < n; i++)
		CHECK((v[i] = uslab_cache_alloc(c)) != NULL);
	/* classic mode: only the owner counts its CPU free list as free, so
	 * that the exported count (read by another thread) agrees, give the
	 * CPU slab back first */
	struct uslab_cache_info info;
	cache_info(c, &info);
	if (!info.sheaf_capacity)
		uslab_cache_shrink(c);
	struct uslab_cache *b = NULL;
	if (!strcmp(mode, "spin")) {
		b = uslab_cache_create("spin_b", 64, 0, USLAB_NO_MERGE, NULL);
		CHECK(b != NULL);
		/* on one CPU: with parts of CPUs (the rseq backend) a move to
		 * another CPU finds that CPU's part empty, a slow path */
		cpu_set_t one;
		CPU_ZERO(&one);
		CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &one);
		CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
		void *x = uslab_cache_alloc(b);   /* the slow path, once: from now on the fast path */
		CHECK(x != NULL);
		uslab_cache_free(b, x);
	}
	pid_t forked = 0;
	if (!strcmp(mode, "fork")) {
		/* Fork once our serving thread has started (named itself in
		 * bg_main), not while it is still inside pthread_create's start:
		 * ASan's runtime (gcc 12's libasan) has no fork handler for its
		 * thread registry, so a fork during another thread's start can
		 * leave the child's registry locked, and the child's own thread
		 * then never starts. Bounded: the test fails on its own if the
		 * thread never comes. */
		(void)wait_count(export_threads, 1, 10.0);
		fflush(NULL);
		forked = fork();
		CHECK(forked >= 0);
		if (forked == 0) {
			alarm(300);
			/* the child: one allocation slow path (a size class this thread
			 * never used) makes its own export file and restarts its thread */
			void *x = uslab_malloc(3000);
			CHECK(x != NULL);
			forked = 0;
			mode = "read";
		}
	}
	if (forked > 0) {
		/* the parent: waits for the child, blocked in waitpid */
		int st;
		CHECK(waitpid(forked, &st, 0) == forked);
		for (long i = 0; i < n; i++)
			uslab_cache_free(c, v[i]);
		free(v);
		return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	}
	printf("READY %d %llu\n", (int)getpid(), (unsigned long long)cache_active(c));
	fflush(stdout);
	/* from here on: no allocation slow path until stdin closes */
	if (!strcmp(mode, "sleep")) {
		while (!stdin_closed())
			sleep_ms(50);
	} else if (!strcmp(mode, "spin")) {
		for (unsigned long i = 1;; i++) {
			void *x = uslab_cache_alloc(b);
			*(volatile char *)x = (char)i;
			uslab_cache_free(b, x);
			if (!(i & 0xffff) && stdin_closed())
				break;
		}
	} else {
		char ch;
		while (read(0, &ch, 1) > 0)
			;
	}
	for (long i = 0; i < n; i++)
		uslab_cache_free(c, v[i]);
	free(v);
	return 0;
}

/* ---- the process ends with its program's last thread --------------------------------- */
/*
 * A process ends when its last thread does. The uslab thread must not
 * keep it alive once the program's threads are gone: the main thread
 * calls pthread_exit() after the thread started, and a worker returns
 * later; the process must then end, with status 0. It looks once a second
 * (BG_ALONE_MS), so a process ends within about a second of its last
 * thread; the time is printed, the bound is a hang's.
 */

static void *late_worker(void *arg)
{
	void *x = uslab_malloc(100);
	CHECK(x != NULL);
	uslab_free(x);
	sleep_ms(50);
	return arg;
}

static int last_child(void)
{
	void *x = uslab_malloc(100);   /* init, then a slow path: the thread starts */
	CHECK(x != NULL);
	uslab_free(x);
	double t0 = check_now();
	while (!running()) {   /* the thread starts at this first slow path; only a hang waits long */
		CHECKF(check_now() - t0 < CHECK_HANG_S, "no uslab thread after a slow path");
		sleep_ms(2);
	}
	pthread_t t;
	CHECK(pthread_create(&t, NULL, late_worker, NULL) == 0);
	pthread_exit(NULL);   /* the worker is the program's last thread */
}

static void test_last_thread(void)
{
#if UNDER_TSAN
	/* TSan runs a thread of its own, so ours is never the last one: such a
	 * process does not end under TSan, with or without uslab's thread */
	printf("    skipped under ThreadSanitizer (its own background thread)\n");
	return;
#endif
	static const char *const opts[] = { "background_thread", "export" };
	for (unsigned i = 0; i < 2; i++) {
		const char *args[] = { "last-child", NULL };
		double secs;
		int st = run_self(args, opts[i], &secs);
		CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "USLAB_OPTIONS+='%s': status 0x%x", opts[i], st);
		printf("    %s: main thread pthread_exit(), worker returned: the process ended %.2f s after it started\n",
		       opts[i], secs);
	}
}

int main(int argc, char **argv)
{
	if (argc >= 3 && !strcmp(argv[1], "idle-child"))
		return idle_child(atol(argv[2]), argc >= 4 ? argv[3] : "read");
	if (argc >= 3 && !strcmp(argv[1], "option-child"))
		return option_child(argv[2][0]);
	if (argc >= 3 && !strcmp(argv[1], "exit-child"))
		return exit_child(argv[2]);
	if (argc >= 2 && !strcmp(argv[1], "serve-child"))
		return serve_child();
	if (argc >= 2 && !strcmp(argv[1], "last-child"))
		return last_child();
	check_init(MALLOC_OURS ? "test_bgthread_malloc" : "test_bgthread");
	malloc_init_once();
	if (MALLOC_OURS) {   /* the default's cases; the rest run in test_bgthread */
		RUN(test_option);
		return 0;
	}
	RUN(test_api);
	RUN(test_option);
	RUN(test_fork_threaded);
	RUN(test_fork_stopped);
	RUN(test_exit_any_thread);
	RUN(test_last_thread);
	RUN(test_serve_stress);
	return 0;
}
