/*
 * Sampled guard pages: KFENCE (mm/kfence/) in user space.
 *
 * The pool. One mapping, made once at init and never given back, of
 * 2 * nr + 1 pages: a guard page, then a data page and a guard page per
 * object slot. Guard pages are always inaccessible (PROT_NONE); a data
 * page is readable and writable while its slot holds a live object and
 * inaccessible while it is free. The mapping is not one of uslab's 4 MiB
 * segments, so slab_of() says &slab_foreign for every pool pointer:
 * the free fast paths send pool objects to the slow paths, which ask
 * kfence_owns() (one subtraction and a compare) before they would report an
 * invalid free.
 *
 * A sampled object (kfence_alloc_due) takes the free slot freed longest
 * ago (slots never used first), so that a freed object stays inaccessible
 * for as long as the pool allows. Its data page is made accessible and
 * filled with the canary (KFENCE's pattern: 0xaa ^ (address & 7)); the
 * object is placed against the page's right end (rounded down to the
 * cache's alignment: the slack between its end and the guard stays
 * canary) or at its left end, at random, so that an access past either end
 * faults on a guard page at once (or, in the slack, is found at free by the
 * canary check). The cache's constructor, if any, runs on it: a pool
 * object is a new object every time. Its size is the cache's object size,
 * or for the malloc family the size asked for (as KFENCE's ksize() and
 * GWP-ASan): malloc_usable_size() says so, so overflows past the request
 * that the size class would hide are caught, and programs that write up to
 * the usable size stay correct. Alignment is the cache's (for the malloc
 * family at least the 16 bytes that classes of 16-byte multiples give);
 * aligned allocations ask for a multiple of their alignment, which keeps a
 * right-placed object aligned too (the page end is).
 *
 * A free checks that the pointer is a live object's start (else double free
 * or invalid free), that the named cache is the object's (wrong cache), and
 * the canary; then the data page is made inaccessible until the slot is
 * used again.
 *
 * The pool is mapped, and the fault handler installed, by the first
 * sample (kfence=N: by kfence_init()), so a process that ends before its
 * first kfence_ms pays for neither.
 *
 * Faults. The SIGSEGV handler looks at the fault address: inside the pool it is a KFENCE access
 * (a data page: use after free; a guard page: out of bounds of the live
 * object nearest to it). The report names the access (read or write: the
 * page-fault error code on x86-64), its offset from the object, the
 * object, its cache, where and by which thread it was allocated and freed,
 * and how long ago; then one "uslab: fatal:" line and abort(). With
 * report_continue the handler makes the page accessible and returns, so
 * the access completes (the kernel does the same); a guard page opened so
 * is closed again when a neighbouring slot is next used. A fault outside
 * the pool goes to the handler that was there before ours, as the kernel
 * would have delivered it: an SA_SIGINFO handler with (sig, info, ctx), a
 * plain one with (sig), SIG_DFL and SIG_IGN by putting the default action
 * back and letting the fault happen again (or, for a signal sent with
 * kill/raise, sending it again).
 *
 * Nothing on the report path allocates or takes an allocator lock: lines
 * go through report.c's formatter, call sites are resolved with dladdr()
 * (no allocation), and stacks come from glibc's backtrace(), whose first
 * call loads libgcc_s (which allocates). So the first pool allocation warms
 * it up, from the allocation path, where allocating is allowed, and until
 * that is done stacks are not recorded and the handler prints none.
 * After it, backtrace() does not allocate (test_kfence_malloc checks this
 * with every allocation sampled); libgcc's unwinder (GCC 12 and later)
 * finds frames through glibc's _dl_find_object, which takes no lock, so
 * the fault handler may walk the faulting thread's stack (unless the
 * program registers unwind tables by hand, as JITs do: that lookup takes
 * libgcc's mutex).
 *
 * Slots without a lock. A slot's state word holds its state (free, live,
 * busy) and the sequence number of its last free; allocation scans the
 * words for the free slot with the lowest number and takes it by
 * compare-and-swap (free -> busy); a free takes its slot live -> busy. So
 * two frees of one object race to one winner (the other is a double free),
 * and a thread that vanishes at fork in the middle of either step leaves
 * at most its one slot busy in the child, which is then never reused (the
 * child's pool is one slot smaller): there is no lock for fork.c to take.
 * The busy owner writes the slot's metadata; the release store that makes
 * the slot live or free publishes it, and readers load the state with
 * acquire first. The fault handler reads metadata without any of this
 * (a racing reuse of the slot can only blur its report).
 *
 * The pool is mapped through os.c's seam; protections are changed here
 * with mprotect(2), which os.c has no wrapper for.
 */
