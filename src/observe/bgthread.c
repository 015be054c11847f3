/*
 * The uslab thread: with background_thread (USLAB_OPTIONS, or
 * uslab_background_thread(1)) it gives memory back to the OS while the
 * process is idle; with export it answers uslabinfo at once. One thread
 * does both: with export alone it only serves (named "uslab-export", no
 * decay pass ever), with background_thread it also runs decay passes
 * (named "uslab-bg"). background_thread=0, or uslab_background_thread(0),
 * means no thread at all: the export is then served on allocation slow
 * paths only (export.c says why export starts a thread).
 *
 * The loop. When decaying: run a decay pass (decay.c's mem_decay_pass():
 * idle threads' spare sheaves, barns, empty slabs, decayed pages and huge
 * mappings) when its deadline has come. Always: serve an export request if
 * a reader posted one (export.c: refresh the snapshot, apply a command),
 * then sleep on a futex until the next deadline. The pass returns how long
 * until the next one (the caches' next pass or the next page deadline
 * while anything is pending, at least 10 ms: decay.c),
 * or UINT64_MAX when nothing is: then the thread sleeps with no deadline
 * but the once-a-second look at whether it is the last thread (see exit
 * below) and sets mem_bg_sleeping, so that page_free() (mem_dirty_notify) wakes it
 * when new dirty memory appears. Serving only, it always sleeps with no
 * deadline and never sets mem_bg_sleeping (frees never wake it). Passes run
 * on their deadlines only: a reader's wake serves the reader and sleeps
 * again, so uslabinfo --watch does not make take-back more eager.
 *
 * States (bg.state, with bg.decay) and who moves them:
 *
 *   from      to        by                                   how
 *   OFF       RUNNING   start_locked (API 1, deferred start)  bg.lock held; decay set first
 *   RUNNING   RUNNING   start_locked with decay (API 1)       decay 0 -> 1, then a kick
 *   RUNNING   STOPPING  stop() (API 0, exit destructor)       CAS, then a kick
 *   STOPPING  OFF       the thread, last thing it does        store, FUTEX_WAKE on state
 *   RUNNING   OFF       the thread, once it is the last one   the same (bg_alone; see exit)
 *   any       OFF       fork child handler                    the child has no thread;
 *                                                              pending set if it ran
 *
 * bg.pending (PENDING_* bits) holds a start until a safe point; the export
 * header's `bg` (EXPORT_BG_*) and export.c's export_served are written by
 * the thread only: set when it first sees the export's word, changed with
 * its role, cleared when it stops or the export goes away.
 *
 * The futex word. With the export on, the thread sleeps on `wake` in the
 * export file's shared mapping (a shared futex: the file's inode and
 * offset are the key), and a reader adds 1 to it and calls FUTEX_WAKE
 * after posting its request, so the answer comes within a millisecond or
 * two. Without the export (or before a forked child's file exists), on a
 * private word here. Every waker changes the word before FUTEX_WAKE:
 *
 *   waker                       changes first                 then
 *   reader (uslabinfo)          req, then wake += 1           FUTEX_WAKE(wake)
 *   page_free (dirty notify)    dirty_kick, word += 1         FUTEX_WAKE
 *   stop()                      state = STOPPING, word += 1   FUTEX_WAKE
 *   start_locked (role change)  decay = 1, word += 1          FUTEX_WAKE
 *   export started (bg_wake)    export.c's req_word, word+1   FUTEX_WAKE
 *
 * and the thread stores the word it will sleep on (bg.sleep_word), loads
 * the word's value, and only then checks the state, its role, the export's
 * word and pending requests, all seq_cst: so no wake-up is lost: if a check
 * missed the change, the waker's add came after the load, and FUTEX_WAIT
 * returns at once (a waker that loaded the old sleep_word changed a word
 * the thread no longer sleeps on, but then its change came before the
 * thread's checks, which see it). For the no-deadline sleep the dirty check
 * is page_decay() under the page lock after mem_bg_sleeping is set, and
 * page_free() inserts under that lock before it looks at mem_bg_sleeping:
 * one of the two sees the other.
 *
 * When it starts. Never inside init (init_once_fn may run inside the first
 * malloc, and pthread_create allocates: with the malloc family that would
 * wait for init from inside init) and never before libc is initialised (the
 * dynamic linker calls malloc before that). bg_init() only marks a start
 * pending; it happens at the first safe point after our constructors ran:
 * this file's constructor (before main when the library is preloaded or
 * linked, at dlopen when dlopen'ed), or the first allocation slow path
 * after init (export.c's slow-path hook, set only while a start is
 * pending), or uslab_background_thread(1). It is created detached, with
 * every signal blocked (no program signal is ever delivered to it).
 *
 * fork. The child has no thread; a child handler here resets the state.
 * If the parent's thread was running, the child restarts it lazily, in the
 * same role, on its first allocation slow path (never in the atfork
 * handler, where creating a thread is not allowed, and never in a child
 * that only execs: no slow path before exec, no thread). The same slow path
 * makes the child's export file (export.c), and bg_wake() has the thread
 * attach to it. uslab_background_thread() works in the child.
 *
 * exit. The thread is detached and holds no lock while it sleeps; exit()
 * from any thread never waits for it: a destructor here asks it to stop and
 * waits at most BG_EXIT_WAIT_MS for it to finish a pass or a snapshot in
 * flight (so that the final export snapshot and show_stats see a quiet
 * heap), then returns either way; _exit takes the thread down wherever it
 * is. A process ends when its last thread does, and the program's threads
 * may all end without exit() (the main thread calls pthread_exit() first):
 * so the thread wakes at least every BG_ALONE_MS and, once it is the only
 * live thread (bg_alone), leaves its loop and returns; glibc then ends the
 * process as for any last thread, with exit(0). Without that such a
 * process never ended (test_bgthread's test_last_thread).
 *
 * dlopen/dlclose. libuslab.so and libuslab-malloc.so are linked with
 * -z nodelete (CMakeLists.txt): dlclose never unmaps them, so the thread
 * (and every thread's key destructor, tls.c) never runs unmapped code.
 * The thread goes on after dlclose; uslab_background_thread(0) before
 * dlclose stops it.
 *
 * On by default? For the malloc family, once the program has threads of
 * its own (BG_MALLOC_DEFAULT below; README's "Memory return" says why):
 * with the option not given, decay passes start at the first safe point
 * after the program started a thread (program_threaded()) where the
 * process's malloc is this library's (the malloc family preloaded or
 * linked, checked with dladdr). A single-threaded program gets no thread
 * (it stays single-threaded to glibc); libuslab.so alone never starts one
 * unasked. A forked child of a default start waits for its own first
 * thread (bg.by_default). A pass's hold of cache_mutex never makes a fork
 * wait or leaves the child a held lock: core/fork.c, "Decay passes".
 *
 * Locks: bg.lock serializes uslab_background_thread() calls (and the
 * deferred start, by trylock); the thread never takes it. The thread takes
 * cache_mutex and the locks under it in passes and export service only,
 * never across a sleep.
 */
