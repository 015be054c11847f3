/*
 * The per-CPU backend (issue 26: src/cpu/pcpu.c, rseq_x86_64.h): parts of
 * CPUs on restartable sequences, and the thread-local fallback, which runs
 * the same test (TSan builds, cpu_backend=tls, GLIBC_TUNABLES=
 * glibc.pthread.rseq=0): every check below holds for both, except where a
 * bound is the per-CPU backend's own.
 *
 *   preempt_storm     more threads than CPUs, sched_yield storms, threads
 *                     that move themselves between CPUs in a loop, frees of
 *                     each other's objects, single and bulk calls (whose
 *                     sequences copy many objects before their commit):
 *                     no object handed out twice
 *                     (each carries its holder's token, checked before its
 *                     free), none lost (active 0, validate, shrink to 0)
 *   busy_cpus         shrink, malloc_trim, sheaf_capacity and cpu_mode
 *                     changes, and a cache made on every CPU and destroyed,
 *                     from another thread while every CPU runs the workers
 *   signals           a handler that allocates and frees from the part the
 *                     interrupted thread is in a sequence on (per-CPU
 *                     backend only: on threads' parts that is malloc in a
 *                     handler, undefined)
 *   fork_busy         fork while the workers run: the child's heap is whole
 *   thread_bound      512 threads that each used 12 caches, then wait: the
 *                     parts are the CPUs', at most CPUs x 2 sheaves each
 *   backend_options   cpu_backend=tls and the rseq tunable off give "thread"
 *   per_cpu_stats     uslab_cache_cpu_stats() sums to the cache's counters
 *   kmalloc_every_cpu malloc's smallest class (whose part the first
 *                     allocation makes, before the classes are published)
 *                     takes its fast path on every CPU, that one included
 *   unregistered      a thread that unregisters glibc's rseq area (its
 *                     cpu_id reads -1: the sequences index an empty area
 *                     below CPU 0's, unchecked) allocates and frees by
 *                     malloc and a cache, its objects and others' threads'
 *                     alike, on the thread-local path
 *
 * Runs with kfence=0: a KFENCE sample's slow path inside the signal
 * handler could wait for the part lock the interrupted frame holds (malloc
 * is not async-signal-safe; the handler here only uses the fast paths).
 */
#include "check.h"

#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "uslab.h"

#define SHEAVES_CAP 32

static unsigned ncpus;
static bool per_cpu;   /* the backend runs parts of CPUs */

static struct uslab_cache *mk(const char *name, size_t size)
{
	struct uslab_cache *c = uslab_cache_create(name, size, 0, USLAB_NO_MERGE, NULL);
	CHECK(c != NULL);
	/* sheaves mode whatever the variant's default: the mode that runs per CPU */
	CHECK(uslab_cache_tune_set(c, "cpu_mode", USLAB_CPU_SHEAVES) == 0);
	CHECK(uslab_cache_tune_set(c, "sheaf_capacity", SHEAVES_CAP) == 0);
	return c;
}

/* ---- objects that know their holder ----------------------------------------------------- */

struct obj {
	_Atomic uint64_t token;   /* holder id << 32 | serial */
	uint64_t pad[3];
};

static void take(struct obj *o, uint64_t token)
{
	uint64_t old = atomic_exchange(&o->token, token);
	(void)old;
}

static void check_held(struct obj *o, uint64_t token, const char *where)
{
	uint64_t t = atomic_load(&o->token);
	CHECKF(t == token, "%s: object %p carries %#llx, its holder wrote %#llx: handed out twice", where, (void *)o,
	       (unsigned long long)t, (unsigned long long)token);
}

/* ---- preemption, yields, migrations, cross-thread frees ---------------------------------- */

#define SLOTS 4096
static struct uslab_cache *storm_cache;
static _Atomic(struct obj *) xfer[SLOTS];   /* objects passed between threads */
static _Atomic bool workers_stop;
static _Atomic uint64_t ops_done;

/* Run this thread on `cpu` alone; false if it may not (offline, or not in
 * the process's affinity). */
