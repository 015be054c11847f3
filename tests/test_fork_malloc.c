/*
 * fork and the malloc family (docs/testing.md rows 39-42), one scenario per
 * run: `test_fork_malloc MODE` with MODE
 *
 *   stdio        8 threads getline a 50,000-byte line (glibc's getline
 *                calls malloc holding the FILE lock), 1 thread loops on
 *                fflush(NULL) (holding the stdio list lock, waiting for FILE
 *                locks), 4 threads fork, children _exit(17); 3 s, and on
 *                until a fork and a getline have completed (row 39,
 *                glibc's tst-malloc-fork-deadlock).
 *   signal       5 threads send SIGUSR1 to a thread looping over
 *                malloc/realloc/free of up to 70,000 bytes in 1009 slots,
 *                10,000 iterations or 5 s, whichever comes first, but not
 *                before a signal has landed inside the allocator
 *                (USLAB_TEST_FULL=1: all of them); the handler forks (row
 *                40, with threads). The child finishes the interrupted call
 *                and exits; every 16th allocates, every 256th does all that
 *                `child` does.
 *   signal-lone  the same from 5 sender processes to a process that never
 *                had a second thread, with a fork in the loop now and then
 *                (row 40 as glibc's tst-mallocfork2 runs it); first, the
 *                children of a plain fork in such a process are checked.
 *   child        the child after each kind of fork (main thread, another
 *                thread, while 3 threads churn; nested) allocates every size
 *                class, frees the parent's blocks, creates and destroys a
 *                cache and forks again (row 41).
 *   many         1000 threads fork at once (row 42).
 *
 * Built twice: linked with libuslab-malloc.a (USLAB_LINKED), and plain, to
 * run under LD_PRELOAD=libuslab-malloc.so (it checks that uslab is there).
 * A hang is a failure: an alarm ends the run with a message before the
 * CTest timeout would. Nothing else depends on how fast the machine runs:
 * the runs that last a set time go on (up to CHECK_HANG_S more) until what
 * they check has happened at least once, rather than count on a loaded
 * machine to have scheduled it in time.
 */
#include "check.h"

#include <dlfcn.h>
#include <malloc.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#if USLAB_LINKED
#include "fork.h"
#endif
#if defined(__GLIBC__)
#include <sys/single_threaded.h>
#endif

static const char *mode = "";
static unsigned watchdog_s;

static void on_alarm(int sig)
{
	char msg[160];
	int n = snprintf(msg, sizeof msg, "test_fork_malloc %s: no end after %u s: a fork deadlocked\n", mode,
			 watchdog_s);
	if (write(2, msg, (size_t)n) < 0)
		_exit(1);
	_exit(1);
}

static void watchdog(unsigned s)
{
	watchdog_s = s;
	signal(SIGALRM, on_alarm);
	alarm(s);
}

/* Is uslab the malloc here? Linked: yes. Plain: only under LD_PRELOAD. */
static size_t (*uslab_usable)(void *);

static void require_uslab(void)
{
#if USLAB_LINKED
	uslab_usable = uslab_malloc_usable_size;
#else
	uslab_usable = (size_t (*)(void *))dlsym(RTLD_DEFAULT, "uslab_malloc_usable_size");
	CHECKF(uslab_usable != NULL, "run me with LD_PRELOAD=libuslab-malloc.so");
#endif
}

static void print_fork_stats(void)
{
#if USLAB_LINKED
	struct fork_stats st;
	fork_get_stats(&st);
	printf("    fork handlers: %llu with threads, %llu lone, %llu nested, %llu self-interrupted, %llu owner "
	       "windows, %llu locks left, %llu waits, %llu under a decay pass's hold\n",
	       (unsigned long long)st.forks, (unsigned long long)st.lone, (unsigned long long)st.nested,
	       (unsigned long long)st.self, (unsigned long long)st.windows, (unsigned long long)st.left,
	       (unsigned long long)st.waits, (unsigned long long)st.proxied);
#endif
}

/* ---- what a child checks ------------------------------------------------- */

static void child_fail(const char *what)
{
	char msg[200];
	int n = snprintf(msg, sizeof msg, "test_fork_malloc %s: child: %s\n", mode, what);
	if (write(2, msg, (size_t)n) < 0)
		_exit(1);
	_exit(1);
}