#define _GNU_SOURCE 1
#include "cpu.h"
#include "bgthread.h"
#include "export.h"   /* EXPORT_BG_* */

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The malloc family's default when USLAB_OPTIONS does not say: 1, decay
 * passes once the program has threads of its own (measured: README,
 * "Memory return"). */
#ifndef BG_MALLOC_DEFAULT
#define BG_MALLOC_DEFAULT 1
#endif

/* Has the program never started a thread? (glibc's own flag, which it
 * clears for good at the first pthread_create.) Without it: never. */
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 32)
#include <sys/single_threaded.h>
#define lone_process() (__libc_single_threaded != 0)
#else
#define lone_process() false
#endif

#define BG_EXIT_WAIT_MS 100   /* exit waits at most this long for a pass in flight */
#define BG_RETRY_MS     1     /* a request another thread was serving: look again */
#define BG_ALONE_MS     1000  /* how often the thread looks whether it is the last one */
#define BG_TASKS_MS     100   /* how often a slow path counts threads (program_threaded) */
#ifdef USLAB_SANITIZER
#define BG_STACK 0            /* the default: sanitizers need more stack */
#else
#define BG_STACK (256 * 1024)
#endif

int bg_option = -1;

enum { BG_OFF = 0, BG_RUNNING = 1, BG_STOPPING = 2 };
/* A start waiting for a safe point: what the thread should do. */
enum {
	PENDING_DECAY = 1,            /* decay passes (background_thread) */
	PENDING_DECAY_IF_MALLOC = 2,  /* decay passes if malloc is ours, once the program has
				       * threads (BG_MALLOC_DEFAULT) */
	PENDING_SERVE = 4,            /* serve the export */
};