#define _GNU_SOURCE
#include "kfence.h"
#include "cpu.h"
#include "debug.h"

#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

unsigned kfence_interval = KFENCE_BY_TIME;   /* on by default */
unsigned kfence_ms = KFENCE_MS_DEFAULT;
unsigned kfence_pool_objects;
_Atomic uint64_t kfence_due = UINT64_MAX;

#define KF_DEPTH   16          /* frames kept of each stack */
#define ST_FREE    0ULL        /* slot state (low 2 bits of the state word) */
#define ST_LIVE    1ULL
#define ST_BUSY    2ULL
#define ST_MASK    3ULL
#define SEQ(w)     ((w) >> 2)  /* the free's sequence number (0: never allocated) */
#define CANARY_WORD 0xadacafaea9a8abaaULL   /* bytes 0xaa ^ (address & 7), little-endian */
#define ALIGN_DOWN(x, a) ((x) & ~((uintptr_t)(a) - 1))

static inline unsigned char canary_byte(uintptr_t a) { return (unsigned char)(0xaa ^ (a & 7)); }

struct kf_track {
	uint64_t ns;                /* CLOCK_MONOTONIC, when */
	int tid;                    /* gettid() of the thread */
	int depth;                  /* frames[] used */
	void *frames[KF_DEPTH];     /* return addresses, the API's caller first */
};

/* A slot's metadata: the live object, or the last one while free. Written
 * by the thread that holds the slot busy. */
struct kf_meta {
	uintptr_t addr;             /* object start */
	size_t size;                /* object bytes (the usable size) */
	const struct uslab_cache *cache;   /* root cache (compared, never dereferenced) */
	char name[USLAB_NAME_MAX + 1];     /* the cache's name, for reports */
	struct kf_track alloc, free;
};

/* One state struct: the pool, its slots, the handler we chain to, counters. */
static struct {
	uintptr_t start;            /* first byte of the pool (a guard page); 0: no pool */
	/* bytes of the pool; 0: no pool (kfence_owns is false). Stored last,
	 * with release, when the first sample maps the pool: a thread that
	 * loads it (acquire) sees the rest; a pool pointer reaches a free
	 * only through its allocation, which comes after the store. */
	_Atomic size_t size;
	_Atomic int mapped;         /* the pool: 0 not yet, 1 being mapped, 2 ready, 3 failed */
	unsigned nr;                /* object slots */
	_Atomic uint64_t *state;    /* per slot: SEQ << 2 | ST_* (its own array: the scan reads it alone) */
	struct kf_meta *meta;       /* per slot */
	_Atomic uint8_t *guard_open;/* per guard page (nr + 1): opened by report_continue */
	_Atomic uint64_t free_seq;  /* the last free's sequence number */
	_Atomic uint64_t rng;       /* splitmix64 state (counts, placement) */
	_Atomic int warm;           /* backtrace(): 0 never called, 1 being warmed up, 2 ready */
	struct sigaction prev;      /* the SIGSEGV action before ours (written before ours is in) */
	/* statistics (relaxed) */
	_Atomic uint64_t allocs, frees, missed, reports;
} kf;

/* ---- small helpers ----------------------------------------------------------- */

