/*
 * Export of statistics to uslabinfo (USLAB_OPTIONS=export), and the
 * show_stats table at exit. The file format and protocol are described in
 * export.h; this is the writer.
 *
 * Live numbers: export starts a thread. A process that exports is
 * answered at once, as the kernel's slabinfo reads live counters whenever
 * it is run: the uslab thread (bgthread.c; "uslab-export" when it only
 * serves, "uslab-bg" when background_thread also has it run decay passes)
 * sleeps on the futex word `wake` in the export mapping, which a reader
 * wakes after posting its request; it refreshes the snapshot and applies a
 * command within a millisecond or two, whatever the program does: busy on
 * a pool allocator that keeps it off uslab's slow path, asleep, blocked in
 * read(2). Two designs were weighed:
 *  (a) the counters themselves in the shared mapping, summed by uslabinfo.
 *      What a snapshot reads lives in the process and is reached through
 *      its pointers and locks: the event counters are per thread and per
 *      CPU part (cpu_cache, in the per-CPU layer, walked through each
 *      cache's cpu_list), the node's and barns' counts sit under their
 *      locks, the page allocator's free blocks under the page lock, KFENCE's
 *      live objects in its pool. Moving all of it into a file would put the
 *      file's layout into every one of those modules (and rewrite the
 *      per-CPU layer's counters), and readers would still see counts that
 *      are consistent only per word. And -s, -v and --set must run inside
 *      the process anyway (they take its locks and walk its slabs), so a
 *      process that never reaches a slow path would still not take them.
 *  (b) a thread that sleeps until asked. Costs next to nothing while nobody
 *      asks (one futex sleep, a wake-up a second to see whether it is the
 *      last thread: bgthread.c, a 256 KiB stack reserved), answers
 *      reads and commands alike, and keeps the snapshot code where it is.
 * So (b). What it costs and how it is kept safe:
 *  - export off: nothing (no thread, no hook, no file).
 *  - export on: one thread, started at the first safe point after init,
 *    never inside init or the atfork handler (bgthread.c). While it serves
 *    (export_bg_attach), the allocation slow path no longer polls for
 *    requests at all; before it runs (or without it) the slow path does, as
 *    below.
 *  - fork: the child drops the parent's file; its first allocation slow
 *    path makes its own (named by its pid) and restarts its thread, which
 *    then serves the child's file (bg_wake). A child that only execs makes
 *    neither.
 *  - exit: the thread holds no lock while it sleeps and is waited for at
 *    most 100 ms (bgthread.c); the final snapshot is written here.
 *  - a program that must stay single-threaded (it reads
 *    __libc_single_threaded, calls unshare(CLONE_NEWUSER), or counts its
 *    threads): background_thread=0 (or uslab_background_thread(0), which
 *    stops the thread at run time) means no thread; the export then works as
 *    before, served on allocation slow paths only, and uslabinfo says so.
 *
 * The slow path (no serving thread). export_poll() is the slab core's
 * slow-path hook (slab_slow_hook: the core never calls up into the export
 * by name): one relaxed load of the shared `req` word compared with the
 * last value served (`seen`): both lines are only read until a reader asks.
 * Then one thread (the `busy` flag) refreshes the snapshot under
 * cache_mutex, taken with trylock so that a slow path never waits for it
 * (the request stays pending and the next slow path tries again), at most
 * every EXPORT_MIN_MS.
 *
 * Locks: cache_mutex (taken by trylock here, or plainly from the serving
 * thread, uslab_export_refresh() and at exit) comes first in the lock
 * order, so commands may take node and page locks under it (shrink,
 * validate), and the CPU parts' plocks (cpus, which copies each CPU part's
 * counters into the file's CPU table, as the snapshot sums them: pcpu.c's
 * order; the slow-path hook runs before a slow path takes its part). The
 * busy flag is not a lock anyone waits for: a thread that finds it set
 * returns (the serving thread looks again a millisecond later). The hook itself is set without a lock (export_hook_update: a
 * generation counter, so that the fork child handler can call it).
 *
 * Staleness. Readers ask (uslabinfo -p; its listing asks the processes a
 * thread serves), and the serving thread refreshes at every request,
 * ignoring the rate limit. Besides, the snapshot is refreshed after every
 * cache create and destroy (cache_list_hook: at once, waiting for
 * cache_mutex, unless it was refreshed less than max(EXPORT_MIN_MS, ten
 * times what a snapshot costs) ago; then `seen` is set to EXPORT_STALE so
 * that the next request, or the next slow path while nobody serves,
 * refreshes it). So a reader sees the current list of caches unless the
 * process has no serving thread and took no slow path since a burst of
 * creates and destroys (then it sees the list as of the burst's first);
 * the counts are as of the last refresh, and uslabinfo prints the
 * snapshot's age. A list change during a refresh leaves it stale.
 *
 * A process only ever writes its own file (named by its pid). After fork
 * the child drops the parent's mapping and starts its own file on its first
 * slow path; exec and exit drop the flock that marks the file live; a
 * normal exit writes a final snapshot, marks it FINAL and unlinks the file
 * (a reader that holds it open, as `uslabinfo run` does, still reads it).
 *
 * Nothing here allocates from uslab or malloc.
 */