/* Every atomic here is accessed seq_cst unless marked: the wake-up
 * argument at the top needs one order over the words, the flags and the
 * futex words (the counters for tests are relaxed: nothing is ordered by
 * them). */
static struct {
	pthread_mutex_t lock;             /* uslab_background_thread() calls (see the top) */
	_Atomic uint32_t state;           /* BG_*: a futex word stop() waits on */
	_Atomic bool decay;               /* the running thread runs decay passes (set before
					   * RUNNING or before a kick; cleared only with no thread) */
	_Atomic bool by_default;          /* its decay passes are the default's (no option) */
	_Atomic bool made_threaded;       /* the thread was made while the program had none */
	_Atomic uint64_t tasks_due;       /* program_threaded(): when to count again (relaxed: only a
					   * rate limit; a race costs one more stat) */
	_Atomic int pending;              /* PENDING_* bits: a start waits for a safe point */
	_Atomic bool ctor_ran;            /* our constructor ran: libc is up */
	_Atomic bool exiting;             /* exit began: never start again */
	_Atomic bool dirty_kick;          /* mem_dirty_notify woke the thread: run a pass */
	_Atomic uint32_t word;            /* the private futex word (no export) */
	_Atomic(_Atomic uint32_t *) sleep_word; /* the word the thread sleeps on: &word or the export's */
	_Atomic uint64_t passes, serves, wakeups, starts;   /* for tests (bg_get_stats) */
} bg = { .lock = PTHREAD_MUTEX_INITIALIZER, .sleep_word = &bg.word };

/* ---- futexes ------------------------------------------------------------------ */

/* Our own words are private futexes; the export's word is shared (other
 * processes wake it). */
static int futex_flags(_Atomic uint32_t *w)
{
	return w == &bg.word || w == &bg.state ? FUTEX_PRIVATE_FLAG : 0;
}

/* Sleep while *w == v, at most ms (UINT64_MAX: no limit). */
static void futex_sleep(_Atomic uint32_t *w, uint32_t v, uint64_t ms)
{
	struct timespec ts, *tp = NULL;
	if (ms != UINT64_MAX) {
		ts.tv_sec = (time_t)(ms / 1000);
		ts.tv_nsec = (long)(ms % 1000) * 1000000L;
		tp = &ts;
	}
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT | futex_flags(w), v, tp, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *w, int n)
{
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE | futex_flags(w), n, NULL, NULL, 0);
}

/* Wake the thread wherever it sleeps. Keeps errno (free paths call it). */
static void kick(void)
{
	int e = errno;
	_Atomic uint32_t *w = atomic_load(&bg.sleep_word);
	atomic_fetch_add(w, 1);
	futex_wake(w, 1);
	errno = e;
}

/* mem_bg_wake: new dirty memory while the thread sleeps with no deadline. */
static void dirty_wake(void)
{
	atomic_store(&bg.dirty_kick, true);
	kick();
}

void bg_wake(void)
{
	if (atomic_load(&bg.state) == BG_RUNNING)
		kick();
}

/* ---- the thread ------------------------------------------------------------------ */

/* Links of /proc/self/task: the process's threads plus two ("." and
 * ".."); 0 without /proc. */
static unsigned long task_links(void)
{
	struct stat st;
	return stat("/proc/self/task", &st) ? 0 : (unsigned long)st.st_nlink;
}

/* Is the thread the last live one of the process? A process ends when its
 * last thread does (the main thread may pthread_exit() first, then the
 * program's other threads end): a thread of ours must not keep it alive.
 * /proc/self/task has a link per thread plus two, and the main thread
 * stays listed as a zombie once it has exited, which the process's state
 * in /proc/self/stat shows ('Z'). Without /proc it cannot tell and answers
 * no. Allocates nothing. */
static bool bg_alone(void)
{
	if (task_links() != 4)
		return false;   /* more threads than us and the main one (or no /proc) */
	char buf[256];
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = 0;
	const char *r = strrchr(buf, ')');   /* "pid (comm) S ...": comm may hold anything */
	return r && r[1] == ' ' && r[2] == 'Z';
}