/* Write the block's first and last bytes and a byte every 4 KiB up to
 * 64 KiB (not all of it: children are many, and faulting pages in is not
 * what they test). */
static void touch(void *p, size_t n, const char *what)
{
	if (!p)
		child_fail(what);
	if (!n)
		return;
	volatile char *c = p;
	for (size_t i = 0; i < n && i < 65536; i += 4096)
		c[i] = 0x5c;
	c[n - 1] = 0x5c;
}

/* A few blocks of each tier (grown by realloc below 100 KB). */
static void child_light(void)
{
	static const size_t sz[] = { 1, 24, 100, 1000, 5000, 40000, 300000, 3 << 20 };
	for (unsigned i = 0; i < sizeof sz / sizeof sz[0]; i++) {
		char *p = malloc(sz[i]);
		touch(p, sz[i], "malloc");
		if (sz[i] < 100000) {
			p = realloc(p, sz[i] * 2 + 1);
			touch(p, sz[i] * 2 + 1, "realloc");
		}
		free(p);
	}
}

static void fork_again(void)
{
	pid_t pid = fork();
	if (pid < 0)
		child_fail("fork again failed");
	if (pid == 0) {
		child_light();
		_exit(17);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			child_fail("waitpid of the grandchild");
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 17)
		child_fail("the grandchild failed");
}

/* Every size class (8-byte steps to 128, four per power of two to 32 KiB),
 * two blocks each, then large and huge blocks; the parent's blocks freed; a
 * cache created, used and destroyed; fork again. */
static void child_full(void **parent, size_t n)
{
	enum { PER = 2 };
	void *keep[64 * PER + 16];
	unsigned k = 0;
	for (size_t s = 8; s <= 128; s += 8)
		for (unsigned j = 0; j < PER; j++)
			touch(keep[k++] = malloc(s), s, "malloc of a small class");
	for (size_t base = 128; base < 32768; base *= 2)
		for (size_t q = 1; q <= 4; q++)
			for (unsigned j = 0; j < PER; j++) {
				size_t s = base + q * (base / 4);
				touch(keep[k++] = malloc(s), s, "malloc of a class");
			}
	static const size_t big[] = { 40000, 100000, 1 << 20, 2 << 20, 3 << 20, 10 << 20 };
	for (unsigned i = 0; i < sizeof big / sizeof big[0]; i++)
		touch(keep[k++] = malloc(big[i]), big[i], "malloc of a large block");
	void *a = memalign(4096, 5000), *c = calloc(100, 100);
	touch(a, 5000, "memalign");
	touch(c, 10000, "calloc");
	free(a);
	free(c);
	for (size_t i = 0; i < n; i++) {
		free(parent[i]);
		parent[i] = NULL;
	}
	for (unsigned i = 0; i < k; i++)
		free(keep[i]);
#if USLAB_LINKED
	struct uslab_cache *uc = uslab_cache_create("forkchild", 200, 0, 0, NULL);
	if (!uc)
		child_fail("uslab_cache_create");
	void *o[300];
	for (unsigned i = 0; i < 300; i++)
		touch(o[i] = uslab_cache_alloc(uc), 200, "uslab_cache_alloc");
	for (unsigned i = 0; i < 300; i++)
		uslab_cache_free(uc, o[i]);
	uslab_cache_destroy(uc);
#endif
	fork_again();
}

/* ---- row 39: getline, fflush(NULL) and fork ------------------------------ */

static _Atomic bool stop;
static char line_file[64];
static _Atomic unsigned long nforks, nlines, nflushes;

static void *reader(void *arg)
{
	FILE *f = fopen(line_file, "r");
	CHECK(f != NULL);
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		rewind(f);
		char *line = NULL;
		size_t cap = 0;
		ssize_t r = getline(&line, &cap, f);
		CHECK(r == 50001);
		free(line);
		atomic_fetch_add_explicit(&nlines, 1, memory_order_relaxed);
	}
	fclose(f);
	return NULL;
}

static void *flusher(void *arg)
{
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		CHECK(fflush(NULL) == 0);
		atomic_fetch_add_explicit(&nflushes, 1, memory_order_relaxed);
	}
	return NULL;
}

static void *forker(void *arg)
{
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0)
			_exit(17);
		int st;
		CHECK(waitpid(pid, &st, 0) == pid);
		CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 17, "child status 0x%x", st);
		atomic_fetch_add_explicit(&nforks, 1, memory_order_relaxed);
	}
	return NULL;
}