static bool pin_to(unsigned cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof set, &set) == 0;
}

static void move_self(uint64_t *r)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	if (rnd_next(r) % 4 == 0) {   /* sometimes every CPU */
		for (unsigned i = 0; i < ncpus; i++)
			CPU_SET(i, &set);
	} else {
		CPU_SET(rnd_next(r) % ncpus, &set);
	}
	sched_setaffinity(0, sizeof set, &set);   /* (a CPU gone offline refuses: fine) */
}

static void *storm_worker(void *arg)
{
	uint64_t id = (uintptr_t)arg, r = 0x9e3779b97f4a7c15ULL ^ id, serial = 0;
	struct obj *held[64], *batch[64];
	uint64_t tok[64];
	unsigned long rounds = SCALE(150000, 8000);
	for (unsigned long k = 0; k < rounds && !atomic_load_explicit(&workers_stop, memory_order_relaxed); k++) {
		unsigned n = 1 + (unsigned)(rnd_next(&r) % 64), nb = 0;
		/* a quarter of the rounds through the bulk calls (their
		 * sequences move many objects in one commit) */
		bool bulk = rnd_next(&r) % 4 == 0;
		if (bulk)
			CHECK_EQ(uslab_cache_alloc_bulk(storm_cache, n, (void **)held), n);
		for (unsigned i = 0; i < n; i++) {
			if (!bulk)
				held[i] = uslab_cache_alloc(storm_cache);
			CHECK(held[i] != NULL);
			tok[i] = id << 32 | ++serial;
			take(held[i], tok[i]);
		}
		/* a yield every 32 rounds: on a loaded machine (the suite's
		 * other tests) each gives a whole time slice away, and one in
		 * 8 made the storm 3x longer. A yield is a system call between
		 * sequences, never inside one: what restarts sequences is the
		 * tick's preemption, migration (move_self) and signals */
		if (rnd_next(&r) % 32 == 0)
			sched_yield();
		if (rnd_next(&r) % 64 == 0)
			move_self(&r);
		/* free in a random order, some through another thread */
		for (unsigned i = n; i-- > 0;) {
			unsigned j = (unsigned)(rnd_next(&r) % (i + 1));
			struct obj *o = held[j];
			uint64_t t = tok[j];
			held[j] = held[i];
			tok[j] = tok[i];
			check_held(o, t, "before free");
			if (rnd_next(&r) % 4 == 0) {   /* into a slot; what was there is ours to free */
				struct obj *p = atomic_exchange(&xfer[rnd_next(&r) % SLOTS], o);
				if (p)
					uslab_cache_free(storm_cache, p);   /* another thread's object */
				continue;
			}
			if (bulk)
				batch[nb++] = o;
			else
				uslab_cache_free(storm_cache, o);
		}
		uslab_cache_free_bulk(storm_cache, nb, (void **)batch);
		atomic_fetch_add_explicit(&ops_done, n, memory_order_relaxed);
	}
	return NULL;
}

static void drain_xfer(void)
{
	for (unsigned s = 0; s < SLOTS; s++) {
		struct obj *p = atomic_exchange(&xfer[s], NULL);
		if (p)
			uslab_cache_free(storm_cache, p);
	}
}

static void check_quiet(struct uslab_cache *c, const char *what)
{
	struct uslab_cache_info in;
	cache_info(c, &in);
	CHECKF(in.active_objects == 0, "%s: %llu objects active after every free", what,
	       (unsigned long long)in.active_objects);
	CHECKF(ev_allocs(&in) == ev_frees(&in), "%s: %llu allocations, %llu frees", what,
	       (unsigned long long)ev_allocs(&in), (unsigned long long)ev_frees(&in));
	if (per_cpu && in.cpu_mode == USLAB_CPU_SHEAVES)
		CHECKF(in.cpu_parts <= ncpus, "%s: %u parts on %u CPUs", what, in.cpu_parts, ncpus);
	long v = uslab_cache_validate(c);
	CHECKF(v == 0, "%s: validate found %ld problems", what, v);
	CHECKF(uslab_cache_shrink(c) == 0, "%s: shrink left slabs", what);
	cache_info(c, &in);
	CHECKF(in.slabs == 0, "%s: %llu slabs after shrink", what, (unsigned long long)in.slabs);
}