static uint64_t rnd(void)
{
	uint64_t z = atomic_fetch_add_explicit(&kf.rng, 0x9e3779b97f4a7c15ULL, memory_order_relaxed) +
		     0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static inline char *data_page(unsigned i)
{
	return (char *)kf.start + (2 * (size_t)i + 1) * PAGE_SIZE;
}

static inline char *guard_page(unsigned k)
{
	return (char *)kf.start + 2 * (size_t)k * PAGE_SIZE;
}

static inline void count(_Atomic uint64_t *c)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* Record the current stack: frames from the API's caller on when it is
 * seen, else from our caller's caller. Nothing before backtrace() is warm. */
static void take_stack(struct kf_track *t, void *caller)
{
	t->ns = now_ns();
	t->tid = (int)gettid();
	t->depth = 0;
	if (atomic_load_explicit(&kf.warm, memory_order_acquire) != 2)
		return;
	void *buf[KF_DEPTH + 8];
	int n = backtrace(buf, KF_DEPTH + 8), from = n > 2 ? 2 : 0;
	for (int k = 0; k < n; k++) {
		if (buf[k] == caller) {
			from = k;
			break;
		}
	}
	for (int k = from; k < n && t->depth < KF_DEPTH; k++)
		t->frames[t->depth++] = buf[k];
}

/* The first backtrace() call loads libgcc_s, which allocates: make it from
 * an allocation path, once. Allocations it makes meanwhile (sampled or
 * not) record no stack. */
static void warm_up(void)
{
	int expect = 0;
	if (atomic_load_explicit(&kf.warm, memory_order_relaxed) != 0 ||
	    !atomic_compare_exchange_strong(&kf.warm, &expect, 1))
		return;
	void *buf[4];
	backtrace(buf, 4);
	atomic_store_explicit(&kf.warm, 2, memory_order_release);
}

/* ---- reports (no allocation, no lock) ------------------------------------------- */

/* "func+0x1a" or "0x..." for a code address. */
static void sym_name(char *buf, size_t size, const void *ip)
{
	Dl_info di;
	if (ip && dladdr(ip, &di) && di.dli_sname && di.dli_saddr)
		fmt_buf(buf, size, "%s+0x%lx", di.dli_sname, (unsigned long)((uintptr_t)ip - (uintptr_t)di.dli_saddr));
	else
		fmt_buf(buf, size, "%p", ip);
}

static void print_frames(void *const *frames, int n)
{
	for (int k = 0; k < n; k++) {
		Dl_info di;
		const char *obj = "?";
		unsigned long rel = 0;
		char sym[160];
		if (dladdr(frames[k], &di) && di.dli_fname) {
			const char *slash = strrchr(di.dli_fname, '/');
			obj = slash ? slash + 1 : di.dli_fname;
			rel = (unsigned long)((uintptr_t)frames[k] - (uintptr_t)di.dli_fbase);
		}
		sym_name(sym, sizeof sym, frames[k]);
		report_line(" #%d %s (%s+0x%lx)", k, sym, obj, rel);
	}
	if (!n)
		report_line(" (no stack recorded)");
}

static void print_track(const char *what, const struct kf_track *t, uint64_t now)
{
	uint64_t ago = now > t->ns ? now - t->ns : 0;
	report_line("%s by thread %d %lu.%06lus ago:", what, t->tid, (unsigned long)(ago / 1000000000ULL),
		    (unsigned long)(ago / 1000 % 1000000));
	print_frames(t->frames, t->depth);
}

static void report_rule(void)
{
	report_line("==================================================================");
}

/* The object of slot i and its history. */
static void print_object(unsigned i, bool freed)
{
	const struct kf_meta *m = &kf.meta[i];
	uint64_t now = now_ns();
	report_line("kfence-#%u: %p-%p, size=%zu, cache=%s", i, (void *)m->addr, (void *)(m->addr + m->size - 1),
		    m->size, m->name);
	report_line("%s", "");
	print_track("allocated", &m->alloc, now);
	if (freed) {
		report_line("%s", "");
		print_track("freed", &m->free, now);
	}
}

/* The end of every report: abort, or with report_continue go on. */
static void report_end(const char *what, const void *p, unsigned i, bool have_obj)
{
	report_rule();
	count(&kf.reports);
	if (opt.report_continue) {
		report_line("KFENCE: continuing (report_continue)");
		return;
	}
	if (have_obj)
		report_fatal("KFENCE: %s at %p (kfence-#%u, cache '%s')", what, p, i, kf.meta[i].name);
	report_fatal("KFENCE: %s at %p", what, p);
}

/* ---- the fault handler ---------------------------------------------------------- */

/* The live object next to guard page k, nearest to a (NULL-free: -1 none). */
static int guard_neighbour(unsigned k, uintptr_t a)
{
	int best = -1;
	uintptr_t dist = 0;
	if (k > 0) {   /* slot k - 1 ends before it */
		uint64_t w = atomic_load_explicit(&kf.state[k - 1], memory_order_acquire);
		if ((w & ST_MASK) == ST_LIVE) {
			best = (int)k - 1;
			dist = a - (kf.meta[k - 1].addr + kf.meta[k - 1].size);
		}
	}
	if (k < kf.nr) {   /* slot k starts after it */
		uint64_t w = atomic_load_explicit(&kf.state[k], memory_order_acquire);
		if ((w & ST_MASK) == ST_LIVE && (best < 0 || kf.meta[k].addr - a < dist))
			best = (int)k;
	}
	return best;
}

/* A fault at a inside the pool. Returns true when the access may go on
 * (report_continue, or the slot was made live again meanwhile). */
static bool pool_fault(uintptr_t a, void *ctx)
{
	const char *rw = "access", *Rw = "Access";
	const void *ip = NULL;
#if defined(__x86_64__)
	const ucontext_t *uc = ctx;
	bool write = uc->uc_mcontext.gregs[REG_ERR] & 2;   /* page-fault error code: W */
	rw = write ? "write" : "read";
	Rw = write ? "Write" : "Read";
	ip = (const void *)uc->uc_mcontext.gregs[REG_RIP];
#else
	(void)ctx;
#endif
	size_t pg = (a - kf.start) >> PAGE_SHIFT;
	int i;
	bool uaf;
	if (pg & 1) {   /* a data page: its slot is free (or being reused) */
		i = (int)((pg - 1) / 2);
		uint64_t w = atomic_load_explicit(&kf.state[i], memory_order_acquire);
		if ((w & ST_MASK) == ST_LIVE)
			return true;   /* allocated again since: the access now succeeds */
		if (!SEQ(w) && (w & ST_MASK) == ST_FREE)
			i = -1;        /* never held an object */
		uaf = true;
	} else {
		i = guard_neighbour((unsigned)(pg / 2), a);
		uaf = false;
	}
	char where[160], kind[64];
	sym_name(where, sizeof where, ip);
	if (i < 0)
		fmt_buf(kind, sizeof kind, "invalid %s", rw);
	else
		fmt_buf(kind, sizeof kind, "%s %s", uaf ? "use-after-free" : "out-of-bounds", rw);
	report_rule();
	report_line("BUG: KFENCE: %s in %s", kind, where);
	report_line("%s", "");
	if (i >= 0) {
		const struct kf_meta *m = &kf.meta[i];
		long off = (long)(a - m->addr);
		if (uaf)
			report_line("Use-after-free %s at %p (in kfence-#%d, offset %ld):", rw, (void *)a, i, off);
		else if (a < m->addr)
			report_line("Out-of-bounds %s at %p (%luB left of kfence-#%d, offset %ld):", rw, (void *)a,
				    (unsigned long)(m->addr - a), i, off);
		else
			report_line("Out-of-bounds %s at %p (%luB right of kfence-#%d, offset %ld):", rw, (void *)a,
				    (unsigned long)(a - (m->addr + m->size) + 1), i, off);
	} else {
		report_line("%s at %p (in the KFENCE pool, no object):", Rw, (void *)a);
	}
	if (atomic_load_explicit(&kf.warm, memory_order_acquire) == 2) {
		void *buf[KF_DEPTH + 8];
		int n = backtrace(buf, KF_DEPTH + 8), from = 0;
		for (int k = 0; k < n; k++) {
			if (buf[k] == ip) {
				from = k;
				break;
			}
		}
		print_frames(buf + from, MIN(n - from, KF_DEPTH));
	} else {
		print_frames((void *const *)&ip, ip ? 1 : 0);
	}
	report_line("%s", "");
	if (i >= 0)
		print_object((unsigned)i, uaf);
	report_end(kind, (void *)a, (unsigned)i, i >= 0);
	/* report_continue: open the page and let the access complete */
	char *page = (char *)ALIGN_DOWN(a, PAGE_SIZE);
	if (!(pg & 1))
		atomic_store_explicit(&kf.guard_open[pg / 2], 1, memory_order_relaxed);
	mprotect(page, PAGE_SIZE, PROT_READ | PROT_WRITE);
	return true;
}

/* Deliver a SIGSEGV that is not ours as if we were not there. */
static void chain(int sig, siginfo_t *si, void *ctx)
{
	struct sigaction *p = &kf.prev;
	if (p->sa_handler == SIG_DFL || p->sa_handler == SIG_IGN) {
		bool sent = si->si_code <= 0;   /* kill, raise, sigqueue: not a fault */
		if (sent && p->sa_handler == SIG_IGN)
			return;
		/* The default action: for a fault, put it back and return, so
		 * that the instruction faults again and the kernel kills the
		 * process with this signal (an ignored fault kills too, as the
		 * kernel does); a sent signal is sent again (it is blocked until
		 * the handler returns). */
		struct sigaction d;
		memset(&d, 0, sizeof d);
		d.sa_handler = SIG_DFL;
		sigemptyset(&d.sa_mask);
		sigaction(sig, &d, NULL);
		if (sent)
			raise(sig);
		return;
	}
	/* The program's handler, with its mask (and SA_RESETHAND) honoured. */
	sigset_t old, mask = p->sa_mask;
	if (!(p->sa_flags & SA_NODEFER))
		sigaddset(&mask, sig);
	pthread_sigmask(SIG_BLOCK, &mask, &old);
	struct sigaction h = *p;
	if (h.sa_flags & SA_RESETHAND) {
		memset(p, 0, sizeof *p);
		p->sa_handler = SIG_DFL;
	}
	if (h.sa_flags & SA_SIGINFO)
		h.sa_sigaction(sig, si, ctx);
	else
		h.sa_handler(sig);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void segv_handler(int sig, siginfo_t *si, void *ctx)
{
	int e = errno;
	uintptr_t a = (uintptr_t)si->si_addr;
	if (si->si_code > 0 && kfence_owns((void *)a) && pool_fault(a, ctx)) {
		errno = e;
		return;
	}
	chain(sig, si, ctx);
	errno = e;
}

/* Install ours once, remembering what was there. The previous action is
 * read first and stored before ours goes in, so a fault on another thread
 * right after finds it; if the program changed it in between (another
 * thread's sigaction), the one we replaced wins. */
static bool install_handler(void)
{
	struct sigaction sa, old;
	if (sigaction(SIGSEGV, NULL, &kf.prev))
		return false;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = segv_handler;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;   /* on the program's alternate stack if it has one */
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGSEGV, &sa, &old))
		return false;
	if (old.sa_handler != kf.prev.sa_handler || old.sa_flags != kf.prev.sa_flags)
		kf.prev = old;
	return true;
}