static void test_stdio(void)
{
	/* glibc's test starts so, and stops when this returns 0 */
	CHECK(mallopt(M_ARENA_MAX, 400) == 1);
	strcpy(line_file, "/tmp/uslab-forkline.XXXXXX");
	int fd = mkstemp(line_file);
	CHECK(fd >= 0);
	FILE *f = fdopen(fd, "w");
	CHECK(f != NULL);
	for (int i = 0; i < 50000; i++)
		fputc('x', f);
	fputc('\n', f);
	CHECK(fclose(f) == 0);
	/* getline's buffer is uslab's (else this aborts: not allocated by uslab) */
	f = fopen(line_file, "r");
	char *line = NULL;
	size_t cap = 0;
	CHECK(getline(&line, &cap, f) == 50001);
	CHECK(uslab_usable(line) >= 50002);
	free(line);
	fclose(f);

	pthread_t fk[4], rd[8], fl;
	for (int i = 0; i < 4; i++)
		CHECK(pthread_create(&fk[i], NULL, forker, NULL) == 0);
	for (int i = 0; i < 8; i++)
		CHECK(pthread_create(&rd[i], NULL, reader, NULL) == 0);
	CHECK(pthread_create(&fl, NULL, flusher, NULL) == 0);
	struct timespec ts = { 3, 0 };
	while (nanosleep(&ts, &ts))
		;
	/* and until a fork and a getline have completed: a loaded machine may
	 * have given the threads little of those 3 s (only a hang fails) */
	double t0 = check_now();
	while (!atomic_load(&nforks) || !atomic_load(&nlines)) {
		CHECKF(check_now() - t0 < CHECK_HANG_S, "%.0f s more: %lu forks, %lu getlines", CHECK_HANG_S,
		       atomic_load(&nforks), atomic_load(&nlines));
		struct timespec nap = { 0, 10000000 };
		nanosleep(&nap, NULL);
	}
	atomic_store(&stop, true);
	pthread_join(fl, NULL);
	for (int i = 0; i < 8; i++)
		pthread_join(rd[i], NULL);
	for (int i = 0; i < 4; i++)
		pthread_join(fk[i], NULL);
	unlink(line_file);
	printf("    %.1f s: %lu forks, %lu getlines, %lu fflush(NULL)\n", 3 + check_now() - t0, nforks, nlines, nflushes);
	CHECK(nforks > 0 && nlines > 0);
	print_fork_stats();
}

/* ---- row 40: fork from a signal handler ------------------------------------ */

/*
 * 10,000 iterations as glibc's test, or SIGNAL_SECONDS, whichever ends
 * first: every iteration costs a fork or two, about a millisecond each on an
 * idle 2-CPU machine and several on a loaded one. Past SIGNAL_SECONDS the
 * loop goes on (up to CHECK_HANG_S more) until a signal has landed inside
 * malloc/realloc/free at least once: whether one did in the first seconds
 * is luck, which a loaded machine makes scarce.
 * USLAB_TEST_FULL=1 in the environment runs all 10,000;
 * USLAB_SIGNAL_SECONDS=N sets the seconds (the test command's reruns of
 * this build in other modes give 2: the floor of one landed signal stays).
 */
enum { SLOTS = 1009, MAX_SIZE = 70000, ITERS = 10000, SENDERS = 5, LIGHT_EVERY = 16, FULL_EVERY = 256,
       SIGNAL_SECONDS = 5 };
static void *slots[SLOTS];

static bool full_run(void)
{
	const char *full = getenv("USLAB_TEST_FULL");
	return full && *full == '1';
}

static double signal_seconds(void)
{
	const char *s = getenv("USLAB_SIGNAL_SECONDS");
	char *end;
	double v = s && *s ? strtod(s, &end) : SIGNAL_SECONDS;
	CHECKF(!s || !*s || (*end == 0 && v >= 0), "USLAB_SIGNAL_SECONDS=%s: not a number of seconds", s);
	return v;
}