#define _GNU_SOURCE 1   /* mremap */
#include "cpu.h"
#include "observe.h"
#include "debug.h"
#include "export.h"
#include "bgthread.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The export is on in this process (its file exists, or a forked child's
 * will be made at its first slow path). Written at init, in the fork child
 * handler, when a child's file cannot be made, and at exit; seq_cst where
 * export_hook_update() reads it (see there). */
static _Atomic bool export_active;
/* The uslab thread serves the export (export_bg_attach): the slow path
 * need not poll. Written by that thread only (and reset in a fork child). */
static _Atomic bool export_served;
static void export_poll(void);

/* The slow-path hook while a thread waits to start (bgthread.c): its safe
 * point first, then the export's poll. */
static void slow_hook_start(void)
{
	bg_start_deferred();
	if (atomic_load_explicit(&export_active, memory_order_relaxed) &&
	    !atomic_load_explicit(&export_served, memory_order_relaxed))
		export_poll();
}

/* Bumped by every update: an updater whose computed hook may have been
 * overtaken by another's flag change computes again. */
static _Atomic uint64_t hook_gen;

/* slab_slow_hook from the flags (bg_start_pending(), export_active,
 * export_served). Updaters run concurrently (the serving thread attaching,
 * an API call, the deferred start, init, exit) and the fork child handler
 * is one, so there is no lock: each flag is changed (seq_cst) before its
 * changer calls this, which bumps hook_gen, then stores the hook computed
 * from seq_cst loads and returns only if hook_gen did not move meanwhile.
 * The last store in the total order is then by an updater whose final
 * computation came after every flag change whose bump it did not see, and
 * any later change is followed by its own store: so the hook ends up
 * matching the flags. Slow paths load it relaxed: a stale value only
 * delays a poll or a start to a later slow path. */
void export_hook_update(void)
{
	atomic_fetch_add(&hook_gen, 1);
	for (;;) {
		uint64_t g = atomic_load(&hook_gen);
		void (*h)(void) = NULL;
		if (bg_start_pending())
			h = slow_hook_start;
		else if (atomic_load(&export_active) && !atomic_load(&export_served))
			h = export_poll;
		atomic_store(&slab_slow_hook, h);
		if (atomic_load(&hook_gen) == g)
			return;
	}
}

/* Turn the export (and with it the slow-path hook) on or off. */
static void set_active(bool on)
{
	atomic_store(&export_active, on);
	export_hook_update();
}

/* `seen` when the snapshot is out of date with no reader waiting: never a
 * value of `req`, so the next poll serves. */
#define EXPORT_STALE UINT64_MAX

#define EXPORT_INITIAL_RECORDS 32

static struct {
	struct export_header *hdr;   /* the header's mapping (never moves), or NULL */
	struct uslab_cache_info *rec;/* the records' mapping (moves when the file grows) */
	size_t rec_size;             /* bytes of it mapped */
	int fd;                      /* the file, O_CLOEXEC, holding the flock */
	int pid;                     /* the process that owns hdr */
	_Atomic(_Atomic uint64_t *) req_word; /* &hdr->req, or &dummy_req to force a service */
	_Atomic uint64_t dummy_req;  /* != seen: the next poll starts the export (after fork) */
	_Atomic uint64_t seen;       /* the last req served */
	_Atomic uint64_t last_ms;    /* when the snapshot was last refreshed */
	_Atomic bool busy;           /* a thread is serving (one at a time) */
	_Atomic bool restart;        /* forked child: start a file of our own */
	_Atomic uint64_t changes;    /* cache creates and destroys (cache_list_hook) */
	_Atomic uint64_t cost_ns;    /* what the last snapshot took */
	bool atfork_done;
	char path[256];
} exp = { .fd = -1 };