/* ---- init ------------------------------------------------------------------------ */

/* Map the pool and install the handler: once, by the first sample (or
 * kfence_init for kfence=N). False: no pool (now, or ever). */
static bool pool_map(void)
{
	int st = atomic_load_explicit(&kf.mapped, memory_order_acquire);
	if (likely(st == 2))
		return true;
	if (st != 0 || !atomic_compare_exchange_strong_explicit(&kf.mapped, &st, 1, memory_order_acquire,
								 memory_order_acquire))
		return false;   /* another thread is mapping it (this sample goes to the slabs), or it failed */
	unsigned nr = kfence_pool_objects ? kfence_pool_objects : KFENCE_POOL_DEFAULT;
	size_t size = (2 * (size_t)nr + 1) * PAGE_SIZE;
	size_t msize = ALIGN_UP(nr * (sizeof(struct kf_meta) + sizeof(uint64_t)) + nr + 1, PAGE_SIZE);
	char *pool = os_map_aligned(size, PAGE_SIZE);
	char *m = pool ? os_map_aligned(msize, PAGE_SIZE) : NULL;
	const char *why = NULL;
	bool again = false;   /* memory short now: try again at the next sample */
	if (!m || mprotect(pool, size, PROT_NONE)) {
		why = "cannot map a pool of objects";
		again = true;
	} else {
		kf.state = (_Atomic uint64_t *)m;   /* fresh mapping: every slot free, never used */
		kf.meta = (struct kf_meta *)(m + nr * sizeof(uint64_t));
		kf.guard_open = (_Atomic uint8_t *)(m + nr * (sizeof(struct kf_meta) + sizeof(uint64_t)));
		kf.nr = nr;
		atomic_store_explicit(&kf.rng, os_random(), memory_order_relaxed);
		kf.start = (uintptr_t)pool;
		if (!install_handler())
			why = "cannot install the SIGSEGV handler";
	}
	if (why) {
		kf.start = 0;
		if (pool)
			os_unmap(pool, size);
		if (m)
			os_unmap(m, msize);
		if (kfence_interval == KFENCE_BY_TIME && again) {
			/* sampling by time (the default) needs no report: a pool
			 * that could not be had now (memory short) is tried again
			 * at the next sample; without a handler, never */
			atomic_store_explicit(&kf.mapped, 0, memory_order_release);
			return false;
		}
		if (kfence_interval != KFENCE_BY_TIME)
			report_line("KFENCE: %s: sampling off", why);
		atomic_store_explicit(&kfence_due, UINT64_MAX, memory_order_relaxed);   /* no more samples */
		atomic_store_explicit(&kf.mapped, 3, memory_order_release);
		return false;
	}
	atomic_store_explicit(&kf.size, size, memory_order_release);
	atomic_store_explicit(&kf.mapped, 2, memory_order_release);
	return true;
}

