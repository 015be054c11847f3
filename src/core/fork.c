/*
 * fork() in a threaded program. The child is a copy of the address space
 * with one thread, the one that forked, and every lock in the state it had:
 * a lock another thread held stays held in the child for good. So the
 * prepare handler takes every allocator lock, the child gets the copy of a
 * quiet heap, and the parent and child handlers give the locks back. This
 * file is the only fork handling of the allocator: one prepare, parent and
 * child sequence over every lock.
 *
 * The locks, in the order the handler sweeps them (each says what it
 * protects at the top of the file that owns it):
 *
 *   kmalloc init lock (kmalloc.c)     creating the size classes (core_hooks.fork_lock_first)
 *   cache_mutex (cache.c)             the cache list, ids, CPU-part lists
 *   per cache, cache_locks() below    its node list lock, its barn lock
 *   grow_lock, page lock (page.c)     mapping segments; free page blocks
 *   huge lock (large.c)               the huge-block registry and range cache (core_hooks.fork_lock_last)
 *
 * Order with libc. glibc's fork runs the prepare handlers, then takes the
 * stdio list lock (_IO_list_lock), then the locks of its own malloc. Its
 * malloc comes last because stdio depends on malloc: fflush(NULL) holds
 * the list lock while it waits for each FILE's lock, and getline holds a
 * FILE's lock while it calls malloc. A prepare handler that returned
 * holding an allocator lock would close the cycle: forking thread (our
 * lock) -> list lock -> fflush(NULL) thread -> FILE lock -> getline thread
 * -> our lock. So in a process with threads the handler takes the list
 * lock first (it is recursive; glibc's fork takes it again) and ours after
 * it: stdio list lock -> allocator locks, as glibc's own malloc does. In
 * the parent glibc drops its hold before the parent handlers run, and ours
 * drops the first after our locks; in the child glibc resets the list lock
 * before the child handlers run, so ours leaves it alone.
 *
 * Taking the locks without a cycle. The handler never waits for a lock
 * while it holds another allocator lock: it sweeps them with trylock, and
 * at the first busy one it gives back what it took, waits for that one
 * alone, and sweeps again (keeping it; a lock of a program cache's is not
 * waited for but tried again after a pause, as its memory is pinned only
 * while cache_mutex is held: wait_retry). While it waits it holds only the
 * list lock, which no thread waits for while it holds an allocator lock
 * (uslab calls no stdio: reports use write(2)). So the wait ends as soon as
 * the holder can go on, whatever order other code takes allocator locks
 * in, and it cannot go on only if it waits for this thread: see below. One
 * thread at a time sweeps (the list lock), so forks do not starve each
 * other; a sweep that keeps losing a race waits again, holding nothing.
 * What the handler holds it knows from the mutexes themselves: a lock whose
 * owner is this thread and that is not the frame's (below), among those the
 * sweep has passed; nothing else is recorded, so any number of caches costs
 * no memory.
 *
 * Forking from inside the allocator. A signal handler that forks may have
 * interrupted its own thread inside malloc, holding an allocator lock, or
 * half-way into taking or giving one back. That lock cannot be had until
 * the handler returns, and another thread may hold a second lock while it
 * waits for the first. The rules:
 *   - A process that never had a second thread (glibc's
 *     __libc_single_threaded, which its fork reads too) takes nothing. No
 *     other thread can hold a lock, so every held lock is the interrupted
 *     frame's; the child is a copy of that instant, and the interrupted
 *     call completes in both processes once the handler returns. This is
 *     the case glibc makes async-signal-safe (its fork skips its malloc
 *     locks there too) and tests with tst-mallocfork2.
 *   - With threads: a lock whose owner is this thread (glibc records the
 *     owner's thread id in every mutex) is the frame's; so is a lock held
 *     with no owner recorded for FORK_WINDOW_MS (the frame stopped between
 *     the lock word and the owner field inside pthread_mutex_lock or
 *     _unlock; another thread gets through those few instructions at once
 *     unless it stays descheduled that long). The handler leaves these to
 *     the frame, which gives them back after the handler returns, in parent
 *     and child alike. It looks for them before taking anything, among the
 *     locks it can reach without the cache list (all but those of the
 *     program's own caches), and again at every busy lock.
 *   - Once the frame is seen to hold a lock, the handler waits for other
 *     threads' locks for FORK_SELF_WAIT_MS in all: a holder that has not
 *     let go by then is taken to be waiting for the frame, and its lock is
 *     left held. The child cannot use what such a lock protects (nor could
 *     it with glibc's malloc, whose fork deadlocks in this case).
 *   - A fork from a signal handler that interrupted this thread's own fork
 *     (inside or after our prepare handler) takes nothing more: the outer
 *     fork holds, or is taking, the locks.
 *   The child of a fork from a signal handler may use the allocator once
 *   the handler has returned; in the handler, only async-signal-safe
 *   functions (as with glibc). One case is not seen: a frame inside
 *   uslab_cache_alloc/free of one of the program's own caches, holding its
 *   node lock, while another thread holds cache_mutex and waits for that
 *   node lock; the handler then waits for cache_mutex for good. (POSIX
 *   2024 no longer lists fork as async-signal-safe; _Fork() runs no
 *   handlers, and its child must not allocate at all.)
 *
 * Lock-free steps in flight. Another thread may be between atomic steps
 * when the fork happens (a slab word CAS, a push on a lock-free list, a
 * page block taken and not yet made a slab). Each step is one atomic
 * instruction, so the child sees it done or not, never half done; what the
 * vanished thread would have done next never happens. Its CPU parts, the
 * slabs and objects they hold and a block it had taken stay allocated in
 * the child: a leak bounded by what one thread holds. Every object in them
 * can still be freed by the child.
 *
 * Decay passes. A decay pass (decay.c, on the background thread) holds
 * cache_mutex for all of its work and takes node, barn and page locks
 * under it, one at a time: it changes nothing cache_mutex protects (the
 * lists are only read; its counters of what it saw are its own) and never
 * waits for a lock while it holds one but cache_mutex (pcpu.c's drains
 * flush after they give the part's lock back). A fork neither waits for
 * the pass nor leaves cache_mutex to it:
 *   - the handler that finds cache_mutex busy with a pass walks the cache
 *     list under the pass's hold (nobody can change the list while the
 *     pass holds it, and the pass does not) and takes every other lock as
 *     usual; the pass, wanting one of them, waits for it holding
 *     cache_mutex alone;
 *   - the pass cannot end while the handler walks: the two meet on two
 *     words, seq_cst (the pass's thread id, set while it holds
 *     cache_mutex; the handler's walk flag):
 *
 *       handler (sweep)                   pass (fork_pass_unlock)
 *       walk = 1                          pass_tid = 0
 *       t = pass_tid; t == owner? proxy   while (walk) wait
 *       ... fork ... release: walk = 0    unlock cache_mutex, pass_owner = 0
 *
 *     either the handler sees 0 (and waits for cache_mutex as for any
 *     lock) or the pass sees the flag (and waits for the handler);
 *   - the child, where the pass's thread is gone, gives cache_mutex back
 *     (a fresh mutex) if that thread holds it (pass_owner, which stays set
 *     until the pass has unlocked, so also when the fork came while the
 *     pass waited at its end): what it protects is as the pass found it. What the
 *     pass held in its hands (a drained part's sheaves, a barn's) stays
 *     allocated in the child, as a vanished thread's does (below).
 * So the child of a fork from a signal handler whose frame holds the lock
 * the pass waits for (the page lock inside malloc) does not inherit a held
 * cache_mutex: before 2026-11-27 it did, and hung at its next cache
 * operation (the reason the background thread was not on by default).
 *
 * What the child may do: everything (allocate, free the parent's blocks,
 * create and destroy caches, start threads, fork again), but see above for
 * a fork from a signal handler.
 */