static void run_workers(unsigned nthreads, void *(*side)(void *))
{
	pthread_t t[64], s;
	CHECK(nthreads <= 64);
	atomic_store(&workers_stop, false);
	atomic_store(&ops_done, 0);
	for (uintptr_t i = 0; i < nthreads; i++)
		CHECK(pthread_create(&t[i], NULL, storm_worker, (void *)(i + 1)) == 0);
	if (side)
		CHECK(pthread_create(&s, NULL, side, NULL) == 0);
	for (unsigned i = 0; i < nthreads; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	atomic_store(&workers_stop, true);
	if (side)
		CHECK(pthread_join(s, NULL) == 0);
	drain_xfer();
}

static void preempt_storm(void)
{
	storm_cache = mk("pc-storm", sizeof(struct obj));
	unsigned nthreads = 3 * ncpus < 64 ? 3 * ncpus : 64;
	run_workers(nthreads, NULL);
	printf("    %u threads on %u CPUs, %llu objects, backend %s\n", nthreads, ncpus,
	       (unsigned long long)atomic_load(&ops_done), uslab_cpu_backend());
	check_quiet(storm_cache, "storm");
	uslab_cache_destroy(storm_cache);
}

/* ---- another thread's shrink, trims, tunables and destroys while every CPU is busy ------- */

static _Atomic unsigned long side_rounds;

static void *side_main(void *arg)
{
	(void)arg;
	uint64_t r = 77;
	while (!atomic_load(&workers_stop)) {
		switch (rnd_next(&r) % 6) {
		case 0:
			uslab_cache_shrink(storm_cache);
			break;
		case 1:
			uslab_malloc_trim(0);
			break;
		case 2: {   /* 0 is classic mode: every part of a CPU retires, and comes back */
			static const unsigned caps[] = { 0, 8, SHEAVES_CAP, 64, 127 };
			CHECK(uslab_cache_tune_set(storm_cache, "sheaf_capacity", caps[rnd_next(&r) % 5]) == 0);
			break;
		}
		case 3:
			CHECK(uslab_cache_tune_set(storm_cache, "cpu_mode",
						   rnd_next(&r) % 2 ? USLAB_CPU_SHEAVES : USLAB_CPU_HOME) == 0);
			if (rnd_next(&r) % 2)
				CHECK(uslab_cache_tune_set(storm_cache, "sheaf_capacity", SHEAVES_CAP) == 0);
			break;
		default: {   /* a cache with parts on every CPU, destroyed */
			struct uslab_cache *t = mk("pc-side", 80);
			void *v[256];
			for (unsigned cpu = 0; cpu < ncpus; cpu++) {
				(void)pin_to(cpu);   /* (refused: this CPU's part instead) */
				for (unsigned i = 0; i < 256; i++)
					CHECK((v[i] = uslab_cache_alloc(t)) != NULL);
				for (unsigned i = 0; i < 256; i++)
					uslab_cache_free(t, v[i]);
			}
			cpu_set_t all;
			CPU_ZERO(&all);
			for (unsigned cpu = 0; cpu < ncpus; cpu++)
				CPU_SET(cpu, &all);
			sched_setaffinity(0, sizeof all, &all);
			uslab_cache_destroy(t);
			break;
		}
		}
		atomic_fetch_add(&side_rounds, 1);
	}
	/* leave it in sheaves mode for check_quiet's bound */
	CHECK(uslab_cache_tune_set(storm_cache, "cpu_mode", USLAB_CPU_SHEAVES) == 0);
	CHECK(uslab_cache_tune_set(storm_cache, "sheaf_capacity", SHEAVES_CAP) == 0);
	return NULL;
}

static void busy_cpus(void)
{
	storm_cache = mk("pc-busy", sizeof(struct obj));
	atomic_store(&side_rounds, 0);
	run_workers(2 * ncpus < 64 ? 2 * ncpus : 64, side_main);
	printf("    %lu shrinks, trims, retunes and destroys beside %llu objects\n", atomic_load(&side_rounds),
	       (unsigned long long)atomic_load(&ops_done));
	check_quiet(storm_cache, "busy");
	uslab_cache_destroy(storm_cache);
}

/* ---- signals that allocate inside a sequence's window ----------------------------------------- */

static struct uslab_cache *sig_cache;
static _Atomic unsigned long sig_handled;
static volatile sig_atomic_t sig_bad;

static void on_sig(int sig)
{
	(void)sig;
	int e = errno;
	/* the interrupted thread keeps the part between cap - 2 and cap
	 * objects (below): this pop and push stay on the fast paths */
	struct obj *o = uslab_cache_alloc(sig_cache);
	if (!o) {
		sig_bad = 1;
	} else {
		atomic_store(&o->token, 0x5151);
		if (atomic_load(&o->token) != 0x5151)
			sig_bad = 1;
		uslab_cache_free(sig_cache, o);
	}
	atomic_fetch_add_explicit(&sig_handled, 1, memory_order_relaxed);
	errno = e;
}

static _Atomic bool sig_stop, sig_ready;

static void *sig_target(void *arg)
{
	unsigned cpu = (unsigned)(uintptr_t)arg;
	CHECK(pin_to(cpu));
	/* fill this CPU's part: the first allocation refills main, the free
	 * puts the object back; from then on a pop and a push each */
	struct obj *o = uslab_cache_alloc(sig_cache);
	CHECK(o != NULL);
	uslab_cache_free(sig_cache, o);
	atomic_store(&sig_ready, true);   /* signals only from here: no slow path holds the part */
	uint64_t serial = 0;
	while (!atomic_load_explicit(&sig_stop, memory_order_relaxed)) {
		o = uslab_cache_alloc(sig_cache);
		CHECK(o != NULL);
		uint64_t t = 1ULL << 40 | ++serial;
		atomic_store_explicit(&o->token, t, memory_order_relaxed);
		check_held(o, t, "signal target");
		uslab_cache_free(sig_cache, o);
	}
	return NULL;
}

static void signals(void)
{
	if (!per_cpu) {
		/* Parts of threads are the thread's own, unguarded: a handler that
		 * allocates on the thread it interrupted is malloc in a handler,
		 * undefined (a lost count, an object handed out twice). A restartable
		 * sequence is what makes it safe on the per-CPU backend. */
		printf("    skipped: parts are threads' (backend %s)\n", uslab_cpu_backend());
		return;
	}
	sig_cache = mk("pc-sig", sizeof(struct obj));
	struct sigaction sa = { .sa_handler = on_sig };
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
	atomic_store(&sig_stop, false);
	atomic_store(&sig_ready, false);
	atomic_store(&sig_handled, 0);
	pthread_t t;
	CHECK(pthread_create(&t, NULL, sig_target, (void *)(uintptr_t)(ncpus - 1)) == 0);
	while (!atomic_load(&sig_ready))
		sched_yield();
	unsigned long sent = SCALE(200000UL, 20000UL);
	for (unsigned long i = 0; i < sent; i++) {
		CHECK(pthread_kill(t, SIGUSR1) == 0);
		if (i % 64 == 0)
			sched_yield();
	}
	/* every signal is handled before the stop flag is seen: they are
	 * pending on the target, which runs them at its next return */
	atomic_store(&sig_stop, true);
	CHECK(pthread_join(t, NULL) == 0);
	signal(SIGUSR1, SIG_DFL);
	CHECK(!sig_bad);
	printf("    %lu signals sent, %lu handled (coalesced while pending)\n", sent, atomic_load(&sig_handled));
	CHECK(atomic_load(&sig_handled) > 0);
	check_quiet(sig_cache, "signals");
	uslab_cache_destroy(sig_cache);
}

/* ---- fork while the workers run ------------------------------------------------------------ */

static void *fork_side(void *arg)
{
	(void)arg;
	unsigned forks = 0;
	while (!atomic_load(&workers_stop) && forks < SCALE(40U, 8U)) {
		fflush(NULL);
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0) {
			/* one thread here; the parent's were inside sequences or not */
			struct obj *v[512];
			for (int round = 0; round < 4; round++) {
				for (int i = 0; i < 512; i++)
					if (!(v[i] = uslab_cache_alloc(storm_cache)))
						_exit(3);
				for (int i = 0; i < 512; i++)
					uslab_cache_free(storm_cache, v[i]);
				void *m = uslab_malloc(100 + (size_t)round * 300);
				if (!m)
					_exit(4);
				uslab_free(m);
			}
			_exit(uslab_cache_validate(storm_cache) == 0 ? 0 : 5);
		}
		int st;
		CHECK(waitpid(pid, &st, 0) == pid);
		CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fork child: status %#x", st);
		forks++;
	}
	printf("    %u forks beside the workers\n", forks);
	return NULL;
}