/* The policy clock (os.h): coarse monotonic milliseconds (vDSO: no system
 * call; ticks of 1-4 ms, plenty for a 100 ms interval), which a test may
 * hold. */
static uint64_t now_ms(void)
{
	return os_now_ms();
}

void kfence_init(void)
{
	if (kfence_interval == KFENCE_BY_TIME && !kfence_ms)
		kfence_interval = 0;   /* kfence_ms=0: no sampling by time */
	if (!kfence_interval)
		return;
	if (sysconf(_SC_PAGESIZE) != (long)PAGE_SIZE) {
		report_line("KFENCE: the page size is not %lu bytes: sampling off", PAGE_SIZE);
		kfence_interval = 0;
		return;
	}
	if (kfence_interval != KFENCE_BY_TIME) {   /* kfence=N: the pool now */
		if (!pool_map())
			kfence_interval = 0;
		return;
	}
	atomic_store_explicit(&kfence_due, now_ms() + kfence_ms, memory_order_relaxed);
}

unsigned kfence_next_skip(void)
{
	unsigned n = kfence_interval;
	if (n <= 1)
		return n;
	return (unsigned)(n / 2 + rnd() % n);   /* uniform in [n/2, 3n/2) */
}

/* ---- slots ------------------------------------------------------------------------- */