#define _GNU_SOURCE 1
#include "slab.h"
#include "fork.h"

#include <errno.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 32)
#include <sys/single_threaded.h>
#define lone_process() (__libc_single_threaded != 0)
#else
#define lone_process() false
#endif

#ifdef __GLIBC__
/* glibc's stdio list lock, exported by every glibc (no header declares it);
 * weak, so that a libc without it leaves them NULL. */
extern void _IO_list_lock(void) __attribute__((weak));
extern void _IO_list_unlock(void) __attribute__((weak));
/* Who holds a mutex: glibc stores the owner's thread id in every kind. */
static inline pid_t mutex_owner(pthread_mutex_t *m)
{
	return __atomic_load_n(&m->__data.__owner, __ATOMIC_RELAXED);
}
static inline bool mutex_locked(pthread_mutex_t *m)
{
	return __atomic_load_n(&m->__data.__lock, __ATOMIC_RELAXED) != 0;
}
#else
#error "fork.c reads glibc's pthread_mutex_t (__data.__owner); other C libraries need a port"
#endif

/* Held with no owner this long: the interrupted frame's. Long, because a
 * mistake (another thread descheduled inside pthread_mutex_lock, on a
 * loaded machine) leaves that lock held in the child; the frame's own
 * case costs it once per such fork, and it is rare (a signal landing on
 * those few instructions). */