static void fork_busy(void)
{
	storm_cache = mk("pc-fork", sizeof(struct obj));
	run_workers(2 * ncpus < 64 ? 2 * ncpus : 64, fork_side);
	check_quiet(storm_cache, "fork");
	uslab_cache_destroy(storm_cache);
}

/* ---- 512 threads: memory grows with CPUs, not threads ------------------------------------- */

#define BOUND_THREADS SCALE(512, 64)
#define BOUND_CACHES 12
static struct uslab_cache *bound_c[BOUND_CACHES];
static pthread_barrier_t bound_bar;

static void *bound_worker(void *arg)
{
	uint64_t r = (uintptr_t)arg;
	void *v[256];
	for (unsigned k = 0; k < BOUND_CACHES; k++) {
		for (int round = 0; round < 4; round++) {
			for (unsigned i = 0; i < 256; i++)
				CHECK((v[i] = uslab_cache_alloc(bound_c[k])) != NULL);
			for (unsigned i = 256; i-- > 0;) {
				unsigned j = (unsigned)(rnd_next(&r) % (i + 1));
				void *x = v[j];
				v[j] = v[i];
				uslab_cache_free(bound_c[k], x);
			}
		}
	}
	pthread_barrier_wait(&bound_bar);   /* 1: everyone waits, holding nothing of its own */
	pthread_barrier_wait(&bound_bar);   /* 2: measured */
	return NULL;
}