/* Take the free slot freed longest ago (never used ones first): true with
 * *i and its state word before the take in *w. */
static bool slot_take(unsigned *i, uint64_t *w)
{
	for (int tries = 0; tries < 8; tries++) {
		unsigned best = UINT32_MAX;
		uint64_t bw = 0;
		for (unsigned k = 0; k < kf.nr; k++) {
			uint64_t x = atomic_load_explicit(&kf.state[k], memory_order_relaxed);
			if ((x & ST_MASK) != ST_FREE || (best != UINT32_MAX && SEQ(x) >= SEQ(bw)))
				continue;
			best = k;
			bw = x;
			if (!SEQ(x))
				break;
		}
		if (best == UINT32_MAX)
			return false;
		if (atomic_compare_exchange_strong_explicit(&kf.state[best], &bw, (bw & ~ST_MASK) | ST_BUSY,
							    memory_order_acquire, memory_order_relaxed)) {
			*i = best;
			*w = bw;
			return true;
		}
	}
	return false;   /* lost the race eight times: leave this sample to the slabs */
}

static void canary_fill(char *page)
{
	uint64_t *q = (uint64_t *)page;
	for (size_t k = 0; k < PAGE_SIZE / 8; k++)
		q[k] = CANARY_WORD;
}

/* First byte of [lo, hi) that is not canary, or 0. */
static uintptr_t canary_bad(uintptr_t lo, uintptr_t hi)
{
	for (; lo < hi && (lo & 7); lo++)
		if (*(unsigned char *)lo != canary_byte(lo))
			return lo;
	for (; lo + 8 <= hi; lo += 8)
		if (*(uint64_t *)lo != CANARY_WORD)
			break;
	for (; lo < hi; lo++)
		if (*(unsigned char *)lo != canary_byte(lo))
			return lo;
	return 0;
}

/* Guard pages around slot i that report_continue opened: close them. */
static void guards_close(unsigned i)
{
	for (unsigned k = i; k <= i + 1; k++)
		if (atomic_load_explicit(&kf.guard_open[k], memory_order_relaxed) &&
		    atomic_exchange_explicit(&kf.guard_open[k], 0, memory_order_relaxed))
			mprotect(guard_page(k), PAGE_SIZE, PROT_NONE);
}

static void *pool_alloc(struct uslab_cache *s, struct uslab_cache *root, size_t size, size_t align, void *caller)
{
	unsigned i;
	uint64_t w;
	if (!slot_take(&i, &w))
		return NULL;
	char *page = data_page(i);
	if (mprotect(page, PAGE_SIZE, PROT_READ | PROT_WRITE)) {   /* no memory for the VMA split */
		atomic_store_explicit(&kf.state[i], w, memory_order_release);
		return NULL;
	}
	guards_close(i);
	track_release(page, PAGE_SIZE);   /* tracked builds: the last object's poison goes */
	canary_fill(page);
	char *x = (rnd() & 1) ? (char *)ALIGN_DOWN((uintptr_t)page + PAGE_SIZE - size, align) : page;
	struct kf_meta *m = &kf.meta[i];
	m->addr = (uintptr_t)x;
	m->size = size;
	m->cache = root;
	size_t n = strlen(s->name);
	memcpy(m->name, s->name, n + 1);
	take_stack(&m->alloc, caller);
	m->free.depth = 0;
	m->free.ns = 0;
	m->free.tid = 0;
	if (root->ctor)
		root->ctor(x);
	track_alloc(x, size);
	atomic_store_explicit(&kf.state[i], (w & ~ST_MASK) | ST_LIVE, memory_order_release);
	count(&kf.allocs);
	return x;
}

/* Is a sample due for this allocation? By time: the first allocation
 * (slow path, or a fast path's count wrapping) that finds the deadline
 * passed moves it on by CAS and is the sample. */
static bool sample_due(void)
{
	if (kfence_interval != KFENCE_BY_TIME) {
		if (!cpu_tls.kf_left)
			cpu_tls.kf_left = kfence_next_skip();
		return --cpu_tls.kf_left == 0;
	}
	uint64_t due = atomic_load_explicit(&kfence_due, memory_order_relaxed);
	if (due == UINT64_MAX)
		return false;
	uint64_t now = now_ms();
	return now >= due && atomic_compare_exchange_strong_explicit(&kfence_due, &due, now + kfence_ms,
								     memory_order_relaxed, memory_order_relaxed);
}