#define FORK_WINDOW_MS    1000
/* A self-interrupted fork waits this long in all for other threads' locks:
 * long enough for a holder descheduled on a loaded machine. */
#define FORK_SELF_WAIT_MS 500
#define FORK_SLICE_NS     1000000L   /* a wait re-checks its lock every millisecond */
#define FORK_MINE_MAX     32    /* locks the frame may hold (it nests a handful) */
#define CACHE_LOCKS_MAX   4

/* One fork at a time (the stdio list lock, or one thread): plain fields. */
static struct {
	bool active;              /* between prepare and parent/child handler */
	bool lone;                /* nothing taken: one-thread process */
	unsigned nest;            /* forks from a signal handler inside our prepare */
	unsigned stdio;           /* our holds of the stdio list lock (nested forks take more) */
	pid_t tid;                /* the forking thread, as mutexes record owners */
	bool self;                /* the interrupted frame holds an allocator lock */
	bool give_up;             /* self: the wait budget is spent, busy locks are left */
	uint64_t deadline;        /* self: when the budget ends (os_real_ms) */
	pthread_mutex_t *held;    /* taken by a wait, kept for the next sweep */
	pthread_mutex_t *busy;    /* where the last sweep stopped */
	pthread_mutex_t *mine[FORK_MINE_MAX];   /* the frame's locks */
	unsigned nmine;
	bool proxy;               /* the cache list is walked under a decay pass's cache_mutex */
	bool busy_pinned;         /* busy is not a lock of a program cache's (see wait_retry) */
	pthread_mutex_t *anon;    /* such a lock seen held with no owner recorded, */
	uint64_t anon_since;      /* since then (os_real_ms) */
} F;

/* The decay pass protocol (see the top): the thread whose pass holds
 * cache_mutex (0: none), and the handler's walk under it. */
static _Atomic pid_t pass_tid;
static _Atomic bool pass_walk;
/* The thread of the pass that holds cache_mutex, set from the pass's begin
 * until after it gave cache_mutex back: the child handler's test. */
static _Atomic pid_t pass_owner;

static struct {
	_Atomic uint64_t forks, lone, nested, self, windows, left, waits, proxied, reset;
} stats;