static void thread_bound(void)
{
	for (unsigned k = 0; k < BOUND_CACHES; k++) {
		char name[32];
		snprintf(name, sizeof name, "pc-bound-%u", k);
		bound_c[k] = mk(name, 16U << (k % 8));
	}
	unsigned nt = BOUND_THREADS;
	pthread_t *t = calloc(nt, sizeof *t);
	CHECK(t != NULL);
	CHECK(pthread_barrier_init(&bound_bar, NULL, nt + 1) == 0);
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, 64 * 1024);
	for (uintptr_t i = 0; i < nt; i++)
		CHECK(pthread_create(&t[i], &at, bound_worker, (void *)(i + 1)) == 0);
	pthread_barrier_wait(&bound_bar);
	uint64_t held = 0;
	unsigned parts = 0;
	for (unsigned k = 0; k < BOUND_CACHES; k++) {
		struct uslab_cache_info in;
		cache_info(bound_c[k], &in);
		held += in.sheaf_objects;
		parts += in.cpu_parts;
		if (cache_per_cpu(&in)) {
			/* the README's bound: CPUs x (main + spare) per cache */
			CHECKF(in.cpu_parts <= ncpus, "%s: %u parts for %u CPUs and %u threads", in.name, in.cpu_parts,
			       ncpus, nt);
			CHECKF(in.sheaf_objects <= (uint64_t)in.cpu_parts * 2 * in.sheaf_capacity,
			       "%s: %llu objects in %u parts of capacity %u", in.name, (unsigned long long)in.sheaf_objects,
			       in.cpu_parts, in.sheaf_capacity);
		} else {
			CHECKF(in.cpu_parts == nt, "%s: %u parts for %u threads", in.name, in.cpu_parts, nt);
		}
	}
	printf("    %u threads waiting, %u CPUs: %u parts, %llu objects in them (backend %s)\n", nt, ncpus, parts,
	       (unsigned long long)held, uslab_cpu_backend());
	pthread_barrier_wait(&bound_bar);
	for (unsigned i = 0; i < nt; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	pthread_barrier_destroy(&bound_bar);
	pthread_attr_destroy(&at);
	free(t);
	for (unsigned k = 0; k < BOUND_CACHES; k++) {
		check_quiet(bound_c[k], "bound");
		uslab_cache_destroy(bound_c[k]);
	}
}