/* Shared with the senders (threads, or processes: then mapped shared). */
struct signal_ctl {
	pthread_barrier_t bar;
	volatile int stop;      /* set by the target before the first barrier of an iteration */
	_Atomic int in_ops;     /* the target is inside malloc/realloc/free (in_ops, shared) */
};
static struct signal_ctl *ctl;
static double sig_deadline;   /* check_now() when the loop stops, 0: run every iteration */
static unsigned sig_iters;    /* iterations done */
static volatile sig_atomic_t in_ops;      /* the loop is inside malloc/realloc/free */
static volatile sig_atomic_t in_child;    /* a child whose handler returned into the loop */
static volatile sig_atomic_t sig_error;   /* what went wrong in the handler */
static volatile sig_atomic_t sig_status;
static volatile sig_atomic_t sig_forks, sig_in_ops, sig_children;

/* Most children only finish the interrupted call and exit (as glibc's
 * test's children exit at once: forks are what is tested, and they cost
 * ~1 ms each on a small machine); every LIGHT_EVERY-th allocates a little,
 * every FULL_EVERY-th does child_full. */
static void child_after_signal_fork(void)
{
	alarm(20);
	if (sig_children % FULL_EVERY == 0)
		child_full(slots, SLOTS);
	else if (sig_children % LIGHT_EVERY == 0)
		child_light();
	_exit(17);
}

static void on_usr1(int sig)
{
	int e = errno;
	sig_forks = sig_forks + 1;
	if (in_ops)
		sig_in_ops = sig_in_ops + 1;
	pid_t pid = fork();
	if (pid < 0) {
		sig_error = 1;
	} else if (pid == 0) {
		if (!in_ops)
			child_after_signal_fork();   /* not inside the allocator: now */
		in_child = 1;   /* after the interrupted call completes */
	} else {
		int st = 0;
		pid_t r;
		while ((r = waitpid(pid, &st, 0)) < 0 && errno == EINTR)
			;
		if (r != pid) {
			sig_error = 2;
		} else if (!WIFEXITED(st) || WEXITSTATUS(st) != 17) {
			sig_error = 3;
			sig_status = st;
		}
		sig_children = sig_children + 1;
	}
	errno = e;
}

static void ops(uint64_t *rs)
{
	unsigned i = (unsigned)(rnd_next(rs) % SLOTS);
	size_t size = rnd_next(rs) % MAX_SIZE;
	unsigned what = (unsigned)(rnd_next(rs) % 4);
	in_ops = 1;
	atomic_store_explicit(&ctl->in_ops, 1, memory_order_relaxed);
	atomic_signal_fence(memory_order_seq_cst);
	if (what == 0 && slots[i]) {
		void *q = realloc(slots[i], size + 1);
		if (q)
			slots[i] = q;
	} else {
		free(slots[i]);
		slots[i] = what == 1 ? calloc(1, size) : malloc(size);
	}
	atomic_signal_fence(memory_order_seq_cst);
	in_ops = 0;
	atomic_store_explicit(&ctl->in_ops, 0, memory_order_relaxed);
	if (in_child)
		child_after_signal_fork();
	if (!slots[i] && size)
		check_fail(__FILE__, __LINE__, "slots[i] != NULL", "allocation of %zu bytes failed", size);
}

static void check_signal_result(unsigned it)
{
	if (sig_error) {
		char desc[128];
		struct child_result r = { .status = sig_status };
		child_describe(&r, desc, sizeof desc);
		check_fail(__FILE__, __LINE__, "no error in the SIGUSR1 handler",
			   "iteration %u: error %d (child %s)", it, (int)sig_error, desc);
	}
}

static void install_usr1(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_usr1;
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
}

static pthread_t target;

/* Start an iteration (the target): false when the loop is over. */
static bool iteration_begin(unsigned it)
{
	double now = sig_deadline ? check_now() : 0;
	if (it == ITERS || (sig_deadline && now > sig_deadline && (sig_in_ops > 0 || now > sig_deadline + CHECK_HANG_S)))
		ctl->stop = 1;
	pthread_barrier_wait(&ctl->bar);
	return !ctl->stop;
}

/* A sender: one signal per iteration, between the target's barriers. */
static void sender_loop(void (*send)(void))
{
	for (unsigned k = 0;; k++) {
		pthread_barrier_wait(&ctl->bar);
		if (ctl->stop)
			return;
		/* Every other signal waits (at most 2 ms) until the target is
		 * inside the allocator: sent at once, on a loaded machine they
		 * all land before the target has left the barrier (a CI run
		 * counted 0 of 2754 inside malloc/realloc/free). */
		if (k & 1) {
			double end = check_now() + 0.002;
			while (!atomic_load_explicit(&ctl->in_ops, memory_order_relaxed) && check_now() < end)
				;
		}
		send();
		pthread_barrier_wait(&ctl->bar);
	}
}