void *kfence_alloc_due(struct uslab_cache *s, size_t asked, void *caller)
{
	if (!sample_due())
		return NULL;
	struct uslab_cache *root = cache_root(s);
	size_t size = asked ? asked : s->object_size, align = s->align ? s->align : 1;
	if (asked)   /* the malloc family: at least the 16 bytes a class of 16-byte multiples gives */
		align = MAX(align, MIN((size_t)16, (size_t)(root->size & -root->size)));
	size = MAX(size, (size_t)1);
	if (!root->debug && !root->internal && size <= PAGE_SIZE && align <= PAGE_SIZE) {
		int e = errno;
		void *x = NULL;
		if (pool_map()) {
			if (unlikely(atomic_load_explicit(&kf.warm, memory_order_relaxed) != 2))
				warm_up();
			x = pool_alloc(s, root, size, align, caller);
		}
		errno = e;
		if (x) {
			stat_inc(root, NULL, USLAB_STAT_ALLOC_SLOWPATH);   /* an allocation of the cache */
			return x;
		}
	}
	count(&kf.missed);
	return NULL;
}

bool kfence_owns(const void *p)
{
	size_t size = atomic_load_explicit(&kf.size, memory_order_acquire);
	return (uintptr_t)p - kf.start < size;   /* (start is 0 while size is) */
}

/* ---- free --------------------------------------------------------------------------- */

/* A misuse at free (or usable size) of pool pointer p: the report. */
static void misuse_report(const char *bug, const void *p, int i, bool freed, void *caller, const char *detail)
{
	char where[160];
	sym_name(where, sizeof where, caller);
	report_rule();
	report_line("BUG: KFENCE: %s in %s", bug, where);
	report_line("%s", "");
	report_line("%s", detail);
	struct kf_track now;
	take_stack(&now, caller);
	print_frames(now.frames, now.depth);
	report_line("%s", "");
	if (i >= 0)
		print_object((unsigned)i, freed);
}

void kfence_free(void *p, struct uslab_cache *named, void *caller, enum uslab_stat_item counted_as)
{
	int e = errno;
	uintptr_t a = (uintptr_t)p;
	size_t pg = (a - kf.start) >> PAGE_SHIFT;
	char detail[256];
	if (!(pg & 1)) {   /* inside a guard page: no object starts there */
		int i = guard_neighbour((unsigned)(pg / 2), a);
		fmt_buf(detail, sizeof detail, "Invalid free of %p (a KFENCE guard page, no object):", p);
		misuse_report("invalid free", p, i, false, caller, detail);
		report_end("invalid free", p, (unsigned)i, i >= 0);
		errno = e;
		return;
	}
	unsigned i = (unsigned)((pg - 1) / 2);
	struct kf_meta *m = &kf.meta[i];
	uint64_t w = atomic_load_explicit(&kf.state[i], memory_order_acquire);
	for (;;) {
		if ((w & ST_MASK) != ST_LIVE) {   /* free (or being freed by another thread) */
			bool ever = SEQ(w) || (w & ST_MASK) != ST_FREE;
			bool at_start = ever && a == m->addr;
			fmt_buf(detail, sizeof detail, "%s of %p (%s kfence-#%u, offset %ld):",
				at_start ? "Double free" : "Invalid free", p, ever ? "in freed" : "in never used", i,
				(long)(a - m->addr));
			misuse_report(at_start ? "double free" : "invalid free", p, ever ? (int)i : -1, ever, caller,
				      detail);
			report_end(at_start ? "double free" : "invalid free", p, i, ever);
			errno = e;
			return;
		}
		if (a != m->addr) {
			fmt_buf(detail, sizeof detail, "Invalid free of %p (in kfence-#%u, offset %ld, not its start):", p,
				i, (long)(a - m->addr));
			misuse_report("invalid free", p, (int)i, false, caller, detail);
			report_end("invalid free", p, i, true);
			errno = e;
			return;   /* report_continue: the object stays allocated */
		}
		if (named && cache_root(named) != m->cache) {
			fmt_buf(detail, sizeof detail, "wrong cache: free of %p to cache '%s', but it belongs to cache '%s':",
				p, named->name, m->name);
			misuse_report("wrong cache", p, (int)i, false, caller, detail);
			report_end("wrong cache", p, i, true);
			errno = e;
			return;   /* report_continue: leaked, the other cache untouched */
		}
		if (atomic_compare_exchange_strong_explicit(&kf.state[i], &w, (w & ~ST_MASK) | ST_BUSY,
							    memory_order_acquire, memory_order_acquire))
			break;
		/* w changed under us: another thread freed it; report that */
	}
	take_stack(&m->free, caller);
	char *page = data_page(i);
	uintptr_t bad = canary_bad((uintptr_t)page, m->addr);
	if (!bad)
		bad = canary_bad(m->addr + m->size, (uintptr_t)page + PAGE_SIZE);
	if (bad) {
		char bytes[64];
		size_t k = 0;
		for (uintptr_t b = bad; b < bad + 8 && b < (uintptr_t)page + PAGE_SIZE; b++) {
			if (b >= m->addr && b < m->addr + m->size)
				break;
			unsigned char v = *(unsigned char *)b;
			k += v == canary_byte(b) ? fmt_buf(bytes + k, sizeof bytes - k, " .")
						 : fmt_buf(bytes + k, sizeof bytes - k, " 0x%02x", v);
		}
		bool left = bad < m->addr;
		fmt_buf(detail, sizeof detail, "Out-of-bounds write at %p (%luB %s of kfence-#%u, offset %ld, detected at "
			"free): [%s ]", (void *)bad, (unsigned long)(left ? m->addr - bad : bad - (m->addr + m->size) + 1),
			left ? "left" : "right", i, (long)(bad - m->addr), bytes);
		misuse_report("out-of-bounds write", (void *)bad, (int)i, false, caller, detail);
		report_end("out-of-bounds write", (void *)bad, i, true);   /* report_continue: free it still */
	}
	track_free(p, m->size);
	mprotect(page, PAGE_SIZE, PROT_NONE);   /* if it fails (no memory), the page stays open */
	/* a free of its cache, as the allocation was (the cache lives: destroy
	 * refuses while it has pool objects) */
	stat_inc((struct uslab_cache *)m->cache, NULL, counted_as);
	uint64_t seq = atomic_fetch_add_explicit(&kf.free_seq, 1, memory_order_relaxed) + 1;
	atomic_store_explicit(&kf.state[i], seq << 2 | ST_FREE, memory_order_release);
	count(&kf.frees);
	errno = e;
}