/* ---- the backend by option ------------------------------------------------------------------ */

static const char *exe_path;

static void backend_of(const char *options, const char *tunables, char *out, size_t size)
{
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "USLAB_OPTIONS='%s' GLIBC_TUNABLES='%s' '%s' --backend", options, tunables, exe_path);
	FILE *p = popen(cmd, "r");
	CHECK(p != NULL);
	CHECK(fgets(out, (int)size, p) != NULL);
	out[strcspn(out, "\n")] = 0;
	CHECK(pclose(p) == 0);
}

static void backend_options(void)
{
	char b[64], auto_b[64];
	backend_of("", "", auto_b, sizeof auto_b);
	backend_of("cpu_backend=tls", "", b, sizeof b);
	CHECK(!strcmp(b, "thread"));
	backend_of("cpu_backend=rseq hardened", "", b, sizeof b);
	CHECK(!strcmp(b, "thread"));   /* hardened: every operation on the slow paths */
	backend_of("", "glibc.pthread.rseq=0", b, sizeof b);
	CHECK(!strcmp(b, "thread"));   /* no registration: the fallback */
	backend_of("cpu_backend=rseq", "", b, sizeof b);
	CHECK(!strcmp(b, auto_b));     /* what auto picks where it can */
	printf("    auto: %s; tls, hardened, glibc.pthread.rseq=0: thread\n", auto_b);
}

/* ---- per-CPU counters ---------------------------------------------------------------------------- */

static void per_cpu_stats(void)
{
	struct uslab_cache *c = mk("pc-stats", 64);
	void *v[100];
	for (unsigned cpu = 0; cpu < ncpus; cpu++) {
		if (!pin_to(cpu))
			continue;
		for (int r = 0; r < 10; r++) {
			for (int i = 0; i < 100; i++)
				CHECK((v[i] = uslab_cache_alloc(c)) != NULL);
			for (int i = 0; i < 100; i++)
				uslab_cache_free(c, v[i]);
		}
	}
	cpu_set_t all;
	CPU_ZERO(&all);
	for (unsigned cpu = 0; cpu < ncpus; cpu++)
		CPU_SET(cpu, &all);
	sched_setaffinity(0, sizeof all, &all);
	struct uslab_cache_info in;
	cache_info(c, &in);
	uint64_t sum_a = 0, sum_f = 0, held = 0;
	unsigned found = 0;
	for (unsigned cpu = 0; cpu < ncpus; cpu++) {
		uint64_t ev[USLAB_NR_STAT_ITEMS], objs;
		if (uslab_cache_cpu_stats(c, cpu, ev, USLAB_NR_STAT_ITEMS, &objs)) {
			CHECK(errno == ENOENT);
			continue;
		}
		found++;
		sum_a += ev[USLAB_STAT_ALLOC_PCS] + ev[USLAB_STAT_ALLOC_SLOWPATH];
		sum_f += ev[USLAB_STAT_FREE_PCS] + ev[USLAB_STAT_FREE_SLOWPATH];
		held += objs;
		printf("    cpu %u: %llu pops, %llu pushes, %llu slow allocations, %llu objects held\n", cpu,
		       (unsigned long long)ev[USLAB_STAT_ALLOC_PCS], (unsigned long long)ev[USLAB_STAT_FREE_PCS],
		       (unsigned long long)ev[USLAB_STAT_ALLOC_SLOWPATH], (unsigned long long)objs);
	}
	errno = 0;
	CHECK(uslab_cache_cpu_stats(NULL, 0, NULL, 0, NULL) == -1 && errno == EINVAL);
	if (per_cpu) {
		CHECK(found >= 1 && found == in.cpu_parts);
		CHECK_EQ(sum_a, ev_allocs(&in));   /* every allocation was a part's */
		CHECK_EQ(sum_f, ev_frees(&in));
		CHECK_EQ(held, in.sheaf_objects);
	} else {
		CHECK_EQ(found, 0);   /* parts of threads: none is a CPU's */
	}
	check_quiet(c, "stats");
	uslab_cache_destroy(c);
}