static void send_to_target(void) { pthread_kill(target, SIGUSR1); }

static void *sender_thread(void *arg)
{
	sender_loop(send_to_target);
	return NULL;
}

static void signal_setup(bool shared)
{
	install_usr1();
	ctl = mmap(NULL, sizeof *ctl, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(ctl != MAP_FAILED);
	pthread_barrierattr_t at;
	pthread_barrierattr_init(&at);
	pthread_barrierattr_setpshared(&at, shared ? PTHREAD_PROCESS_SHARED : PTHREAD_PROCESS_PRIVATE);
	CHECK(pthread_barrier_init(&ctl->bar, &at, SENDERS + 1) == 0);
	sig_deadline = full_run() ? 0 : check_now() + signal_seconds();
}

static void *target_thread(void *arg)
{
	uint64_t rs = 42;
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);   /* created with it blocked, as the senders */
	for (sig_iters = 0; iteration_begin(sig_iters); sig_iters++) {
		ops(&rs);
		pthread_barrier_wait(&ctl->bar);
		check_signal_result(sig_iters);
	}
	return NULL;
}

static void signal_summary(double t0)
{
	printf("    %u iterations in %.2f s: %d handler forks, %d of them inside malloc/realloc/free\n", sig_iters,
	       check_now() - t0, (int)sig_forks, (int)sig_in_ops);
	CHECK(sig_forks > 0 && sig_in_ops > 0);
	for (unsigned i = 0; i < SLOTS; i++) {
		free(slots[i]);
		slots[i] = NULL;
	}
	print_fork_stats();
}

static void test_signal_threads(void)
{
	signal_setup(false);
	sigset_t set, old;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &set, &old);   /* only the target takes SIGUSR1 */
	double t0 = check_now();
	pthread_t snd[SENDERS];
	CHECK(pthread_create(&target, NULL, target_thread, NULL) == 0);
	for (int i = 0; i < SENDERS; i++)
		CHECK(pthread_create(&snd[i], NULL, sender_thread, NULL) == 0);
	for (int i = 0; i < SENDERS; i++)
		pthread_join(snd[i], NULL);
	pthread_join(target, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	signal_summary(t0);
}

/* ---- the same with sender processes, in a process without threads ---------- */

static void fork_and_check(void);
static pid_t target_pid;

static void send_to_process(void)
{
	if (kill(target_pid, SIGUSR1))
		_exit(1);
}

static void sender_process(void)
{
	/* die with the test, rather than wait at the barrier for good */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != target_pid)
		_exit(1);
	sender_loop(send_to_process);
	_exit(0);
}

static void test_signal_lone(void)
{
#if defined(__GLIBC__)
	CHECKF(__libc_single_threaded, "this mode needs a process that never had a second thread");
#endif
	for (unsigned i = 0; i < 10; i++)
		fork_and_check();   /* row 41: the child of a plain fork here */
	signal_setup(true);
	pid_t snd[SENDERS];
	target_pid = getpid();
	for (int i = 0; i < SENDERS; i++) {
		snd[i] = fork();
		CHECK(snd[i] >= 0);
		if (snd[i] == 0)
			sender_process();
	}
	double t0 = check_now();
	uint64_t rs = 7;
	unsigned loop_forks = 0;
	for (sig_iters = 0; iteration_begin(sig_iters); sig_iters++) {
		if (rnd_next(&rs) % 7 == 0) {
			/* a fork of the loop's own, which a signal may interrupt */
			in_ops = 1;
			pid_t pid = fork();
			in_ops = 0;
			/* A child of the handler's fork returns here, from either side
			 * of this fork (the signal may come before or after its
			 * system call): it is not this loop's parent. */
			if (in_child)
				child_after_signal_fork();
			if (pid == 0)
				_exit(17);
			CHECK(pid > 0);
			int st;
			while (waitpid(pid, &st, 0) < 0)
				CHECK(errno == EINTR);
			CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 17, "child status 0x%x", st);
			loop_forks++;
		}
		ops(&rs);
		pthread_barrier_wait(&ctl->bar);
		check_signal_result(sig_iters);
	}
	for (int i = 0; i < SENDERS; i++) {
		int st;
		CHECK(waitpid(snd[i], &st, 0) == snd[i]);
	}
	printf("    %u forks of the loop itself\n", loop_forks);
	signal_summary(t0);
}