/* ---- small helpers --------------------------------------------------- */

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Read a small /proc file into buf (NUL-terminated); length or -1. */
static ssize_t read_small(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, size - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = 0;
	return n;
}

/* The export directory: $XDG_RUNTIME_DIR if it is a directory of ours that
 * others cannot write, else /dev/shm. */
static const char *export_dir(void)
{
	const char *x = getenv("XDG_RUNTIME_DIR");
	struct stat st;
	if (x && x[0] == '/' && strlen(x) < 180 && !stat(x, &st) && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
	    !(st.st_mode & 022))
		return x;
	if (!stat(EXPORT_SHM_DIR, &st) && S_ISDIR(st.st_mode))
		return EXPORT_SHM_DIR;
	return NULL;
}

/* ---- the snapshot ------------------------------------------------------ */

static size_t records_size(uint32_t capacity)
{
	return (size_t)capacity * sizeof(struct uslab_cache_info);
}

/* Make room for `want` records; false if the file cannot grow. Only the
 * records mapping moves: the header (and the req word every slow path
 * loads) never does. */
static bool grow(uint32_t want)
{
	uint32_t cap = exp.hdr->capacity;
	if (want <= cap)
		return true;
	while (cap < want && cap < EXPORT_MAX_RECORDS)
		cap *= 2;
	if (cap > EXPORT_MAX_RECORDS)
		cap = EXPORT_MAX_RECORDS;
	size_t size = records_size(cap);
	if (ftruncate(exp.fd, (off_t)(exp.hdr->records_offset + size)))
		return false;
	void *m = mremap(exp.rec, exp.rec_size, size, MREMAP_MAYMOVE);
	if (m == MAP_FAILED)
		return false;
	exp.rec = m;
	exp.rec_size = size;
	exp.hdr->capacity = cap;
	return true;
}

/* Write a snapshot of every cache (real caches, then their aliases).
 * cache_mutex held, exp.busy held. */