static void count(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

void fork_get_stats(struct fork_stats *st)
{
	st->forks = atomic_load_explicit(&stats.forks, memory_order_relaxed);
	st->lone = atomic_load_explicit(&stats.lone, memory_order_relaxed);
	st->nested = atomic_load_explicit(&stats.nested, memory_order_relaxed);
	st->self = atomic_load_explicit(&stats.self, memory_order_relaxed);
	st->windows = atomic_load_explicit(&stats.windows, memory_order_relaxed);
	st->left = atomic_load_explicit(&stats.left, memory_order_relaxed);
	st->waits = atomic_load_explicit(&stats.waits, memory_order_relaxed);
	st->proxied = atomic_load_explicit(&stats.proxied, memory_order_relaxed);
	st->reset = atomic_load_explicit(&stats.reset, memory_order_relaxed);
}

/* ---- the locks ---------------------------------------------------------- */

/* The locks of one cache, in the order they are taken: the one place that
 * knows a cache's locks. */
static unsigned cache_locks(struct uslab_cache *s, pthread_mutex_t *out[CACHE_LOCKS_MAX])
{
	out[0] = &s->node.list_lock;
	out[1] = &s->node.barn.lock;   /* a leaf: after the list lock */
	return 2;
}

/* uslab's own metadata caches (cache.c), which are not on cache_list. */
static struct uslab_cache *const internal_caches[] = {
	&cache_cache, &cache_cpu_cache, &cache_thread_cache,
	&cache_sheaf_cache[0], &cache_sheaf_cache[1], &cache_sheaf_cache[2],
	&cache_sheaf_cache[3], &cache_sheaf_cache[4], &cache_sheaf_cache[5],
};
_Static_assert(SHEAF_CACHES == 6, "every sheaf storage cache is listed above");

typedef bool (*lock_fn)(pthread_mutex_t *m);   /* false: stop the walk */

static bool walk_cache(struct uslab_cache *s, lock_fn fn)
{
	if (!core_hooks.fork_part_locks(s, fn))   /* the per-CPU backend's parts: before the node's */
		return false;
	pthread_mutex_t *l[CACHE_LOCKS_MAX];
	unsigned n = cache_locks(s, l);
	for (unsigned i = 0; i < n; i++)
		if (!fn(l[i]))
			return false;
	return true;
}

/*
 * Every lock after cache_mutex, in order. The cache list is walked only
 * while cache_mutex is this thread's (the handler's, or its interrupted
 * frame's, which cannot run meanwhile): then nobody else can change it. A
 * frame stopped half-way through linking or unlinking a cache leaves the
 * list walkable (one pointer store at a time, the cache freed after it is
 * unlinked).
 */
static bool in_list;   /* walk_inner is in the cache list: its locks' memory is pinned by cache_mutex only */

static bool walk_inner(lock_fn fn)
{
	if ((mutex_owner(&cache_mutex) == F.tid && F.tid) || F.proxy) {
		in_list = true;
		for (struct uslab_cache *s = cache_list; s; s = s->next)
			if (!walk_cache(s, fn)) {
				in_list = false;
				return false;
			}
		in_list = false;
	}
	for (unsigned i = 0; i < sizeof internal_caches / sizeof internal_caches[0]; i++)
		if (!walk_cache(internal_caches[i], fn))
			return false;
	pthread_mutex_t *pl[2];
	unsigned n = page_fork_locks(pl);
	for (unsigned i = 0; i < n; i++)
		if (!fn(pl[i]))
			return false;
	return fn(core_hooks.fork_lock_last());
}

static bool is_mine(pthread_mutex_t *m)
{
	for (unsigned i = 0; i < F.nmine; i++)
		if (F.mine[i] == m)
			return true;
	return false;
}

static void add_mine(pthread_mutex_t *m)
{
	if (is_mine(m))
		return;
	if (F.nmine == FORK_MINE_MAX)
		report_fatal("fork: more than %d allocator locks held by the interrupted thread", FORK_MINE_MAX);
	F.mine[F.nmine++] = m;
	if (!F.self) {
		F.self = true;
		F.deadline = os_real_ms() + FORK_SELF_WAIT_MS;
	}
}

/* ---- finding the interrupted frame's locks -------------------------------- */

#define SUSPECTS_MAX 16
static pthread_mutex_t *suspects[SUSPECTS_MAX];
static unsigned nsuspects;

static bool scan_one(pthread_mutex_t *m)
{
	if (mutex_owner(m) == F.tid)
		add_mine(m);
	else if (mutex_locked(m) && !mutex_owner(m) && nsuspects < SUSPECTS_MAX)
		suspects[nsuspects++] = m;
	return true;
}

static void pause_ns(long ns)
{
	struct timespec ts = { 0, ns };
	nanosleep(&ts, NULL);
}

/* ---- a decay pass's hold of cache_mutex (see "Decay passes" at the top) ---- */

void fork_pass_begin(void)
{
	pid_t t = (pid_t)syscall(SYS_gettid);
	atomic_store(&pass_owner, t);
	atomic_store(&pass_tid, t);   /* seq_cst: the meeting with proxy_take's walk flag */
}

void fork_pass_unlock(void)
{
	atomic_store(&pass_tid, 0);
	while (atomic_load(&pass_walk))   /* a fork walks the list under our hold: until it is done */
		pause_ns(FORK_SLICE_NS / 10);
	pthread_mutex_unlock(&cache_mutex);
	atomic_store(&pass_owner, 0);   /* after the unlock: the child's test needs it while we hold it */
}

/*
 * Before taking anything: which of the locks reachable without the cache
 * list does the frame hold? Those held with no owner are watched for
 * FORK_WINDOW_MS; one that another thread holds gets an owner or is let go
 * at once.
 */
static void scan_frame(void)
{
	nsuspects = 0;
	scan_one(core_hooks.fork_lock_first());
	scan_one(&cache_mutex);
	struct uslab_cache *s;
	for (unsigned i = 0; core_hooks.fork_known_cache(i, &s); i++)   /* the kmalloc classes */
		if (s)
			walk_cache(s, scan_one);
	for (unsigned i = 0; i < sizeof internal_caches / sizeof internal_caches[0]; i++)
		walk_cache(internal_caches[i], scan_one);
	pthread_mutex_t *pl[2];
	unsigned n = page_fork_locks(pl);
	for (unsigned i = 0; i < n; i++)
		scan_one(pl[i]);
	scan_one(core_hooks.fork_lock_last());
	uint64_t start = os_real_ms();
	while (nsuspects) {
		for (unsigned i = 0; i < nsuspects;) {
			pthread_mutex_t *m = suspects[i];
			if (!mutex_locked(m) || mutex_owner(m)) {
				suspects[i] = suspects[--nsuspects];
				continue;
			}
			i++;
		}
		if (!nsuspects)
			break;
		if (os_real_ms() - start >= FORK_WINDOW_MS) {
			for (unsigned i = 0; i < nsuspects; i++) {
				add_mine(suspects[i]);
				count(&stats.windows, 1);
			}
			break;
		}
		pause_ns(FORK_SLICE_NS / 10);
	}
}

/* ---- taking and giving back --------------------------------------------------- */

/* cache_mutex is busy: is it a decay pass's, and may the sweep walk the
 * cache list under it? (The meeting at the top; F.proxy until release.) */
static bool proxy_take(void)
{
	pid_t t = atomic_load(&pass_tid);
	if (!t || t == F.tid || mutex_owner(&cache_mutex) != t)
		return false;
	atomic_store(&pass_walk, true);
	if (atomic_load(&pass_tid) == t && mutex_owner(&cache_mutex) == t) {
		F.proxy = true;
		return true;
	}
	atomic_store(&pass_walk, false);
	return false;
}

static void proxy_drop(void)
{
	if (F.proxy) {
		F.proxy = false;
		atomic_store(&pass_walk, false);
	}
}

static bool try_one(pthread_mutex_t *m)
{
	if (m == F.held || is_mine(m) || !pthread_mutex_trylock(m))
		return true;
	if (m == &cache_mutex && (F.proxy || proxy_take()))
		return true;
	if (mutex_owner(m) == F.tid) {   /* the frame's (a lock of a program's cache) */
		add_mine(m);
		return true;
	}
	if (F.give_up) {   /* left to its holder */
		count(&stats.left, 1);
		return true;
	}
	if (in_list && mutex_locked(m) && !mutex_owner(m)) {   /* (wait_for's window, for wait_retry) */
		if (m != F.anon) {
			F.anon = m;
			F.anon_since = os_real_ms();
		} else if (os_real_ms() - F.anon_since >= FORK_WINDOW_MS) {
			add_mine(m);
			count(&stats.windows, 1);
			return true;
		}
	}
	F.busy = m;
	F.busy_pinned = !in_list;
	return false;
}

/* One pass: take every lock not taken or the frame's; false with F.busy
 * set at the first that is busy. */
static bool sweep(void)
{
	return try_one(core_hooks.fork_lock_first()) && try_one(&cache_mutex) && walk_inner(try_one);
}

/* Is m held by the handler? Its owner is this thread and it is not the
 * frame's. (In the child F.tid is still the parent's id, which the mutexes
 * recorded.) */
static bool handler_holds(pthread_mutex_t *m)
{
	return mutex_owner(m) == F.tid && !is_mine(m);
}

static pthread_mutex_t *release_stop;   /* where the sweep stopped: nothing after it was taken */

static bool give_back(pthread_mutex_t *m)
{
	if (m == release_stop)
		return false;
	if (handler_holds(m))
		pthread_mutex_unlock(m);
	return true;
}

/*
 * Give back what the handler holds: every lock the sweep passed before
 * `stop` (NULL: all), in sweep order but cache_mutex last (the cache list
 * is walked under it), and the lock a wait took. Only locks the sweep
 * passed: a lock after `stop` that the frame holds is not known yet.
 */
static void release(pthread_mutex_t *stop)
{
	release_stop = stop;
	if (give_back(core_hooks.fork_lock_first()) && stop != &cache_mutex) {
		walk_inner(give_back);
		if (handler_holds(&cache_mutex))
			pthread_mutex_unlock(&cache_mutex);
	}
	if (F.held && handler_holds(F.held))
		pthread_mutex_unlock(F.held);
	F.held = NULL;
	proxy_drop();   /* (after the walk above, which may have needed it) */
}

/*
 * Wait for m, holding no allocator lock. Ends with m taken (F.held), or m
 * found to be the frame's, or, in a self-interrupted fork, at the deadline
 * (F.give_up: every busy lock is then left to its holder).
 */
static void wait_for(pthread_mutex_t *m)
{
	uint64_t anon_since = 0;   /* since when m is held with no owner recorded */
	count(&stats.waits, 1);
	for (;;) {
		if (F.self && os_real_ms() >= F.deadline) {
			F.give_up = true;
			return;
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += FORK_SLICE_NS;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		if (!pthread_mutex_timedlock(m, &ts)) {
			F.held = m;
			return;
		}
		pid_t o = mutex_owner(m);
		if (o == F.tid) {
			add_mine(m);
			return;
		}
		if (o || !mutex_locked(m)) {
			anon_since = 0;
		} else if (!anon_since) {
			anon_since = os_real_ms();
		} else if (os_real_ms() - anon_since >= FORK_WINDOW_MS) {
			add_mine(m);
			count(&stats.windows, 1);
			return;
		}
	}
}

/*
 * The busy lock was a program cache's (its node, barn or a CPU part's
 * lock): its memory is the cache's or the part's, which uslab_cache_destroy
 * frees, and only cache_mutex (which the handler has just given back) keeps
 * it. So do not wait on it: a wait that took it could hold a lock in freed
 * memory, which the next sweep (finding a new part at the same address)
 * would take for its own while another thread held the new one; the child
 * then inherited that lock held (test_fork's busy forks, 1 child in 20
 * under load, before 2026-11-27). Pause and sweep again instead: its holder
 * lets go within a slow path (a self-interrupted fork gives up at its
 * deadline, as wait_for does).
 */
static void wait_retry(void)
{
	count(&stats.waits, 1);
	if (F.self && os_real_ms() >= F.deadline) {
		F.give_up = true;
		return;
	}
	pause_ns(FORK_SLICE_NS / 10);
}

/* ---- the handlers ----------------------------------------------------------------- */

static void stdio_lock(void)
{
	if (_IO_list_lock)
		_IO_list_lock();
}

static void stdio_unlock(void)
{
	if (_IO_list_unlock)
		_IO_list_unlock();
}

static void fork_prepare(void)
{
	if (lone_process()) {
		/* Every lock held is this thread's interrupted frame's: see the top. */
		F.lone = true;
		count(&stats.lone, 1);
		return;
	}
	F.lone = false;
	stdio_lock();   /* recursive: a nested fork takes it again */
	F.stdio++;
	pid_t tid = (pid_t)syscall(SYS_gettid);
	if (F.active && F.tid == tid) {
		/* A signal handler forked while this thread was inside fork: the
		 * outer prepare holds or is taking the locks; take none. */
		F.nest++;
		count(&stats.nested, 1);
		return;
	}
	F.active = true;
	F.tid = tid;
	F.self = false;
	F.give_up = false;
	F.held = NULL;
	F.nmine = 0;
	F.proxy = false;
	F.anon = NULL;
	count(&stats.forks, 1);
	scan_frame();
	while (!sweep()) {
		release(F.busy);
		if (F.busy_pinned)
			wait_for(F.busy);
		else
			wait_retry();
	}
	if (F.self)
		count(&stats.self, 1);
	if (F.proxy)
		count(&stats.proxied, 1);
}

static void fork_parent(void)
{
	if (F.lone)
		return;
	if (F.nest) {
		F.nest--;
	} else {
		release(NULL);
		F.active = false;
	}
	if (F.stdio) {   /* after ours: stdio list lock -> allocator locks */
		F.stdio--;
		stdio_unlock();
	}
}

static void fork_child(void)
{
	if (F.lone)
		return;
	F.stdio = 0;   /* glibc reset the stdio list lock before the child handlers ran */
	if (F.nest) {
		F.nest--;
		return;
	}
	release(NULL);
	F.active = false;
	/* cache_mutex held by a decay pass, whose thread is gone (under the
	 * handler's walk, or left after a self-interrupted fork's wait) */
	pid_t t = atomic_load(&pass_owner);
	if (t && t != F.tid && mutex_locked(&cache_mutex) && mutex_owner(&cache_mutex) == t) {
		pthread_mutex_init(&cache_mutex, NULL);
		count(&stats.reset, 1);
	}
	atomic_store(&pass_tid, 0);
	atomic_store(&pass_owner, 0);
	atomic_store(&pass_walk, false);
	core_hooks.fork_child();   /* the vanished threads' CPU parts: settled at the next slow path */
}

void fork_init(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}