/* ---- malloc's classes on every CPU ----------------------------------------------------- */

/* kmalloc-8's ALLOC_SLOWPATH, from the JSON statistics */
static unsigned long k8_slow(void)
{
	const char *c = strstr(check_stats_text(USLAB_STATS_JSON), "\"name\":\"kmalloc-8\"");
	CHECK(c != NULL);
	const char *e = strstr(c, "\"ALLOC_SLOWPATH\":");
	CHECK(e != NULL);
	return strtoul(e + strlen("\"ALLOC_SLOWPATH\":"), NULL, 10);
}

/* The first allocation makes its CPU's part of kmalloc-8 before malloc's
 * classes are known: malloc's slots of that CPU must get the part once they
 * are (they did not, and every 1-8 byte malloc there took the locked slow
 * path: 27% of sh6bench's allocations). 100-object batches come from the
 * sheaves (capacity 60): at most a few slow paths in 100. */
static void kmalloc_every_cpu(void)
{
	void *v[100];
	cpu_set_t all;
	CHECK(sched_getaffinity(0, sizeof all, &all) == 0);
	/* malloc starts here, on the first CPU this test may use (nothing
	 * before called uslab_malloc): the CPU whose part was made early */
	for (unsigned cpu = 0; cpu < CPU_SETSIZE; cpu++)
		if (CPU_ISSET(cpu, &all) && pin_to(cpu))
			break;
	uslab_free(uslab_malloc(8));
	for (unsigned cpu = 0; cpu < ncpus; cpu++) {
		if (!CPU_ISSET(cpu, &all) || !pin_to(cpu))
			continue;
		unsigned long before = k8_slow();
		const unsigned rounds = 100;
		for (unsigned r = 0; r < rounds; r++) {
			for (int i = 0; i < 100; i++)
				CHECK((v[i] = uslab_malloc(1 + (size_t)(i % 8))) != NULL);
			for (int i = 0; i < 100; i++)
				uslab_free(v[i]);
		}
		unsigned long slow = k8_slow() - before;
		printf("  CPU %u: %lu of %u kmalloc-8 allocations on the slow path\n", cpu, slow, rounds * 100);
		if (per_cpu)
			CHECKF(slow <= rounds * 100 / 10, "CPU %u: %lu of %u allocations of 1-8 bytes took the slow path",
			       cpu, slow, rounds * 100);
	}
	CHECK(sched_setaffinity(0, sizeof all, &all) == 0);
}

/* ---- a thread rseq does not know ------------------------------------------------------------ */

extern const ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));
#define RSEQ_FLAG_UNREGISTER 1
#define GLIBC_RSEQ_SIG 0x53053053   /* x86's, as glibc registers it */

static struct uslab_cache *unreg_cache;
static struct obj *unreg_given[64];   /* made by the main thread, freed by the unregistered one */