/* ---- row 41: the child after each kind of fork ------------------------------ */

static _Atomic bool churn_stop;

static void *churn(void *arg)
{
	uint64_t rs = (uintptr_t)arg;
	void *v[64] = { 0 };
	while (!atomic_load_explicit(&churn_stop, memory_order_relaxed)) {
		unsigned i = (unsigned)(rnd_next(&rs) % 64);
		free(v[i]);
		size_t n = rnd_chance(&rs, 1) ? (3u << 20) : 1 + rnd_next(&rs) % 70000;
		v[i] = malloc(n);
		CHECK(v[i] != NULL);
	}
	for (unsigned i = 0; i < 64; i++)
		free(v[i]);
	return NULL;
}

/* Fork; the child runs child_full on the caller's blocks and exits 17. */
static void fork_and_check(void)
{
	enum { N = 200 };
	void *mine[N];
	for (unsigned i = 0; i < N; i++)
		CHECK((mine[i] = malloc(1 + i * 347)) != NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		alarm(20);
		child_full(mine, N);
		_exit(17);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		CHECK(errno == EINTR);
	char desc[128];
	struct child_result r = { .status = st };
	child_describe(&r, desc, sizeof desc);
	CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 17, "child %s", desc);
	for (unsigned i = 0; i < N; i++)
		free(mine[i]);
}

static void *fork_from_thread(void *arg)
{
	for (unsigned i = 0; i < 20; i++)
		fork_and_check();
	return NULL;
}

static void test_child(void)
{
	/* a process without threads first */
	for (unsigned i = 0; i < 10; i++)
		fork_and_check();
	pthread_t t[3], f;
	for (uintptr_t i = 0; i < 3; i++)
		CHECK(pthread_create(&t[i], NULL, churn, (void *)(i + 3)) == 0);
	for (unsigned i = 0; i < 20; i++)
		fork_and_check();   /* main thread, others churning */
	CHECK(pthread_create(&f, NULL, fork_from_thread, NULL) == 0);
	pthread_join(f, NULL);   /* another thread */
	atomic_store(&churn_stop, true);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	print_fork_stats();
}

/* ---- row 42: 1000 threads fork ------------------------------------------------ */

static pthread_barrier_t many_bar;

static void *many_forker(void *arg)
{
	void *p = malloc(100 + (uintptr_t)arg);
	CHECK(p != NULL);
	pthread_barrier_wait(&many_bar);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		free(p);
		child_light();
		_exit(17);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 17, "child status 0x%x", st);
	free(p);
	return NULL;
}

static void test_many(void)
{
	enum { N = 1000 };
	static pthread_t t[N];
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, 64 * 1024);
	CHECK(pthread_barrier_init(&many_bar, NULL, N) == 0);
	double t0 = check_now();
	for (uintptr_t i = 0; i < N; i++)
		CHECK(pthread_create(&t[i], &at, many_forker, (void *)i) == 0);
	for (unsigned i = 0; i < N; i++)
		pthread_join(t[i], NULL);
	printf("    %d threads forked at once: %.2f s\n", N, check_now() - t0);
	print_fork_stats();
}

int main(int argc, char **argv)
{
	mode = argc > 1 ? argv[1] : "";
	static char name[64];
	snprintf(name, sizeof name, "test_fork_malloc %s%s", mode, USLAB_LINKED ? "" : " (LD_PRELOAD)");
	check_init(name);
	require_uslab();
	if (!strcmp(mode, "stdio")) {
		watchdog(50);   /* 3 s, up to CHECK_HANG_S more, and the joins */
		RUN(test_stdio);
	} else if (!strcmp(mode, "signal")) {
		watchdog(full_run() ? 900 : 100);
		RUN(test_signal_threads);
	} else if (!strcmp(mode, "signal-lone")) {
		watchdog(full_run() ? 900 : 100);
		RUN(test_signal_lone);
	} else if (!strcmp(mode, "child")) {
		watchdog(100);
		RUN(test_child);
	} else if (!strcmp(mode, "many")) {
		watchdog(100);
		RUN(test_many);
	} else {
		fprintf(stderr, "usage: %s stdio|signal|signal-lone|child|many\n", argv[0]);
		return 2;
	}
	return 0;
}