size_t kfence_usable(const void *p, const char *what)
{
	uintptr_t a = (uintptr_t)p;
	size_t pg = (a - kf.start) >> PAGE_SHIFT;
	if (!(pg & 1))
		report_fatal("invalid %s at %p (a KFENCE guard page)", what, p);
	unsigned i = (unsigned)((pg - 1) / 2);
	uint64_t w = atomic_load_explicit(&kf.state[i], memory_order_acquire);
	if ((w & ST_MASK) != ST_LIVE)
		report_fatal("invalid %s at %p (freed KFENCE object kfence-#%u)", what, p, i);
	if (a != kf.meta[i].addr)
		report_fatal("invalid %s at %p (not the start of KFENCE object kfence-#%u)", what, p, i);
	return kf.meta[i].size;
}

unsigned long kfence_cache_live_bytes(const struct uslab_cache *root, uint64_t *bytes)
{
	*bytes = 0;
	if (!atomic_load_explicit(&kf.size, memory_order_acquire) || atomic_load_explicit(&kf.allocs, memory_order_relaxed) ==
				atomic_load_explicit(&kf.frees, memory_order_relaxed))
		return 0;
	unsigned long n = 0;
	for (unsigned i = 0; i < kf.nr; i++)
		if ((atomic_load_explicit(&kf.state[i], memory_order_acquire) & ST_MASK) == ST_LIVE &&
		    kf.meta[i].cache == root) {
			n++;
			*bytes += kf.meta[i].size;
		}
	return n;
}

unsigned long kfence_cache_live(const struct uslab_cache *root)
{
	uint64_t bytes;
	return kfence_cache_live_bytes(root, &bytes);
}

void kfence_get_stats(struct kfence_stats *st)
{
	uint64_t allocs = atomic_load_explicit(&kf.allocs, memory_order_relaxed);
	uint64_t frees = atomic_load_explicit(&kf.frees, memory_order_relaxed);
	size_t size = atomic_load_explicit(&kf.size, memory_order_acquire);
	st->interval = atomic_load_explicit(&kf.mapped, memory_order_relaxed) == 3 ? 0 : kfence_interval;
	st->ms = kfence_interval == KFENCE_BY_TIME ? kfence_ms : 0;
	st->slots = size ? kf.nr : 0;
	st->pool_bytes = size ? size + ALIGN_UP(kf.nr * (sizeof(struct kf_meta) + sizeof(uint64_t)) + kf.nr + 1,
						PAGE_SIZE) : 0;
	st->allocs = allocs;
	st->missed = atomic_load_explicit(&kf.missed, memory_order_relaxed);
	st->in_use = allocs > frees ? allocs - frees : 0;
	st->reports = atomic_load_explicit(&kf.reports, memory_order_relaxed);
}