static void *unreg_main(void *arg)
{
	(void)arg;
	volatile int32_t *cpu_id = NULL;
	if (&__rseq_offset && &__rseq_size && __rseq_size >= 20) {
		char *area = (char *)__builtin_thread_pointer() + __rseq_offset;
		/* glibc 2.35-2.39 register 32 bytes; later ones may register more */
		if (syscall(__NR_rseq, area, 32, RSEQ_FLAG_UNREGISTER, GLIBC_RSEQ_SIG) == 0 ||
		    syscall(__NR_rseq, area, __rseq_size, RSEQ_FLAG_UNREGISTER, GLIBC_RSEQ_SIG) == 0)
			cpu_id = (volatile int32_t *)(area + 4);
	}
	if (!cpu_id)
		return (void *)"rseq not registered, or not by glibc's layout";
	CHECKF(*cpu_id < 0, "cpu_id reads %d after unregistering", *cpu_id);
	for (int i = 0; i < 64; i++) {
		check_held(unreg_given[i], 0x900000000ULL + (uint64_t)i, "unregistered");
		uslab_cache_free(unreg_cache, unreg_given[i]);   /* the main thread's objects */
	}
	void *m[256];
	struct obj *o[256];
	for (unsigned r = 0; r < 200; r++) {
		for (unsigned i = 0; i < 256; i++) {
			CHECK((m[i] = uslab_malloc(16 + (i * 37) % 2000)) != NULL);
			memset(m[i], (int)i, 16);
			CHECK((o[i] = uslab_cache_alloc(unreg_cache)) != NULL);
			take(o[i], 0xa00000000ULL + i);
		}
		for (unsigned i = 0; i < 256; i++) {
			CHECK(((unsigned char *)m[i])[15] == (unsigned char)i);
			check_held(o[i], 0xa00000000ULL + i, "unregistered");
		}
		for (unsigned i = 0; i < 256; i++) {
			uslab_free(m[(i * 7) % 256]);   /* (7 and 256 are coprime: each once) */
			uslab_cache_free(unreg_cache, o[255 - i]);
		}
	}
	uslab_free(NULL);
	uslab_cache_free(unreg_cache, NULL);
	CHECKF(*cpu_id < 0, "cpu_id reads %d at the end", *cpu_id);
	return NULL;
}

static void unregistered(void)
{
	unreg_cache = mk("unreg", sizeof(struct obj));
	for (int i = 0; i < 64; i++) {
		CHECK((unreg_given[i] = uslab_cache_alloc(unreg_cache)) != NULL);
		take(unreg_given[i], 0x900000000ULL + (uint64_t)i);
	}
	pthread_t t;
	void *why;
	CHECK(pthread_create(&t, NULL, unreg_main, NULL) == 0);
	CHECK(pthread_join(t, &why) == 0);
	if (why)
		printf("  skipped: %s\n", (const char *)why);
	/* and the main thread (registered) frees what that thread made since */
	struct obj *o = uslab_cache_alloc(unreg_cache);
	CHECK(o != NULL);
	uslab_cache_free(unreg_cache, o);
	check_quiet(unreg_cache, "unregistered");
	uslab_cache_destroy(unreg_cache);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--backend")) {
		printf("%s\n", uslab_cpu_backend());
		return 0;
	}
	/* slub_debug (the debug variant) too: debug caches have no parts,
	 * per CPU or per thread (test_sheaves checks that they refuse them) */
	static const char *const drop[] = { "kfence", "slub_debug", "slab_debug", NULL };
	check_reexec_options("/proc/self/exe", argv, drop, "kfence=0");
	check_init("test_pcpu");
	exe_path = "/proc/self/exe";
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	CHECK(n > 0);
	self[n] = 0;
	exe_path = self;
	long nc = sysconf(_SC_NPROCESSORS_ONLN);
	ncpus = nc > 0 ? (unsigned)nc : 1;
	per_cpu = !strcmp(uslab_cpu_backend(), "rseq");
	printf("  backend %s, %u CPUs online\n", uslab_cpu_backend(), ncpus);
	RUN(preempt_storm);
	RUN(busy_cpus);
	RUN(signals);
	RUN(fork_busy);
	RUN(thread_bound);
	RUN(backend_options);
	RUN(per_cpu_stats);
	RUN(kmalloc_every_cpu);
	RUN(unregistered);
	return 0;
}