static void set_name(bool decay)
{
	prctl(PR_SET_NAME, decay ? "uslab-bg" : "uslab-export", 0, 0, 0);
}

static void *bg_main(void *arg)
{
	(void)arg;
	bool decaying = atomic_load(&bg.decay);
	set_name(decaying);
	uint64_t next_pass = decaying ? 0 : UINT64_MAX;   /* os_real_ms() of the next pass; UINT64_MAX: none due */
	_Atomic uint32_t *attached = NULL;/* the export word we told readers we serve */
	uint32_t attached_bits = 0;       /* and what we told them (EXPORT_BG_*) */
	uint64_t alone_check = os_real_ms() + BG_ALONE_MS;
	while (atomic_load(&bg.state) == BG_RUNNING) {
		if (os_real_ms() >= alone_check) {
			if (bg_alone())
				break;   /* the program is gone: let the process end (bg_alone) */
			alone_check = os_real_ms() + BG_ALONE_MS;
		}
		if (atomic_load(&bg.decay) != decaying) {   /* serve only -> decay too (start_locked) */
			decaying = !decaying;
			set_name(decaying);
			next_pass = decaying ? 0 : UINT64_MAX;
		}
		uint64_t now = os_real_ms();
		if (decaying && (now >= next_pass || atomic_exchange(&bg.dirty_kick, false))) {
			uint64_t d = mem_decay_pass();
			atomic_fetch_add_explicit(&bg.passes, 1, memory_order_relaxed);
			now = os_real_ms();
			next_pass = d == UINT64_MAX ? UINT64_MAX : now + d;
		}
		int served = export_bg_serve();
		bool again = served == EXPORT_BG_AGAIN;
		if (served == EXPORT_BG_SERVED)
			atomic_fetch_add_explicit(&bg.serves, 1, memory_order_relaxed);
		_Atomic uint32_t *xw = export_bg_word();
		uint32_t bits = xw ? EXPORT_BG_SERVE | (decaying ? EXPORT_BG_DECAY : 0) : 0;
		if (xw != attached || bits != attached_bits) {
			if (attached && attached != xw)
				export_bg_attach(attached, 0);
			if (xw)
				export_bg_attach(xw, bits);
			attached = xw;
			attached_bits = bits;
		}
		_Atomic uint32_t *w = xw ? xw : &bg.word;
		atomic_store(&bg.sleep_word, w);
		/* the word first, then the checks: see the top */
		uint32_t v = atomic_load(w);
		if (atomic_load(&bg.state) != BG_RUNNING)
			break;
		if (atomic_load(&bg.decay) != decaying || export_bg_word() != xw)
			continue;
		if (!again && export_bg_pending())
			continue;
		uint64_t until = again ? now + BG_RETRY_MS : next_pass;
		uint64_t nap = alone_check > now ? alone_check - now : 0;   /* no sleep outlives the check */
		if (until == UINT64_MAX && decaying) {
			atomic_store(&mem_bg_sleeping, true);
			if (page_decay()) {   /* dirtied between the pass and now */
				atomic_store(&mem_bg_sleeping, false);
				next_pass = 0;
				continue;
			}
			futex_sleep(w, v, nap);
			atomic_store(&mem_bg_sleeping, false);
		} else if (until == UINT64_MAX) {
			futex_sleep(w, v, nap);   /* serving only: until a reader (or stop) wakes us */
		} else if (until > now) {
			futex_sleep(w, v, until - now < nap ? until - now : nap);
		}
		atomic_fetch_add_explicit(&bg.wakeups, 1, memory_order_relaxed);
	}
	if (attached)
		export_bg_attach(attached, 0);
	atomic_store(&mem_bg_sleeping, false);
	atomic_store(&bg.sleep_word, &bg.word);
	atomic_store(&bg.state, BG_OFF);
	futex_wake(&bg.state, INT_MAX);
	return NULL;
}

/* ---- starting and stopping ---------------------------------------------------------- */

/* Start the thread (bg.lock held), running decay passes if `decay`; a
 * running thread that only serves starts them. 0, or -1 with errno. */