static void snapshot_locked(void)
{
	uint32_t want = 0;
	for (struct uslab_cache *s = cache_list; s; s = s->next) {
		want++;
		for (struct uslab_cache *a = s->aliases; a; a = a->alias_next)
			want++;
	}
	if (want > exp.hdr->capacity)
		grow(want);
	struct export_header *h = exp.hdr;
	uint64_t s0 = atomic_load_explicit(&h->seq, memory_order_relaxed);
	atomic_store_explicit(&h->seq, s0 + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	struct uslab_cache_info *r = exp.rec;
	uint32_t n = 0, dropped = 0;
	for (struct uslab_cache *s = cache_list; s; s = s->next) {
		if (n < h->capacity)
			stats_fill_info_locked(s, &r[n++]);
		else
			dropped++;
		for (struct uslab_cache *a = s->aliases; a; a = a->alias_next) {
			if (n < h->capacity)
				stats_fill_info_locked(a, &r[n++]);
			else
				dropped++;
		}
	}
	h->nr_records = n;
	h->dropped = dropped;
	h->cpu_backend = !strcmp(uslab_cpu_backend(), "rseq");
	h->proc.version = USLAB_PROCESS_INFO_VERSION;
	uslab_process_get_info(&h->proc);
	h->snap_ns = mono_ns();
	h->snaps++;
	atomic_store_explicit(&h->seq, s0 + 2, memory_order_release);
}

/* ---- commands ------------------------------------------------------------ */

static void cmd_fail(struct export_cmd *c, int err, const char *msg)
{
	c->err = err;
	c->result = -1;
	fmt_buf(c->msg, sizeof c->msg, "%s", msg);
}

/* Is the file still owner-only and ours? Only its owner can have posted. */
static bool file_is_private(void)
{
	struct stat st;
	return !fstat(exp.fd, &st) && S_ISREG(st.st_mode) && st.st_uid == geteuid() && !(st.st_mode & 077);
}

/* Apply one command to cache s (a real cache or an alias). */
static void cmd_apply(struct export_cmd *c, struct uslab_cache *s, const char *key)
{
	switch (c->op) {
	case EXPORT_OP_SET: {
		unsigned long old = 0;
		if (uslab_cache_tune_get(s, key, &old) || cache_tune_set_live(cache_root(s), key, (unsigned long)c->value)) {
			fmt_buf(c->msg, sizeof c->msg, "cache '%s': %s=%llu is out of range or unknown", s->name, key,
				(unsigned long long)c->value);
			c->err = EINVAL;
			c->result = -1;
			return;
		}
		c->result = (int64_t)old;
		break;
	}
	case EXPORT_OP_SHRINK: {   /* uslab_cache_shrink() with cache_mutex held */
		struct uslab_cache *r = cache_root(s);
		mem_take_back_locked(r, true);
		page_release_all();
		c->result += atomic_load_explicit(&r->node.nr_slabs, memory_order_relaxed) != 0;
		break;
	}
	case EXPORT_OP_VALIDATE: {
		long p = uslab_cache_validate(s);
		c->result += p > 0 ? p : 0;
		break;
	}
	}
	c->caches++;
}

/* The cache named `name` (a real cache or an alias), or NULL.
 * cache_mutex held. */
static struct uslab_cache *cache_named(const char *name)
{
	for (struct uslab_cache *s = cache_list; s; s = s->next) {
		if (!strcmp(s->name, name))
			return s;
		for (struct uslab_cache *a = s->aliases; a; a = a->alias_next)
			if (!strcmp(a->name, name))
				return a;
	}
	return NULL;
}

/* pcpu_each_part's callback: one part into the CPU table's totals, and into
 * its rows if its CPU is among the EXPORT_MAX_CPU_ROWS lowest seen so far
 * (rows kept in CPU order: insertion, dropping the highest when full). */
static void cpus_add(void *arg, unsigned cpu, const uint64_t *ev, uint64_t objects)
{
	struct export_cpu_table *t = arg;
	unsigned items = MIN((unsigned)USLAB_NR_STAT_ITEMS, (unsigned)EXPORT_MAX_STATS);
	t->parts++;
	t->total_objects += objects;
	for (unsigned i = 0; i < items; i++)
		t->total_events[i] += ev[i];
	unsigned n = t->rows;
	if (n == EXPORT_MAX_CPU_ROWS) {
		if (cpu > t->row[n - 1].cpu)
			return;
		n--;
	}
	unsigned i = n;
	for (; i > 0 && t->row[i - 1].cpu > cpu; i--)
		t->row[i] = t->row[i - 1];
	struct export_cpu_row *r = &t->row[i];
	memset(r, 0, sizeof *r);
	r->cpu = cpu;
	r->objects = objects;
	for (unsigned k = 0; k < items; k++)
		r->events[k] = ev[k];
	t->rows = n + 1;
}

/* EXPORT_OP_CPUS: the CPU parts of cache `name` into the CPU table, or
 * why it has none. cache_mutex held (the parts' list), command TAKEN (the
 * table is ours). */
static void cmd_cpus(struct export_cmd *c, const char *name)
{
	if (!name[0]) {
		cmd_fail(c, EINVAL, "per-CPU statistics need a cache name");
		return;
	}
	struct uslab_cache *named = cache_named(name);
	if (!named) {
		cmd_fail(c, ENOENT, "");
		fmt_buf(c->msg, sizeof c->msg, "no cache named '%s'", name);
		return;
	}
	struct uslab_cache *s = cache_root(named);
	struct export_cpu_table *t = (struct export_cpu_table *)((char *)exp.hdr + exp.hdr->cpu_offset);
	memset(t, 0, offsetof(struct export_cpu_table, row));
	fmt_buf(t->cache, sizeof t->cache, "%s", s->name);
	t->cpu_mode = cache_cpu_mode(s);   /* (as the records say it) */
	if (!pcpu_g.on)
		t->kind = EXPORT_CPUS_BACKEND;
	else if (s->debug)
		t->kind = EXPORT_CPUS_DEBUG;
	else if (cache_cpu_mode(s) != CPU_SHEAVES)
		t->kind = EXPORT_CPUS_MODE;
	else if (!pcpu_eligible(s))
		t->kind = EXPORT_CPUS_OTHER;
	else
		t->kind = EXPORT_CPUS_CPU;
	if (t->kind == EXPORT_CPUS_CPU)
		pcpu_each_part(s, cpus_add, t);
	c->result = t->rows;
	c->caches = 1;
}

/* Serve a posted command. cache_mutex held (so no cache can be destroyed
 * meanwhile; lock order cache_mutex -> node -> page allows shrink and
 * validate under it). */
static void serve_cmd_locked(void)
{
	struct export_cmd *c = &exp.hdr->cmd;
	uint32_t st = CMD_POSTED;
	if (atomic_load_explicit(&c->state, memory_order_acquire) != CMD_POSTED ||
	    !atomic_compare_exchange_strong_explicit(&c->state, &st, CMD_TAKEN, memory_order_acq_rel,
						     memory_order_acquire))
		return;
	char name[USLAB_NAME_MAX + 1], key[sizeof c->key];
	memcpy(name, c->cache, sizeof name);
	name[USLAB_NAME_MAX] = 0;
	memcpy(key, c->key, sizeof key);
	key[sizeof key - 1] = 0;
	c->err = 0;
	c->result = 0;
	c->caches = 0;
	c->msg[0] = 0;
	if (!file_is_private()) {
		cmd_fail(c, EPERM, "the export file is no longer owned by this user with mode 0600; command refused");
	} else if (c->op == EXPORT_OP_CPUS) {
		cmd_cpus(c, name);
	} else if (c->op != EXPORT_OP_SET && c->op != EXPORT_OP_SHRINK && c->op != EXPORT_OP_VALIDATE) {
		cmd_fail(c, EINVAL, "unknown command");
	} else if (c->op == EXPORT_OP_SET && !name[0]) {
		cmd_fail(c, EINVAL, "a tunable needs a cache name");
	} else {
		for (struct uslab_cache *s = cache_list; s && !c->err; s = s->next) {
			if (!name[0] || !strcmp(s->name, name))
				cmd_apply(c, s, key);
			for (struct uslab_cache *a = s->aliases; a && !c->err; a = a->alias_next)
				if (name[0] && !strcmp(a->name, name))
					cmd_apply(c, a, key);
		}
		if (!c->err && !c->caches)
			fmt_buf(c->msg, sizeof c->msg, "no cache named '%s'", name), c->err = ENOENT, c->result = -1;
	}
	atomic_store_explicit(&c->state, CMD_DONE, memory_order_release);
}

/* ---- starting and serving ------------------------------------------------ */

/* Create (or adopt: a file named by our own pid is stale, or was reserved
 * for us by `uslabinfo run`) the export file and map it. */
static bool export_start(void)
{
	const char *dir = export_dir();
	if (!dir) {
		report_line("export: no $XDG_RUNTIME_DIR of ours and no %s; statistics are not exported", EXPORT_SHM_DIR);
		return false;
	}
	int pid = (int)getpid();
	fmt_buf(exp.path, sizeof exp.path, "%s/" EXPORT_PREFIX "%d" EXPORT_SUFFIX, dir, pid);
	int fd = open(exp.path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 && errno == EEXIST)
		fd = open(exp.path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || st.st_nlink != 1 ||
	    flock(fd, LOCK_SH | LOCK_NB)) {
		report_line("export: cannot use %s (%s); statistics are not exported", exp.path,
			    fd < 0 ? "cannot create it" : "exists and is not ours, or is in use");
		if (fd >= 0)
			close(fd);
		exp.path[0] = 0;
		return false;
	}
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t cpu_off = (sizeof(struct export_header) + 63) / 64 * 64;
	size_t hsize = (cpu_off + sizeof(struct export_cpu_table) + page - 1) / page * page;
	size_t rsize = records_size(EXPORT_INITIAL_RECORDS);
	void *m = MAP_FAILED, *r = MAP_FAILED;
	if (!fchmod(fd, 0600) && !ftruncate(fd, (off_t)(hsize + rsize))) {
		m = mmap(NULL, hsize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		r = mmap(NULL, rsize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)hsize);
	}
	if (m == MAP_FAILED || r == MAP_FAILED) {
		report_line("export: cannot size or map %s; statistics are not exported", exp.path);
		if (m != MAP_FAILED)
			munmap(m, hsize);
		if (r != MAP_FAILED)
			munmap(r, rsize);
		unlink(exp.path);
		close(fd);
		exp.path[0] = 0;
		return false;
	}
	struct export_header *h = m;
	/* Adopted files keep their old contents: clear everything but the
	 * words readers may be using (req, ack, cmd), then describe. (The CPU
	 * table is written only to answer a command: its pages stay untouched
	 * until one asks.) */
	uint64_t req = atomic_load_explicit(&h->req, memory_order_relaxed);
	memset(h->magic, 0, sizeof h->magic);
	h->version = EXPORT_VERSION;
	h->header_size = sizeof *h;
	h->records_offset = (uint32_t)hsize;
	h->record_size = sizeof(struct uslab_cache_info);
	h->info_version = USLAB_CACHE_INFO_VERSION;
	h->proc_size = sizeof(struct uslab_process_info);
	h->nr_stat_items = USLAB_NR_STAT_ITEMS;
	h->cpu_offset = (uint32_t)cpu_off;
	h->cpu_size = sizeof(struct export_cpu_table);
	h->pid = pid;
	h->uid = (uint32_t)geteuid();
	char buf[1024];
	h->starttime = read_small("/proc/self/stat", buf, sizeof buf) > 0 ? export_parse_starttime(buf) : 0;
	memset(h->comm, 0, sizeof h->comm);
	if (read_small("/proc/self/comm", buf, sizeof buf) > 0) {
		size_t n = strcspn(buf, "\n");
		memcpy(h->comm, buf, MIN(n, sizeof h->comm - 1));
	}
	memset(h->stat_names, 0, sizeof h->stat_names);
	for (unsigned i = 0; i < USLAB_NR_STAT_ITEMS && i < EXPORT_MAX_STATS; i++)
		fmt_buf(h->stat_names[i], EXPORT_STAT_NAME, "%s", uslab_stat_name((enum uslab_stat_item)i));
	h->capacity = EXPORT_INITIAL_RECORDS;
	h->nr_records = 0;
	h->dropped = 0;
	h->snaps = 0;
	h->snap_ns = mono_ns();
	h->proc.version = USLAB_PROCESS_INFO_VERSION;
	atomic_store_explicit(&h->bg, 0, memory_order_relaxed);   /* our thread attaches itself */
	atomic_store_explicit(&h->seq, 0, memory_order_relaxed);
	memcpy(h->magic, EXPORT_MAGIC, sizeof h->magic);
	atomic_store_explicit(&h->state, EXPORT_LIVE, memory_order_release);

	exp.hdr = h;
	exp.rec = r;
	exp.rec_size = rsize;
	exp.fd = fd;
	exp.pid = pid;
	atomic_store_explicit(&exp.seen, req, memory_order_relaxed);
	atomic_store_explicit(&exp.req_word, &h->req, memory_order_release);
	return true;
}

/* How to serve: SVC_WAIT waits for cache_mutex (else trylock: a slow path
 * never waits); SVC_FORCE also ignores the rate limit. */
enum { SVC_POLL = 0, SVC_WAIT = 1, SVC_FORCE = 3 };

/* Refresh the snapshot and serve a command. SVC_FORCE: the public
 * refresh, the background thread; SVC_WAIT: a cache list change; SVC_POLL:
 * a slow path. The rate limit: max(EXPORT_MIN_MS, 10 x the last
 * snapshot's cost), so refreshes take at most about a tenth of the time
 * even with many caches; a posted command is served at once. */
static void export_service(int how)
{
	struct export_header *h = exp.hdr;
	if (how != SVC_FORCE && h && !atomic_load_explicit(&exp.restart, memory_order_relaxed)) {
		uint64_t now = os_real_ms();
		uint64_t gap = atomic_load_explicit(&exp.cost_ns, memory_order_relaxed) / 100000;   /* 10x, in ms */
		if (now - atomic_load_explicit(&exp.last_ms, memory_order_relaxed) < MAX(gap, (uint64_t)EXPORT_MIN_MS) &&
		    atomic_load_explicit(&h->cmd.state, memory_order_relaxed) != CMD_POSTED)
			return;
	}
	if (atomic_exchange_explicit(&exp.busy, true, memory_order_acquire))
		return;
	if (atomic_load_explicit(&exp.restart, memory_order_relaxed)) {
		atomic_store_explicit(&exp.restart, false, memory_order_relaxed);
		if (!export_start()) {
			set_active(false);
			goto out;
		}
		bg_wake();   /* a forked child's thread, if it already runs, serves the new file */
	}
	if (!exp.hdr)
		goto out;
	if (how & SVC_WAIT)
		pthread_mutex_lock(&cache_mutex);
	else if (pthread_mutex_trylock(&cache_mutex))
		goto out;   /* busy: the request stays pending for the next slow path */
	uint64_t req = atomic_load_explicit(&exp.hdr->req, memory_order_acquire);
	uint64_t changes = atomic_load_explicit(&exp.changes, memory_order_acquire);
	serve_cmd_locked();
	uint64_t t0 = mono_ns();
	snapshot_locked();
	atomic_store_explicit(&exp.cost_ns, mono_ns() - t0, memory_order_relaxed);
	pthread_mutex_unlock(&cache_mutex);
	atomic_store_explicit(&exp.last_ms, os_real_ms(), memory_order_relaxed);
	/* a cache made or destroyed meanwhile may be missing: stay stale */
	atomic_store_explicit(&exp.seen,
			      atomic_load_explicit(&exp.changes, memory_order_acquire) == changes ? req : EXPORT_STALE,
			      memory_order_relaxed);
	atomic_store_explicit(&exp.hdr->ack, req, memory_order_release);
out:
	atomic_store_explicit(&exp.busy, false, memory_order_release);
}

/* The slow-path hook: nothing due is one relaxed load and a compare. */
static void export_poll(void)
{
	_Atomic uint64_t *w = atomic_load_explicit(&exp.req_word, memory_order_relaxed);
	if (likely(atomic_load_explicit(w, memory_order_relaxed) ==
		   atomic_load_explicit(&exp.seen, memory_order_relaxed)))
		return;
	export_service(SVC_POLL);
}

/* cache_list_hook: a cache was made or destroyed (no lock held). */
static void export_list_changed(void)
{
	if (!atomic_load_explicit(&export_active, memory_order_acquire))
		return;
	atomic_fetch_add_explicit(&exp.changes, 1, memory_order_acq_rel);
	atomic_store_explicit(&exp.seen, EXPORT_STALE, memory_order_relaxed);
	export_service(SVC_WAIT);
}

/* ---- the uslab thread's side (bgthread.c) ------------------------------------ */

static struct export_header *header_of(_Atomic uint64_t *req_word)
{
	return (struct export_header *)((char *)req_word - offsetof(struct export_header, req));
}

bool export_bg_wanted(void)
{
	return atomic_load(&export_active);
}

_Atomic uint32_t *export_bg_word(void)
{
	if (!atomic_load_explicit(&export_active, memory_order_acquire))
		return NULL;
	_Atomic uint64_t *w = atomic_load_explicit(&exp.req_word, memory_order_acquire);
	return w == &exp.dummy_req ? NULL : &header_of(w)->wake;
}

void export_bg_attach(_Atomic uint32_t *word, uint32_t bits)
{
	struct export_header *h = (struct export_header *)((char *)word - offsetof(struct export_header, wake));
	atomic_store_explicit(&h->bg, bits, memory_order_release);
	atomic_store(&export_served, bits != 0);
	export_hook_update();
}

/* A reader's request not yet answered (or a forked child's export not yet
 * started). A snapshot that is only stale (a cache list change within the
 * rate limit) is not the thread's business: a reader's request refreshes
 * it, and the thread would otherwise refresh back to back while another
 * thread makes and destroys caches. */
bool export_bg_pending(void)
{
	if (!atomic_load_explicit(&export_active, memory_order_acquire))
		return false;
	_Atomic uint64_t *w = atomic_load_explicit(&exp.req_word, memory_order_acquire);
	if (w == &exp.dummy_req)
		return atomic_load_explicit(&exp.restart, memory_order_relaxed);
	struct export_header *h = header_of(w);
	return atomic_load_explicit(&h->req, memory_order_relaxed) != atomic_load_explicit(&h->ack, memory_order_acquire);
}

int export_bg_serve(void)
{
	if (!export_bg_pending())
		return EXPORT_BG_IDLE;
	export_service(SVC_FORCE);
	return export_bg_pending() ? EXPORT_BG_AGAIN : EXPORT_BG_SERVED;
}

/* fork: the child must not write the parent's file. Drop it; the child's
 * first slow path starts a file of its own (a child that only execs never
 * makes one). */
static void export_atfork_child(void)
{
	if (!atomic_load_explicit(&export_active, memory_order_relaxed))
		return;
	if (exp.hdr)
		munmap(exp.hdr, exp.hdr->records_offset);
	if (exp.rec)
		munmap(exp.rec, exp.rec_size);
	exp.rec = NULL;
	if (exp.fd >= 0)
		close(exp.fd);
	exp.hdr = NULL;
	exp.fd = -1;
	exp.path[0] = 0;
	atomic_store_explicit(&exp.busy, false, memory_order_relaxed);
	atomic_store(&export_served, false);   /* the child has no thread (bgthread.c's handler updates the hook) */
	atomic_store_explicit(&exp.restart, true, memory_order_relaxed);
	atomic_store_explicit(&exp.dummy_req, 1, memory_order_relaxed);
	atomic_store_explicit(&exp.seen, 0, memory_order_relaxed);
	atomic_store_explicit(&exp.last_ms, 0, memory_order_relaxed);
	atomic_store_explicit(&exp.req_word, &exp.dummy_req, memory_order_relaxed);
}

void export_init(void)
{
	atomic_store_explicit(&exp.req_word, &exp.dummy_req, memory_order_relaxed);
	if (!opt.export_stats)
		return;
	if (!export_start())
		return;
	if (!exp.atfork_done) {
		pthread_atfork(NULL, NULL, export_atfork_child);
		exp.atfork_done = true;
	}
	set_active(true);
	atomic_store_explicit(&cache_list_hook, export_list_changed, memory_order_release);
}

const char *uslab_export_path(void)
{
	return atomic_load_explicit(&export_active, memory_order_acquire) && exp.hdr ? exp.path : NULL;
}

int uslab_export_refresh(void)
{
	cache_init();
	if (!atomic_load_explicit(&export_active, memory_order_acquire)) {
		errno = ENOENT;
		return -1;
	}
	export_service(SVC_FORCE);
	if (!exp.hdr) {
		errno = ENOENT;
		return -1;
	}
	return 0;
}

/* ---- exit ------------------------------------------------------------------ */

/*
 * At exit: the show_stats table, then the export's final snapshot. A
 * destructor rather than atexit(): registering it can never allocate (glibc's
 * atexit may call calloc, which under the malloc family would re-enter the
 * allocator during its own initialisation), and it runs after the program's
 * own atexit handlers, so the numbers include their frees.
 */
__attribute__((destructor)) static void stats_at_exit(void)
{
	if (opt.show_stats)
		uslab_stats_print_fd(2);
	if (!atomic_load_explicit(&export_active, memory_order_acquire) || !exp.hdr || exp.pid != (int)getpid())
		return;
	set_active(false);
	/* Wait (bounded) for a thread that is serving; then serve ourselves. */
	for (int i = 0; i < 1000 && atomic_exchange_explicit(&exp.busy, true, memory_order_acquire); i++) {
		struct timespec ts = { 0, 100000 };
		nanosleep(&ts, NULL);
	}
	struct export_header *h = exp.hdr;
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_nsec += 200 * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	if (!pthread_mutex_timedlock(&cache_mutex, &until)) {
		serve_cmd_locked();
		snapshot_locked();
		pthread_mutex_unlock(&cache_mutex);
	}
	h = exp.hdr;
	/* A command posted from now on is refused. */
	uint32_t st = CMD_POSTED;
	if (atomic_compare_exchange_strong(&h->cmd.state, &st, CMD_TAKEN)) {
		cmd_fail(&h->cmd, ESRCH, "the process is exiting");
		atomic_store_explicit(&h->cmd.state, CMD_DONE, memory_order_release);
	}
	atomic_store_explicit(&h->state, EXPORT_FINAL, memory_order_release);
	atomic_store_explicit(&h->ack, atomic_load(&h->req), memory_order_release);
	/* Unlink only if the path still names our file. */
	struct stat a, b;
	if (!fstat(exp.fd, &a) && !lstat(exp.path, &b) && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
		unlink(exp.path);
	/* The mapping and the descriptor stay until the process is gone:
	 * other threads may still be running. */
}