static int start_locked(bool decay)
{
	uint32_t st = atomic_load(&bg.state);
	if (st == BG_RUNNING) {
		if (decay && !atomic_exchange(&bg.decay, true))
			kick();   /* the thread sees the role change (see the top) */
		return 0;
	}
	if (st != BG_OFF || atomic_load(&bg.exiting)) {   /* stopping at exit */
		errno = EAGAIN;
		return -1;
	}
	atomic_store(&bg.decay, decay);
	atomic_store(&bg.made_threaded, lone_process());
	atomic_store(&bg.state, BG_RUNNING);
	pthread_attr_t a;
	sigset_t all, old;
	pthread_t t;
	int e = pthread_attr_init(&a);
	if (!e) {
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		if (BG_STACK)
			pthread_attr_setstacksize(&a, BG_STACK);
		/* every signal blocked in the new thread: the program's signals
		 * go to its own threads */
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		e = pthread_create(&t, &a, bg_main, NULL);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		pthread_attr_destroy(&a);
	}
	if (e) {
		atomic_store(&bg.state, BG_OFF);
		atomic_store(&bg.decay, false);
		errno = e;
		return -1;
	}
	atomic_fetch_add_explicit(&bg.starts, 1, memory_order_relaxed);
	return 0;
}

/* Ask the thread to stop and wait until it has (ms: at most that long,
 * UINT64_MAX: until it has). */
static void stop(uint64_t ms)
{
	uint32_t st = BG_RUNNING;
	if (atomic_compare_exchange_strong(&bg.state, &st, BG_STOPPING))
		kick();
	else if (st == BG_OFF)
		return;
	uint64_t end = ms == UINT64_MAX ? UINT64_MAX : os_real_ms() + ms;
	while ((st = atomic_load(&bg.state)) == BG_STOPPING) {
		uint64_t now = os_real_ms();
		if (now >= end)
			return;
		futex_sleep(&bg.state, st, end == UINT64_MAX ? UINT64_MAX : end - now);
	}
	/* stopped: the next start chooses the role afresh (a thread still
	 * stopping at an exit's bound keeps its flag: nothing starts again) */
	if (st == BG_OFF)
		atomic_store(&bg.decay, false);
}

/* Is the process's malloc this library's (the malloc family, preloaded or
 * linked)? Only asked when the malloc family's default matters. */
static bool uslab_is_malloc(void)
{
	Dl_info a, b;
	void *(*volatile m)(size_t) = malloc;
	return dladdr((void *)m, &a) && dladdr((void *)&bg_init, &b) && a.dli_fbase == b.dli_fbase;
}

/* Does the program run threads of its own (the default's condition)?
 * glibc's flag says whether any thread was ever made; if the one that made
 * it so is ours (the export's, started while the program had none), the
 * task count says, looked at every BG_TASKS_MS at most (a stat of /proc). */
static bool program_threaded(void)
{
	if (lone_process())
		return false;
	if (!atomic_load(&bg.made_threaded))
		return true;
	uint64_t now = os_now_ms();
	if (now < atomic_load_explicit(&bg.tasks_due, memory_order_relaxed))
		return false;
	atomic_store_explicit(&bg.tasks_due, now + BG_TASKS_MS, memory_order_relaxed);
	return task_links() > 4;   /* main, ours and more */
}

bool bg_start_pending(void)
{
	return atomic_load(&bg.pending) != 0;
}

void bg_start_deferred(void)
{
	if (!atomic_load_explicit(&bg.ctor_ran, memory_order_acquire))
		return;
	int p = atomic_load(&bg.pending);
	if (!p || (p == PENDING_DECAY_IF_MALLOC && !program_threaded()))
		return;   /* (the default waits for the program's first thread) */
	if (pthread_mutex_trylock(&bg.lock))
		return;   /* an API call is under way and settles it */
	p = atomic_exchange(&bg.pending, 0);
	if ((p & PENDING_DECAY_IF_MALLOC) && (p & PENDING_SERVE) && lone_process()) {   /* serving only, for now */
		p &= ~PENDING_DECAY_IF_MALLOC;
		atomic_fetch_or(&bg.pending, PENDING_DECAY_IF_MALLOC);
	}
	if (p) {
		export_hook_update();
		bool by_default = !(p & PENDING_DECAY) && (p & PENDING_DECAY_IF_MALLOC);
		bool decay = (p & PENDING_DECAY) || ((p & PENDING_DECAY_IF_MALLOC) && uslab_is_malloc());
		if (decay)
			atomic_store(&bg.by_default, by_default);
		bool serve = (p & PENDING_SERVE) && export_bg_wanted();
		if ((decay || serve) && start_locked(decay)) {
			if (decay && bg_option == 1)
				report_line("background_thread: cannot start the thread (errno %d); memory goes back "
					    "on frees, uslab_cache_shrink and malloc_trim only", errno);
			else if (serve)
				report_line("export: cannot start the thread that serves uslabinfo (errno %d); "
					    "requests are served on allocation slow paths only", errno);
		}
	}
	pthread_mutex_unlock(&bg.lock);
}

/* fork: the child has no thread. Restart it, in the same role, at the
 * child's first slow path if the parent's was running (see the top). The
 * export's child handler ran before this one (registered first, in
 * init_once_fn) and made export_bg_wanted() the child's. */
static void bg_atfork_child(void)
{
	uint32_t st = atomic_load(&bg.state);
	bool decay = atomic_load(&bg.decay), by_default = atomic_load(&bg.by_default);
	pthread_mutex_init(&bg.lock, NULL);
	atomic_store(&bg.state, BG_OFF);
	atomic_store(&bg.decay, false);
	atomic_store(&bg.sleep_word, &bg.word);
	atomic_store(&bg.dirty_kick, false);
	atomic_store(&bg.made_threaded, false);
	atomic_store(&mem_bg_sleeping, false);
	atomic_store(&bg.starts, 0);
	/* the default's passes wait for the child's own first thread */
	int again = !decay ? 0 : by_default ? PENDING_DECAY_IF_MALLOC : PENDING_DECAY;
	if (st == BG_RUNNING && !atomic_load(&bg.exiting))
		atomic_store(&bg.pending, again | (export_bg_wanted() ? PENDING_SERVE : 0));
	export_hook_update();
}

void bg_init(void)
{
	pthread_atfork(NULL, NULL, bg_atfork_child);
	atomic_store_explicit(&mem_bg_wake, dirty_wake, memory_order_release);
	int want = bg_option == 1 ? PENDING_DECAY : bg_option < 0 && BG_MALLOC_DEFAULT ? PENDING_DECAY_IF_MALLOC : 0;
	if (bg_option != 0 && export_bg_wanted())
		want |= PENDING_SERVE;   /* export.c: why export starts the thread */
	if (want) {
		atomic_store(&bg.pending, want);
		export_hook_update();
	}
}

__attribute__((constructor)) static void bg_ctor(void)
{
	atomic_store_explicit(&bg.ctor_ran, true, memory_order_release);
	bg_start_deferred();   /* the option asked for it and init already ran */
}

__attribute__((destructor)) static void bg_at_exit(void)
{
	atomic_store(&bg.exiting, true);
	if (atomic_exchange(&bg.pending, 0))
		export_hook_update();
	stop(BG_EXIT_WAIT_MS);
}

int uslab_background_thread(int enable)
{
	if (enable != 0 && enable != 1) {
		errno = EINVAL;
		return -1;
	}
	cache_init();
	pthread_mutex_lock(&bg.lock);
	atomic_store(&bg.pending, 0);   /* this call settles it */
	int r = 0;
	atomic_store(&bg.by_default, false);   /* asked for: a fork child restarts it as asked */
	if (enable)
		r = start_locked(true);
	else
		stop(UINT64_MAX);
	int e = errno;
	export_hook_update();
	pthread_mutex_unlock(&bg.lock);
	errno = e;
	return r;
}

/* ---- for the tests ------------------------------------------------------------------- */

void bg_get_stats(struct bg_stats *st)
{
	st->running = atomic_load(&bg.state) == BG_RUNNING;
	st->decay = st->running && atomic_load(&bg.decay);
	st->pending = bg_start_pending();
	st->starts = atomic_load(&bg.starts);
	st->passes = atomic_load(&bg.passes);
	st->serves = atomic_load(&bg.serves);
	st->wakeups = atomic_load(&bg.wakeups);
	st->malloc_ours = uslab_is_malloc();
}
