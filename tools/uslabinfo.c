/*
 * uslabinfo: the kernel's slabinfo tool (tools/mm/slabinfo.c) for processes
 * that use uslab and run with USLAB_OPTIONS=export.
 *
 *   uslabinfo [options] [-p PID] [NAME-REGEX]
 *   uslabinfo run [options] -- CMD [ARGS...]
 *
 * Without -p: the exporting processes of this user. With -p: that process's
 * caches, as slabinfo shows the kernel's; with --cpus NAME, that cache per
 * CPU, as SLUB's per-CPU sysfs counters (a command the process answers:
 * only it can walk its CPU parts). `run` starts CMD with export on,
 * refreshes its snapshot while it runs, and prints the report when it exits
 * (from the file's final snapshot, which uslabinfo holds open, so the file
 * being removed at exit does not matter). The exit status is CMD's.
 *
 * Live numbers: a process that exports runs a uslab thread that sleeps on
 * a futex in the export file until a reader wakes it, so every process is
 * answered within a millisecond or two, whatever it is doing. Without that
 * thread (background_thread=0, uslab_background_thread(0), or before the
 * process's first allocation slow path) the process answers on its next
 * allocation slow path only, and the header's `bg` says so: then a reader
 * that gets no answer prints how old the snapshot is and why.
 *
 * Reading and controlling are owner-only: the export file is mode 0600 and
 * owned by the process's user; uslabinfo refuses a process or a file of
 * another user, a file with group/other permissions, and a stale file (the
 * exporter is gone: nobody holds its lock, or the pid was reused). Every
 * wait for the process is bounded (--timeout).
 *
 * Exit status: 0 done; 1 the process or its file cannot be used, a command
 * failed or validation found problems; 2 bad usage. `run`: CMD's status.
 */
#define _GNU_SOURCE 1
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <regex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <linux/futex.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "uslab.h"
#include "export.h"

/* ---- options ------------------------------------------------------------ */

static struct {
	int pid;
	bool activity, display_active, sort_size, aliases, report, validate, shrink, zero, bytes, inverted;
	bool totals, slabinfo, json;
	long lines;
	double watch;
	double timeout;
	const char *set;
	const char *cpus;           /* --cpus NAME */
	regex_t re;
	bool have_re;
} o = { .timeout = 2.0, .lines = -1 };

static const char *prog = "uslabinfo";

static void die(int code, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
static void die(int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: ", prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(code);
}

static void warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void warnx(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: ", prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: uslabinfo [options] [-p PID] [NAME-REGEX]\n"
		"       uslabinfo run [options] -- CMD [ARGS...]\n"
		"\n"
		"Shows the uslab caches of a running process (started with USLAB_OPTIONS=export),\n"
		"as the kernel's slabinfo shows /sys/kernel/slab. Without -p: this user's\n"
		"exporting processes.\n"
		"\n"
		"  -p, --pid PID          the process\n"
		"  -A, --activity         activity view (Alloc, Free, %%Fast), most active first\n"
		"  -D, --display-active   activity view, in the chosen order\n"
		"  -S, --Size             sort by size (memory held)\n"
		"  -i, --inverted         reverse the order\n"
		"  -N, --lines K          only the first K caches\n"
		"  -z, --zero             include caches without objects\n"
		"  -B, --Bytes            sizes in bytes\n"
		"  -a, --aliases          show the aliases of merged caches\n"
		"  -r, --report           full report of each matching cache\n"
		"  -T, --Totals           summary of the process\n"
		"  -l, --slabinfo         /proc/slabinfo version 2.1 format\n"
		"  -v, --validate         validate matching caches (in the process; problems go to its stderr)\n"
		"  -s, --shrink           shrink matching caches (in the process)\n"
		"      --set NAME:KEY=N   set a tunable (sheaf_capacity, barn_full, barn_empty, cpu_partial,\n"
		"                         min_partial, order; slab mode: limit, batchcount, sharedfactor)\n"
		"      --set 'NAME LIMIT BATCHCOUNT SHAREDFACTOR'\n"
		"                         /proc/slabinfo's write syntax: the three slab-mode tunables\n"
		"      --cpus NAME        cache NAME per CPU, as SLUB's per-CPU counters: one row per CPU\n"
		"                         with a part (objects held, fast-path pops and pushes, slow paths,\n"
		"                         sheaf refills and flushes, barn gets and puts) and a total\n"
		"      --json             JSON instead of text (every mode)\n"
		"      --watch SECONDS    refresh every SECONDS, like slabtop, until the process exits\n"
		"      --timeout SECONDS  how long to wait for the process to answer (default 2)\n"
		"  -h, --help             this text\n"
		"\n"
		"A process that exports answers at once: its uslab thread (uslab-export, or\n"
		"uslab-bg with background_thread) sleeps until asked. Run with background_thread=0\n"
		"it has no thread and answers on its next allocation slow path only; one that\n"
		"takes none shows its last snapshot (its age and why are printed). Commands it\n"
		"does not take within --timeout are withdrawn.\n");
}

/* ---- time ------------------------------------------------------------------ */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* ---- processes ------------------------------------------------------------ */

static bool read_file(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, size - 1);
	close(fd);
	if (n < 0)
		return false;
	buf[n] = 0;
	return true;
}

static uint64_t proc_starttime(int pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	return read_file(path, buf, sizeof buf) ? export_parse_starttime(buf) : 0;
}

static void proc_comm(int pid, char *out, size_t size)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/comm", pid);
	if (!read_file(path, out, size))
		snprintf(out, size, "?");
	out[strcspn(out, "\n")] = 0;
}

/* Directories where a process of ours may have put its file, best first. */
static int export_dirs(int pid, char dirs[3][PATH_MAX])
{
	int n = 0;
	struct stat st;
	const char *x = getenv("XDG_RUNTIME_DIR");
	if (x && x[0] == '/' && !stat(x, &st) && S_ISDIR(st.st_mode) && st.st_uid == geteuid() && !(st.st_mode & 022))
		snprintf(dirs[n++], PATH_MAX, "%s", x);
	if (pid > 0) {
		/* the process's own XDG_RUNTIME_DIR, if it differs */
		char path[64];
		snprintf(path, sizeof path, "/proc/%d/environ", pid);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			static char env[65536];
			ssize_t len = read(fd, env, sizeof env - 1);
			close(fd);
			for (ssize_t i = 0; len > 0 && i < len; i += (ssize_t)strlen(env + i) + 1) {
				env[len] = 0;
				if (!strncmp(env + i, "XDG_RUNTIME_DIR=", 16) && env[i + 16] == '/' &&
				    (!n || strcmp(dirs[0], env + i + 16))) {
					snprintf(dirs[n++], PATH_MAX, "%s", env + i + 16);
					break;
				}
			}
		}
	}
	snprintf(dirs[n++], PATH_MAX, "%s", EXPORT_SHM_DIR);
	return n;
}

/* Does the process's environment (as it started) turn the export on? */
static bool env_has_export(int pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/environ", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	static char env[65536];
	ssize_t len = read(fd, env, sizeof env - 1);
	close(fd);
	if (len <= 0)
		return false;
	env[len] = 0;
	for (ssize_t i = 0; i < len; i += (ssize_t)strlen(env + i) + 1) {
		if (strncmp(env + i, "USLAB_OPTIONS=", 14))
			continue;
		/* space-separated tokens, as options.c reads them */
		for (const char *p = env + i + 14; *p;) {
			size_t n = strcspn(p, " \t");
			if (n == 6 && !strncmp(p, "export", 6))
				return true;
			p += n;
			p += strspn(p, " \t");
		}
	}
	return false;
}

/* The directory a process started by us will export to (as export.c). */
static const char *child_export_dir(void)
{
	const char *x = getenv("XDG_RUNTIME_DIR");
	struct stat st;
	if (x && x[0] == '/' && strlen(x) < 180 && !stat(x, &st) && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
	    !(st.st_mode & 022))
		return x;
	return EXPORT_SHM_DIR;
}

/* ---- an opened export file ------------------------------------------------- */

struct target {
	int pid;
	int fd;
	char path[PATH_MAX];
	struct export_header *hdr;  /* the whole file, mapped */
	size_t map_size;
	/* the last snapshot copied */
	struct export_header h;
	struct uslab_cache_info *rec;
	uint32_t n;
};

static bool map_file(struct target *t)
{
	struct stat st;
	if (fstat(t->fd, &st))
		return false;
	size_t size = (size_t)st.st_size;
	if (t->hdr && size == t->map_size)
		return true;
	if (size < sizeof(struct export_header))
		return false;
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, t->fd, 0);
	if (m == MAP_FAILED)
		return false;
	if (t->hdr)
		munmap(t->hdr, t->map_size);
	t->hdr = m;
	t->map_size = size;
	return true;
}

/* Is the layout one this tool understands? */
static const char *check_layout(const struct export_header *h)
{
	if (memcmp(h->magic, EXPORT_MAGIC, sizeof h->magic))
		return "not a uslab export file (or one being created)";
	if (h->version != EXPORT_VERSION || h->header_size != sizeof(struct export_header) ||
	    h->record_size != sizeof(struct uslab_cache_info) || h->info_version != USLAB_CACHE_INFO_VERSION ||
	    h->proc_size != sizeof(struct uslab_process_info) || h->nr_stat_items > EXPORT_MAX_STATS ||
	    h->cpu_size != sizeof(struct export_cpu_table))
		return "written by another version of uslab (layout differs from this uslabinfo)";
	return NULL;
}

/* Does a process hold the file's lock (is the exporter alive)? */
static bool exporter_alive(int fd)
{
	if (!flock(fd, LOCK_EX | LOCK_NB)) {
		flock(fd, LOCK_UN);
		return false;
	}
	return errno == EWOULDBLOCK;
}

/* Copy a consistent snapshot (sequence lock, bounded retries). */
static bool take_snapshot(struct target *t)
{
	for (int tries = 0; tries < 2000; tries++) {
		if (!map_file(t))
			return false;
		struct export_header *h = t->hdr;
		uint64_t s1 = atomic_load_explicit(&h->seq, memory_order_acquire);
		if (s1 & 1) {
			sleep_ms(1);
			continue;
		}
		uint32_t n = h->nr_records;
		size_t off = h->records_offset;
		if (n > EXPORT_MAX_RECORDS || off < sizeof *h)
			return false;
		if (off + (size_t)n * sizeof(struct uslab_cache_info) > t->map_size) {
			t->map_size = 0;   /* the file grew: map it again */
			sleep_ms(1);
			continue;
		}
		struct uslab_cache_info *r = realloc(t->rec, (n ? n : 1) * sizeof *r);
		if (!r)
			die(1, "out of memory");
		t->rec = r;
		memcpy(&t->h, h, sizeof t->h);
		memcpy(r, (char *)h + off, (size_t)n * sizeof *r);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&h->seq, memory_order_relaxed) == s1) {
			t->n = n;
			return true;
		}
	}
	return false;
}

/* After a request (req incremented): wake the process's background thread,
 * if it has one, sleeping on the shared futex word `wake`. */
static void wake_process(struct export_header *h)
{
	atomic_fetch_add(&h->wake, 1);
	syscall(SYS_futex, (uint32_t *)&h->wake, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* Ask for a fresh snapshot and wait (bounded) for it. Returns false on
 * timeout: the snapshot is then the last one the process wrote. */
static bool request_refresh(struct target *t)
{
	struct export_header *h = t->hdr;
	if (atomic_load_explicit(&h->state, memory_order_acquire) != EXPORT_LIVE)
		return true;
	uint64_t r = atomic_fetch_add(&h->req, 1) + 1;
	wake_process(h);
	uint64_t end = now_ns() + (uint64_t)(o.timeout * 1e9);
	while ((int64_t)(atomic_load_explicit(&h->ack, memory_order_acquire) - r) < 0) {
		if (now_ns() > end || atomic_load(&h->state) != EXPORT_LIVE || !exporter_alive(t->fd))
			return atomic_load(&h->state) == EXPORT_FINAL;
		sleep_ms(1);
	}
	return true;
}

/* pid has no export file (`note` is said after the reason): one line and exit. */
static __attribute__((noreturn)) void die_no_file(int pid, const char *comm, const char *note)
{
	if (env_has_export(pid))
		die(1, "pid %d (%s) runs with USLAB_OPTIONS=export but has no export file%s: it has not initialised uslab "
		    "(the program must load uslab: link it with libuslab, or preload libuslab-malloc.so, as uslab-run "
		    "does), it is a forked child that has not allocated since the fork, or it could not make the file "
		    "(see its standard error)", pid, comm, note);
	die(1, "pid %d (%s) exports no statistics%s: start it with USLAB_OPTIONS=export, or under 'uslabinfo run --'",
	    pid, comm, note);
}

/* Open and check the export file of pid; dies with one line on any problem. */
static void open_target(struct target *t, int pid)
{
	memset(t, 0, sizeof *t);
	t->pid = pid;
	t->fd = -1;
	char ppath[64], comm[64];
	struct stat st;
	snprintf(ppath, sizeof ppath, "/proc/%d", pid);
	if (stat(ppath, &st))
		die(1, "no process with pid %d", pid);
	proc_comm(pid, comm, sizeof comm);
	if (st.st_uid != geteuid())
		die(1, "pid %d (%s) belongs to another user (uid %u); only its owner can read or control its caches",
		    pid, comm, (unsigned)st.st_uid);
	char dirs[3][PATH_MAX];
	int nd = export_dirs(pid, dirs), found = -1;
	for (int i = 0; i < nd && found < 0; i++) {
		snprintf(t->path, sizeof t->path, "%s/" EXPORT_PREFIX "%d" EXPORT_SUFFIX, dirs[i], pid);
		if (!lstat(t->path, &st))
			found = i;
	}
	if (found < 0)
		die_no_file(pid, comm, "");
	if (!S_ISREG(st.st_mode))
		die(1, "%s is not a regular file; refused", t->path);
	if (st.st_uid != geteuid())
		die(1, "%s belongs to another user (uid %u); refused", t->path, (unsigned)st.st_uid);
	if (st.st_mode & 077)
		die(1, "%s can be read or written by other users (mode %03o); refused", t->path,
		    (unsigned)(st.st_mode & 0777));
	t->fd = open(t->path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (t->fd < 0)
		die(1, "cannot open %s: %s", t->path, strerror(errno));
	if (fstat(t->fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077))
		die(1, "%s changed while being opened; refused", t->path);
	if (!map_file(t))
		die(1, "%s: too short or cannot be mapped: not a uslab export file", t->path);
	const char *bad = check_layout(t->hdr);
	if (bad && !exporter_alive(t->fd)) {
		/* No process holds it: left by one that is gone (of another
		 * version of uslab, or killed while it made the file), unless an
		 * exporter is between its open and its flock: look again. */
		sleep_ms(20);
		if (!exporter_alive(t->fd) && check_layout(t->hdr)) {
			unlink(t->path);
			die_no_file(pid, comm, " (a stale file of a process that had this pid before was removed)");
		}
		bad = check_layout(t->hdr);
	}
	if (bad)
		die(1, "%s: %s", t->path, bad);
	if (t->hdr->pid != pid)
		die(1, "%s names pid %d, not %d; refused", t->path, t->hdr->pid, pid);
	bool alive = exporter_alive(t->fd);
	uint64_t st_now = proc_starttime(pid);
	if (!alive || (t->hdr->starttime && st_now && st_now != t->hdr->starttime)) {
		unlink(t->path);
		die(1, "stale export file %s: %s; removed", t->path,
		    t->hdr->starttime && st_now != t->hdr->starttime
			    ? "pid was reused by another process"
			    : "the process that wrote it is gone (exited, crashed or exec'd)");
	}
}

static void close_target(struct target *t)
{
	if (t->hdr)
		munmap(t->hdr, t->map_size);
	if (t->fd >= 0)
		close(t->fd);
	free(t->rec);
	t->hdr = NULL;
	t->fd = -1;
	t->rec = NULL;
}

/* ---- commands -------------------------------------------------------------- */

static const char *op_name(uint32_t op)
{
	return op == EXPORT_OP_SET ? "set" : op == EXPORT_OP_SHRINK ? "shrink" : op == EXPORT_OP_VALIDATE ? "validate"
	       : op == EXPORT_OP_CPUS ? "cpus" : "?";
}

/* Post one command and wait (bounded) for its result in *res (and, if
 * `table` is not NULL and the command succeeded, a copy of the CPU table:
 * ours until we empty the slot). Returns 0, or -1 after printing why it was
 * not applied. */
static int post_cmd(struct target *t, uint32_t op, const char *cache, const char *key, uint64_t value,
		    struct export_cmd *res, struct export_cpu_table *table)
{
	struct export_header *h = t->hdr;
	struct export_cmd *c = &h->cmd;
	uint64_t end = now_ns() + (uint64_t)(o.timeout * 1e9);
	/* claim the mailbox */
	for (;;) {
		uint32_t st = atomic_load(&c->state);
		if (st == CMD_EMPTY) {
			if (atomic_compare_exchange_strong(&c->state, &st, CMD_CLAIMED))
				break;
			continue;
		}
		int owner = atomic_load(&c->owner);
		if ((st == CMD_DONE || st == CMD_CLAIMED) && owner > 0 && kill(owner, 0) && errno == ESRCH) {
			/* left behind by a uslabinfo that died */
			if (atomic_compare_exchange_strong(&c->state, &st, CMD_CLAIMED))
				break;
			continue;
		}
		if (now_ns() > end) {
			warnx("pid %d: the control mailbox is in use by uslabinfo pid %d; try again", t->pid, owner);
			return -1;
		}
		sleep_ms(2);
	}
	atomic_store(&c->owner, (int32_t)getpid());
	c->op = op;
	memset(c->cache, 0, sizeof c->cache);
	snprintf(c->cache, sizeof c->cache, "%s", cache ? cache : "");
	memset(c->key, 0, sizeof c->key);
	snprintf(c->key, sizeof c->key, "%s", key ? key : "");
	c->value = value;
	c->err = 0;
	c->result = 0;
	c->caches = 0;
	c->msg[0] = 0;
	atomic_store_explicit(&c->state, CMD_POSTED, memory_order_release);
	atomic_fetch_add(&h->req, 1);
	wake_process(h);
	end = now_ns() + (uint64_t)(o.timeout * 1e9);
	uint64_t hard_end = end + (uint64_t)(5 * o.timeout * 1e9);   /* a taken command may run a while (validate) */
	for (;;) {
		uint32_t st = atomic_load_explicit(&c->state, memory_order_acquire);
		if (st == CMD_DONE) {
			memcpy(res, c, sizeof *res);
			res->msg[sizeof res->msg - 1] = 0;
			int rc = 0;
			if (table && !res->err) {
				size_t off = h->cpu_offset;
				if (off < sizeof *h || off + sizeof *table > t->map_size) {
					warnx("pid %d: the export file has no CPU table", t->pid);
					rc = -1;
				} else {
					memcpy(table, (char *)h + off, sizeof *table);
				}
			}
			atomic_store(&c->state, CMD_EMPTY);
			return rc;
		}
		bool alive = exporter_alive(t->fd);
		uint64_t now = now_ns();
		if (st == CMD_POSTED && (now > end || !alive)) {
			if (atomic_compare_exchange_strong(&c->state, &st, CMD_EMPTY)) {
				if (!alive)
					warnx("pid %d exited before applying %s; nothing was changed", t->pid, op_name(op));
				else
					warnx("pid %d did not take the %s command within %.1f s (it takes commands on its "
					      "allocation slow path, and took none); command withdrawn, nothing was changed",
					      t->pid, op_name(op), o.timeout);
				return -1;
			}
			continue;
		}
		if (st == CMD_TAKEN && (now > hard_end || !alive)) {
			warnx("pid %d took the %s command but did not finish it within %.1f s; result unknown", t->pid,
			      op_name(op), o.timeout * 6);
			return -1;
		}
		sleep_ms(1);
	}
}

#define SET_MAX 3   /* settings one --set makes: the slabinfo write syntax's three */
static void parse_set(const char *arg, char *name, char (*keys)[16], uint64_t *values, unsigned *n);

/* /proc/slabinfo's write syntax, "NAME LIMIT BATCHCOUNT SHAREDFACTOR": the
 * kernel's rules (limit and batchcount at least 1, batchcount at most
 * limit), then three settings in an order that is valid whatever the
 * cache had (limit first: a limit below the old batchcount lowers it). */
static void parse_slabinfo_write(const char *arg, char *name, char (*keys)[16], uint64_t *values, unsigned *n)
{
	char nm[USLAB_NAME_MAX + 2];
	unsigned long long l, b, sf;
	char tail;
	int got = sscanf(arg, "%64s %llu %llu %llu %c", nm, &l, &b, &sf, &tail);
	const char *why = NULL;
	if (got != 4)
		why = "expected NAME LIMIT BATCHCOUNT SHAREDFACTOR";
	else if (strlen(nm) > USLAB_NAME_MAX)
		why = "the cache name must have 1 to 63 characters";
	else if (l < 1 || b < 1 || b > l)
		why = "LIMIT and BATCHCOUNT must be at least 1 and BATCHCOUNT at most LIMIT";
	if (why)
		die(2, "--set '%s': %s (e.g. --set 'kmalloc-64 120 60 8')", arg, why);
	strcpy(name, nm);
	static const char *const k3[] = { "limit", "batchcount", "sharedfactor" };
	const unsigned long long v3[] = { l, b, sf };
	for (unsigned i = 0; i < 3; i++) {
		strcpy(keys[i], k3[i]);
		values[i] = v3[i];
	}
	*n = 3;
}

/* NAME:KEY=VALUE, or the slabinfo write syntax */
static void parse_set(const char *arg, char *name, char (*keys)[16], uint64_t *values, unsigned *n)
{
	if (strchr(arg, ' ')) {
		parse_slabinfo_write(arg, name, keys, values, n);
		return;
	}
	char *key = keys[0];
	uint64_t *value = &values[0];
	*n = 1;
	const char *colon = strrchr(arg, ':'), *eq = colon ? strchr(colon, '=') : NULL;
	const char *why = NULL;
	if (!colon || !eq)
		why = "expected NAME:KEY=VALUE";
	else if (colon == arg || colon - arg > USLAB_NAME_MAX)
		why = "the cache name must have 1 to 63 characters";
	else if (eq == colon + 1 || eq - colon - 1 >= 16)
		why = "missing or overlong KEY";
	else if (!eq[1] || strspn(eq + 1, "0123456789") != strlen(eq + 1) || strlen(eq + 1) > 19)
		why = "VALUE must be a decimal number";
	if (!why) {
		memcpy(name, arg, (size_t)(colon - arg));
		name[colon - arg] = 0;
		memcpy(key, colon + 1, (size_t)(eq - colon - 1));
		key[eq - colon - 1] = 0;
		static const char *const keys[] = { "sheaf_capacity", "barn_full", "barn_empty", "cpu_partial",
						     "min_partial", "order", "limit", "batchcount", "sharedfactor" };
		bool known = false;
		for (unsigned i = 0; i < sizeof keys / sizeof keys[0]; i++)
			known |= !strcmp(key, keys[i]);
		if (!known)
			why = "KEY must be sheaf_capacity, barn_full, barn_empty, cpu_partial, min_partial, order, limit, "
			      "batchcount or sharedfactor";
		*value = strtoull(eq + 1, NULL, 10);
	}
	if (why)
		die(2, "--set '%s': %s (e.g. --set my_cache:cpu_partial=30)", arg, why);
}

/* ---- derived numbers --------------------------------------------------------- */

static uint64_t ev(const struct target *t, const struct uslab_cache_info *c, const char *name)
{
	for (unsigned i = 0; i < t->h.nr_stat_items && i < USLAB_NR_STAT_ITEMS; i++)
		if (!strcmp(t->h.stat_names[i], name))
			return c->events[i];
	return 0;
}

/* The records' totals (struct uslab_cache_info version 4, which the
 * layout check requires): every allocation and free through the cache,
 * single, bulk or any path, and the fast paths' share, the same in every
 * per-CPU mode. */
static uint64_t allocs(const struct target *t, const struct uslab_cache_info *c)
{
	(void)t;
	return c->allocs;
}
static uint64_t frees(const struct target *t, const struct uslab_cache_info *c)
{
	(void)t;
	return c->frees;
}
static uint64_t alloc_fast(const struct target *t, const struct uslab_cache_info *c)
{
	(void)t;
	return c->allocs_fast;
}
static uint64_t free_fast(const struct target *t, const struct uslab_cache_info *c)
{
	(void)t;
	return c->frees_fast;
}

/* slabinfo's store_size() */
static char *size_str(char *buf, size_t n, uint64_t v)
{
	if (o.bytes || v <= 1000) {
		snprintf(buf, n, "%" PRIu64, v);
		return buf;
	}
	uint64_t div = v > 1000000000ULL ? 100000000ULL : v > 1000000ULL ? 100000ULL : 100ULL;
	char unit = v > 1000000000ULL ? 'G' : v > 1000000ULL ? 'M' : 'K';
	v /= div;
	snprintf(buf, n, "%" PRIu64 ".%" PRIu64 "%c", v / 10, v % 10, unit);
	return buf;
}

static char *flag_str(char *buf, const struct uslab_cache_info *c)
{
	char *p = buf;
	if (c->aliases)
		*p++ = '*';
	if (c->flags & USLAB_HWCACHE_ALIGN)
		*p++ = 'A';
	if (c->flags & USLAB_POISON)
		*p++ = 'P';
	if (c->flags & USLAB_RED_ZONE)
		*p++ = 'Z';
	if (c->flags & USLAB_CONSISTENCY_CHECKS)
		*p++ = 'F';
	if (c->flags & USLAB_STORE_USER)
		*p++ = 'U';
	if (c->flags & USLAB_TRACE)
		*p++ = 'T';
	*p = 0;
	return buf;
}

/* ---- selection and order ------------------------------------------------------- */

static const struct target *sort_t;

static int cmp_caches(const void *a, const void *b)
{
	const struct uslab_cache_info *x = *(const struct uslab_cache_info *const *)a;
	const struct uslab_cache_info *y = *(const struct uslab_cache_info *const *)b;
	int r;
	if (o.sort_size) {
		r = x->slab_bytes < y->slab_bytes ? 1 : x->slab_bytes > y->slab_bytes ? -1 : 0;
	} else if (o.activity) {
		uint64_t ax = allocs(sort_t, x) + frees(sort_t, x), ay = allocs(sort_t, y) + frees(sort_t, y);
		r = ax < ay ? 1 : ax > ay ? -1 : 0;
	} else {
		r = 0;
	}
	if (!r)
		r = strcmp(x->name, y->name);
	return o.inverted ? -r : r;
}

/* Real caches that match the regex (and have objects unless -z); sorted. */
static size_t select_caches(const struct target *t, const struct uslab_cache_info **out, bool all)
{
	size_t n = 0;
	for (uint32_t i = 0; i < t->n; i++) {
		const struct uslab_cache_info *c = &t->rec[i];
		if (c->alias_of[0])
			continue;
		if (o.have_re && regexec(&o.re, c->name, 0, NULL, 0))
			continue;
		if (!all && !o.zero && !c->active_objects && !o.report)
			continue;
		out[n++] = c;
	}
	sort_t = t;
	qsort(out, n, sizeof *out, cmp_caches);
	if (o.lines >= 0 && (size_t)o.lines < n)
		n = (size_t)o.lines;
	return n;
}

/* ---- text output --------------------------------------------------------------- */

static void print_header_line(const struct target *t)
{
	uint64_t now = now_ns();
	double age = t->h.snap_ns && now > t->h.snap_ns ? (double)(now - t->h.snap_ns) / 1e9 : 0;
	uint32_t st = t->h.state;
	/* cpu_backend: whether per-CPU parts belong to CPUs (rseq) or threads. */
	printf("# pid %d (%s): %u caches, %s, snapshot %.2f s old, per-CPU parts on %s%s\n", t->h.pid, t->h.comm,
	       t->n, st == EXPORT_FINAL ? "exited" : st == EXPORT_LIVE ? "running" : "not started", age,
	       t->h.cpu_backend ? "CPUs (rseq)" : "threads", t->h.dropped ? " (some caches did not fit the file)" : "");
}

/* Why the snapshot is old. */
static void stale_note(const struct target *t)
{
	uint64_t now = now_ns();
	double age = t->h.snap_ns && now > t->h.snap_ns ? (double)(now - t->h.snap_ns) / 1e9 : 0;
	fflush(stdout);
	if (atomic_load(&t->h.bg) & EXPORT_BG_SERVE)
		warnx("pid %d: snapshot %.1f s old: its uslab thread did not answer within %.1f s "
		      "(the process may be stopped, or its allocator locks held that long)", t->pid, age, o.timeout);
	else
		warnx("pid %d: snapshot %.1f s old: the process has no uslab thread to answer (it runs with "
		      "background_thread=0, called uslab_background_thread(0), or has not allocated since it started "
		      "or forked), so it refreshes the snapshot on its allocation slow path only, and took none "
		      "within %.1f s", t->pid, age, o.timeout);
}

static void print_table(const struct target *t)
{
	const struct uslab_cache_info **v = calloc(t->n + 1, sizeof *v);
	size_t n = select_caches(t, v, false);
	char space[32], dist[64], flg[16];
	if (o.activity || o.display_active)
		printf("Name                   Objects      Alloc       Free   %%Fast Fallb O CmpX\n");
	else
		printf("Name                   Objects Objsize           Space Slabs/Part/Cpu  O/S O %%Fr %%Ef Flg\n");
	for (size_t i = 0; i < n; i++) {
		const struct uslab_cache_info *c = v[i];
		if (o.activity || o.display_active) {
			uint64_t a = allocs(t, c), f = frees(t, c);
			printf("%-21s %8" PRIu64 " %10" PRIu64 " %10" PRIu64 " %3" PRIu64 " %3" PRIu64 " %5" PRIu64
			       " %1u %4" PRIu64 "\n",
			       c->name, c->active_objects, a, f, a ? alloc_fast(t, c) * 100 / a : 0,
			       f ? free_fast(t, c) * 100 / f : 0, ev(t, c, "ORDER_FALLBACK"), c->order,
			       ev(t, c, "CMPXCHG_DOUBLE_FAIL"));
			continue;
		}
		snprintf(dist, sizeof dist, "%" PRIu64 "/%" PRIu64 "/%" PRIu64, c->slabs, c->partial_slabs, c->cpu_slabs);
		printf("%-21s %8" PRIu64 " %7zu %15s %14s %4u %1u %3" PRIu64 " %3" PRIu64 " %s\n", c->name,
		       c->active_objects, c->object_size, size_str(space, sizeof space, c->slab_bytes), dist,
		       c->objects_per_slab, c->order, c->slabs ? c->partial_slabs * 100 / c->slabs : 100,
		       c->slab_bytes ? c->active_objects * c->object_size * 100 / c->slab_bytes : 100, flag_str(flg, c));
	}
	free(v);
}

static void print_aliases(const struct target *t)
{
	for (uint32_t i = 0; i < t->n; i++) {
		const struct uslab_cache_info *c = &t->rec[i];
		if (c->alias_of[0] || !c->aliases)
			continue;
		if (o.have_re && regexec(&o.re, c->name, 0, NULL, 0))
			continue;
		printf("%-21s <-", c->name);
		for (uint32_t j = 0; j < t->n; j++)
			if (!strcmp(t->rec[j].alias_of, c->name))
				printf(" %s", t->rec[j].name);
		printf("\n");
	}
}

static void print_slabinfo(const struct target *t)
{
	printf("slabinfo - version: 2.1\n");
	printf("# name            <active_objs> <num_objs> <objsize> <objperslab> <pagesperslab>"
	       " : tunables <limit> <batchcount> <sharedfactor>"
	       " : slabdata <active_slabs> <num_slabs> <sharedavail>\n");
	for (uint32_t i = 0; i < t->n; i++) {
		const struct uslab_cache_info *c = &t->rec[i];
		if (c->alias_of[0] || (o.have_re && regexec(&o.re, c->name, 0, NULL, 0)))
			continue;
		char name[USLAB_NAME_MAX + 1];
		snprintf(name, sizeof name, "%s", c->name);
		for (char *p = name; *p; p++)
			if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
				*p = '_';
		/* the kernel's cache_show(): SLUB reports no tunables and every
		 * slab as active; a cache in slab mode, as SLAB: its tunables,
		 * the slabs not on the free list as active, the shared array's
		 * objects */
		bool slab = c->cpu_mode == USLAB_CPU_SLAB;
		uint64_t free_slabs = slab ? c->free_slabs : 0;
		printf("%-17s %6lu %6lu %6u %4u %4d : tunables %4u %4u %4u : slabdata %6lu %6lu %6lu\n", name,
		       (unsigned long)(c->active_objects < c->total_objects ? c->active_objects : c->total_objects),
		       (unsigned long)c->total_objects, (unsigned)c->slab_object_size, c->objects_per_slab, 1 << c->order,
		       slab ? c->limit : 0U, slab ? c->batchcount : 0U, slab ? c->sharedfactor : 0U,
		       (unsigned long)(c->slabs > free_slabs ? c->slabs - free_slabs : 0), (unsigned long)c->slabs,
		       slab ? (unsigned long)c->barn_objects : 0UL);
	}
}

static void print_totals(const struct target *t)
{
	char a[32], b[32], c[32], d[32];
	const struct uslab_process_info *p = &t->h.proc;
	uint64_t objs = 0, slabs = 0, bytes = 0, used = 0, caches = 0;
	for (uint32_t i = 0; i < t->n; i++) {
		const struct uslab_cache_info *r = &t->rec[i];
		if (r->alias_of[0])
			continue;
		caches++;
		objs += r->active_objects;
		slabs += r->slabs;
		bytes += r->slab_bytes;
		used += r->active_objects * r->object_size;
	}
	printf("Slabcache Totals\n----------------\n");
	printf("Caches   : %6" PRIu64 "   Slabs   : %8" PRIu64 "   Objects : %10" PRIu64 "\n", caches, slabs, objs);
	printf("Memory used: %s   # Loss   : %s   MRatio:%3" PRIu64 "%%\n", size_str(a, sizeof a, bytes),
	       size_str(b, sizeof b, bytes - (used < bytes ? used : bytes)), bytes ? (bytes - (used < bytes ? used : bytes)) * 100 / bytes : 0);
	printf("Process: mapped %s in %" PRIu64 " segments, resident %s, in use %s, not yet returned %s\n",
	       size_str(a, sizeof a, p->mapped_bytes), p->segments, size_str(b, sizeof b, p->rss_bytes),
	       size_str(c, sizeof c, p->used_bytes), size_str(d, sizeof d, p->dirty_bytes));
	printf("Free page blocks by order:");
	for (int i = 0; i < 10; i++)
		printf(" %" PRIu64, p->free_blocks[i]);
	printf("\n");
	if (p->kfence_interval) {
		if (p->kfence_ms)
			printf("KFENCE: one sample every %u ms", p->kfence_ms);
		else
			printf("KFENCE: 1 in %u sampled", p->kfence_interval);
		printf(": %" PRIu64 " in the pool (%" PRIu64 " now, of %u; %s mapped), %" PRIu64 " missed, %" PRIu64
		       " reports\n", p->kfence_allocs, p->kfence_in_use, p->kfence_slots,
		       size_str(a, sizeof a, p->kfence_pool_bytes), p->kfence_missed, p->kfence_reports);
	} else
		printf("KFENCE: off\n");
}

static void print_report(const struct target *t, const struct uslab_cache_info *c)
{
	char a[32], b[32];
	uint64_t slab_size = (uint64_t)4096 << c->order;
	uint64_t used = c->active_objects * c->object_size;
	printf("\nSlabcache: %-20s  Aliases: %2u Order : %2u Objects: %" PRIu64 "\n", c->name, c->aliases, c->order,
	       c->active_objects);
	if (c->has_ctor)
		printf("** constructor\n");
	if (c->flags & USLAB_HWCACHE_ALIGN)
		printf("** Hardware cacheline aligned\n");
	printf("\nSizes (bytes)     Slabs              Debug                Memory\n");
	printf("------------------------------------------------------------------------\n");
	printf("Object : %7zu  Total  : %7" PRIu64 "   Sanity Checks : %s  Total: %7s\n", c->object_size, c->slabs,
	       c->flags & USLAB_CONSISTENCY_CHECKS ? "On " : "Off", size_str(a, sizeof a, c->slab_bytes));
	printf("SlabObj: %7zu  Full   : %7" PRIu64 "   Redzoning     : %s  Used : %7s\n", c->slab_object_size,
	       c->slabs > c->partial_slabs + c->cpu_slabs ? c->slabs - c->partial_slabs - c->cpu_slabs : 0,
	       c->flags & USLAB_RED_ZONE ? "On " : "Off", size_str(b, sizeof b, used));
	printf("SlabSiz: %7" PRIu64 "  Partial: %7" PRIu64 "   Poisoning     : %s  Loss : %7" PRIu64 "\n", slab_size,
	       c->partial_slabs, c->flags & USLAB_POISON ? "On " : "Off",
	       c->slab_bytes > used ? c->slab_bytes - used : 0);
	printf("Loss   : %7zu  CpuSlab: %7" PRIu64 "   Tracking      : %s\n", c->slab_object_size - c->object_size,
	       c->cpu_slabs, c->flags & USLAB_STORE_USER ? "On " : "Off");
	printf("Align  : %7zu  Objects: %7u   Tracing       : %s\n", c->align, c->objects_per_slab,
	       c->flags & USLAB_TRACE ? "On " : "Off");
	if (c->cpu_mode == USLAB_CPU_SLAB) {   /* the kernel's SLAB: its own tunables and lists */
		printf("\nTunables: limit %u  batchcount %u  sharedfactor %u (slab mode)  order %u (min %u)\n", c->limit,
		       c->batchcount, c->sharedfactor, c->order, c->min_order);
		printf("Arrays  : %" PRIu64 " objects in %u threads' arrays, shared array: %" PRIu64 " batches (%" PRIu64
		       " objects); free slabs %" PRIu64 "\n",
		       c->sheaf_objects, c->cpu_parts, c->barn_full, c->barn_objects, c->free_slabs);
	} else {
		printf("\nTunables: sheaf_capacity %u%s  barn_full %u  barn_empty %u  cpu_partial %u  min_partial %u  "
		       "order %u (min %u)\n",
		       c->sheaf_capacity, c->sheaf_capacity ? "" : " (classic mode)", c->barn_full_max, c->barn_empty_max,
		       c->cpu_partial, c->min_partial, c->order, c->min_order);
		/* (a sheaves cache's parts are the CPUs' where the process runs
		 * the rseq backend, else threads': the header line says which) */
		printf("Sheaves : %" PRIu64 " objects in %u %s' sheaves, barn: %" PRIu64 " full (%" PRIu64
		       " objects) + %" PRIu64 " empty\n",
		       c->sheaf_objects, c->cpu_parts, t->h.cpu_backend && c->sheaf_capacity ? "CPU parts" : "threads",
		       c->barn_full, c->barn_objects, c->barn_empty);
	}
	uint64_t al = allocs(t, c), fr = frees(t, c);
	printf("\nSlab Perf Counter       Alloc     Free %%Al %%Fr\n");
	printf("--------------------------------------------------\n");
	printf("Fastpath             %8" PRIu64 " %8" PRIu64 " %3" PRIu64 " %3" PRIu64 "  (sheaf, CPU free list or queue)\n",
	       alloc_fast(t, c),
	       free_fast(t, c), al ? alloc_fast(t, c) * 100 / al : 0, fr ? free_fast(t, c) * 100 / fr : 0);
	printf("Slowpath             %8" PRIu64 " %8" PRIu64 " %3" PRIu64 " %3" PRIu64 "  (slow paths and bulk calls)\n",
	       al - alloc_fast(t, c), fr - free_fast(t, c), al ? (al - alloc_fast(t, c)) * 100 / al : 0,
	       fr ? (fr - free_fast(t, c)) * 100 / fr : 0);
	printf("Total                %8" PRIu64 " %8" PRIu64 "\n", al, fr);
	printf("\nEvents:\n");
	for (unsigned i = 0; i < t->h.nr_stat_items && i < USLAB_NR_STAT_ITEMS; i++)
		printf("  %-24s %12" PRIu64 "\n", t->h.stat_names[i], c->events[i]);
}

/* ---- JSON ------------------------------------------------------------------------- */

static void json_str(const char *s)
{
	putchar('"');
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if (*p < 0x20 || *p == 0x7f)
			printf("\\u%04x", *p);
		else
			putchar(*p);
	}
	putchar('"');
}

static void json_cache(const struct target *t, const struct uslab_cache_info *c)
{
	printf("{\"name\":");
	json_str(c->name);
	if (c->alias_of[0]) {
		printf(",\"alias_of\":");
		json_str(c->alias_of);
		printf(",\"object_size\":%zu}", c->object_size);
		return;
	}
	uint64_t a = allocs(t, c), f = frees(t, c);
	printf(",\"object_size\":%zu,\"slab_object_size\":%zu,\"align\":%zu,\"order\":%u,\"min_order\":%u,"
	       "\"objects_per_slab\":%u,\"cpu_partial\":%u,\"min_partial\":%u,\"sheaf_capacity\":%u,"
	       "\"barn_full_max\":%u,\"barn_empty_max\":%u,\"cpu_mode\":%u,\"limit\":%u,\"batchcount\":%u,"
	       "\"sharedfactor\":%u,\"free_slabs\":%" PRIu64 ",\"cpu_parts\":%u,\"sheaf_objects\":%" PRIu64
	       ",\"barn_full\":%" PRIu64 ",\"barn_empty\":%" PRIu64 ",\"barn_objects\":%" PRIu64 ",\"aliases\":%u,"
	       "\"flags\":%lu,\"ctor\":%s,\"slabs\":%" PRIu64 ",\"partial_slabs\":%" PRIu64 ",\"cpu_slabs\":%" PRIu64
	       ",\"total_objects\":%" PRIu64 ",\"active_objects\":%" PRIu64 ",\"slab_bytes\":%" PRIu64
	       ",\"allocs\":%" PRIu64 ",\"frees\":%" PRIu64 ",\"alloc_fast_pct\":%" PRIu64 ",\"free_fast_pct\":%" PRIu64
	       ",\"events\":{",
	       c->object_size, c->slab_object_size, c->align, c->order, c->min_order, c->objects_per_slab,
	       c->cpu_partial, c->min_partial, c->sheaf_capacity, c->barn_full_max, c->barn_empty_max, c->cpu_mode,
	       c->limit, c->batchcount, c->sharedfactor, c->free_slabs, c->cpu_parts,
	       c->sheaf_objects, c->barn_full, c->barn_empty, c->barn_objects, c->aliases, c->flags,
	       c->has_ctor ? "true" : "false",
	       c->slabs, c->partial_slabs, c->cpu_slabs, c->total_objects, c->active_objects, c->slab_bytes, a, f,
	       a ? alloc_fast(t, c) * 100 / a : 0, f ? free_fast(t, c) * 100 / f : 0);
	for (unsigned i = 0; i < t->h.nr_stat_items && i < USLAB_NR_STAT_ITEMS; i++) {
		printf("%s", i ? "," : "");
		json_str(t->h.stat_names[i]);
		printf(":%" PRIu64, c->events[i]);
	}
	printf("}}");
}

static void print_json(const struct target *t, bool fresh)
{
	const struct uslab_process_info *p = &t->h.proc;
	uint64_t now = now_ns();
	uint32_t st = t->h.state;
	printf("{\"pid\":%d,\"comm\":", t->h.pid);
	json_str(t->h.comm);
	uint32_t bg = atomic_load(&t->h.bg);
	printf(",\"state\":\"%s\",\"fresh\":%s,\"snapshot_age_ms\":%" PRIu64 ",\"serving_thread\":%s,"
	       "\"background_thread\":%s,\"cpu_backend\":\"%s\",\"dropped\":%u,",
	       st == EXPORT_FINAL ? "exited" : st == EXPORT_LIVE ? "running" : "not_started", fresh ? "true" : "false",
	       t->h.snap_ns && now > t->h.snap_ns ? (now - t->h.snap_ns) / 1000000 : 0,
	       bg & EXPORT_BG_SERVE ? "true" : "false", bg & EXPORT_BG_DECAY ? "true" : "false",
	       t->h.cpu_backend ? "rseq" : "thread", t->h.dropped);
	printf("\"process\":{\"segments\":%" PRIu64 ",\"mapped_bytes\":%" PRIu64 ",\"used_bytes\":%" PRIu64
	       ",\"dirty_bytes\":%" PRIu64 ",\"rss_bytes\":%" PRIu64 ",\"free_blocks\":[",
	       p->segments, p->mapped_bytes, p->used_bytes, p->dirty_bytes, p->rss_bytes);
	for (int i = 0; i < 10; i++)
		printf("%s%" PRIu64, i ? "," : "", p->free_blocks[i]);
	printf("],\"kfence\":{\"interval\":%u,\"ms\":%u,\"pool_bytes\":%" PRIu64 ",\"slots\":%u,\"allocs\":%" PRIu64
	       ",\"missed\":%" PRIu64 ",\"in_use\":%" PRIu64 ",\"reports\":%" PRIu64 "}},\"caches\":[",
	       p->kfence_interval, p->kfence_ms, p->kfence_pool_bytes, p->kfence_slots, p->kfence_allocs,
	       p->kfence_missed, p->kfence_in_use, p->kfence_reports);
	const struct uslab_cache_info **v = calloc(t->n + 1, sizeof *v);
	size_t n = select_caches(t, v, true);
	for (size_t i = 0; i < n; i++) {
		printf("%s", i ? "," : "");
		json_cache(t, v[i]);
	}
	free(v);
	printf("],\"aliases\":[");
	bool first = true;
	for (uint32_t i = 0; i < t->n; i++) {
		if (!t->rec[i].alias_of[0])
			continue;
		printf("%s", first ? "" : ",");
		json_cache(t, &t->rec[i]);
		first = false;
	}
	printf("]}\n");
}

/* ---- per CPU (--cpus) ------------------------------------------------------------------ */

/* The counters a CPU part keeps (pcpu.c and sheaf.c count them per part),
 * as the text columns show them; JSON has every event. */
static const struct {
	const char *col, *stat;
} cpu_cols[] = {
	{ "AllocPCS", "ALLOC_PCS" },     { "FreePCS", "FREE_PCS" },         { "AllocSlow", "ALLOC_SLOWPATH" },
	{ "FreeSlow", "FREE_SLOWPATH" }, { "Refill", "SHEAF_REFILL" },      { "Flush", "SHEAF_FLUSH" },
	{ "BarnGet", "BARN_GET" },       { "GetFail", "BARN_GET_FAIL" },    { "BarnPut", "BARN_PUT" },
	{ "PutFail", "BARN_PUT_FAIL" },
};

static const char *mode_name(uint32_t m)
{
	static const char *const names[] = { "classic", "sheaves", "home", "slqb", "slab" };
	return m < sizeof names / sizeof names[0] ? names[m] : "unknown";
}

/* events[] of the stat named `name` (by the file's stat_names), or 0. */
static uint64_t ev_of(const struct target *t, const uint64_t *events, const char *name)
{
	for (unsigned i = 0; i < t->hdr->nr_stat_items && i < EXPORT_MAX_STATS; i++)
		if (!strncmp(t->hdr->stat_names[i], name, EXPORT_STAT_NAME))
			return events[i];
	return 0;
}

/* Why the table has no rows: one line (without the cache's name), or
 * NULL when it has rows. */
static const char *cpus_why(const struct export_cpu_table *tab, char *buf, size_t size)
{
	switch (tab->kind) {
	case EXPORT_CPUS_CPU:
		if (tab->rows)
			return NULL;
		return "no CPU has a part of it yet (no allocation or free has run on it); no per-CPU statistics";
	case EXPORT_CPUS_BACKEND:
		return "parts are threads', not CPUs': the process runs the \"thread\" backend (cpu_backend=tls, or "
		       "no rseq; see uslab_cpu_backend(3)); no per-CPU statistics";
	case EXPORT_CPUS_MODE:
		snprintf(buf, size, "parts are threads', not CPUs': the cache runs in %s mode, and only sheaves mode "
			 "keeps parts of CPUs; no per-CPU statistics", mode_name(tab->cpu_mode));
		return buf;
	case EXPORT_CPUS_DEBUG:
		return "no CPU parts: a debugged cache takes the slow path for every operation; no per-CPU statistics";
	default:
		return "parts are threads', not CPUs': an internal cache, or one beyond the per-CPU backend's cache "
		       "slots; no per-CPU statistics";
	}
}

static void print_cpus(const struct target *t, const struct export_cpu_table *tab, const char *comm)
{
	char why[256], alias[USLAB_NAME_MAX + 32] = "";
	bool rseq = tab->kind != EXPORT_CPUS_BACKEND;
	if (strcmp(tab->cache, o.cpus))
		snprintf(alias, sizeof alias, "alias of %s, ", tab->cache);
	const char *no = cpus_why(tab, why, sizeof why);
	printf("# pid %d (%s): cache %s (%s%s mode), CPU backend %s", t->pid, comm, o.cpus, alias,
	       mode_name(tab->cpu_mode), rseq ? "rseq" : "thread");
	if (tab->kind == EXPORT_CPUS_CPU)
		printf(": %u part%s of CPUs", tab->parts, tab->parts == 1 ? "" : "s");
	printf("\n");
	if (no) {
		printf("cache %s: %s\n", o.cpus, no);
		return;
	}
	printf("  CPU  Objects");
	for (size_t k = 0; k < sizeof cpu_cols / sizeof cpu_cols[0]; k++)
		printf(" %9s", cpu_cols[k].col);
	printf("\n");
	for (uint32_t i = 0; i < tab->rows; i++) {
		const struct export_cpu_row *r = &tab->row[i];
		printf("%5u %8" PRIu64, r->cpu, r->objects);
		for (size_t k = 0; k < sizeof cpu_cols / sizeof cpu_cols[0]; k++)
			printf(" %9" PRIu64, ev_of(t, r->events, cpu_cols[k].stat));
		printf("\n");
	}
	printf("Total %8" PRIu64, tab->total_objects);
	for (size_t k = 0; k < sizeof cpu_cols / sizeof cpu_cols[0]; k++)
		printf(" %9" PRIu64, ev_of(t, tab->total_events, cpu_cols[k].stat));
	printf("\n");
	if (tab->parts > tab->rows)
		printf("# %u part%s of CPUs above %u left out of the rows (the total counts them)\n",
		       tab->parts - tab->rows, tab->parts - tab->rows == 1 ? "" : "s", tab->row[tab->rows - 1].cpu);
}

static void json_events(const struct target *t, const uint64_t *events)
{
	printf("{");
	for (unsigned i = 0; i < t->hdr->nr_stat_items && i < EXPORT_MAX_STATS; i++) {
		char name[EXPORT_STAT_NAME + 1];
		memcpy(name, t->hdr->stat_names[i], EXPORT_STAT_NAME);
		name[EXPORT_STAT_NAME] = 0;
		printf("%s", i ? "," : "");
		json_str(name);
		printf(":%" PRIu64, events[i]);
	}
	printf("}");
}

static void print_cpus_json(const struct target *t, const struct export_cpu_table *tab, const char *comm)
{
	char why[256];
	bool per_cpu = tab->kind == EXPORT_CPUS_CPU;
	const char *reason = per_cpu ? NULL
			     : tab->kind == EXPORT_CPUS_BACKEND ? "backend"
			     : tab->kind == EXPORT_CPUS_MODE    ? "mode"
			     : tab->kind == EXPORT_CPUS_DEBUG   ? "debug"
								: "other";
	printf("{\"pid\":%d,\"comm\":", t->pid);
	json_str(comm);
	printf(",\"cache\":");
	json_str(o.cpus);
	if (strcmp(tab->cache, o.cpus)) {
		printf(",\"alias_of\":");
		json_str(tab->cache);
	}
	/* (every kind but BACKEND means the process runs the rseq backend) */
	printf(",\"cpu_backend\":\"%s\",\"cpu_mode\":%u,\"per_cpu\":%s,\"reason\":",
	       tab->kind != EXPORT_CPUS_BACKEND ? "rseq" : "thread", tab->cpu_mode, per_cpu ? "true" : "false");
	if (reason)
		printf("\"%s\"", reason);
	else
		printf("null");
	const char *no = cpus_why(tab, why, sizeof why);
	printf(",\"message\":");
	if (no)
		json_str(no);
	else
		printf("null");
	printf(",\"parts\":%u,\"rows_left_out\":%u,\"cpus\":[", tab->parts, tab->parts - tab->rows);
	for (uint32_t i = 0; i < tab->rows; i++) {
		const struct export_cpu_row *r = &tab->row[i];
		printf("%s{\"cpu\":%u,\"objects\":%" PRIu64 ",\"events\":", i ? "," : "", r->cpu, r->objects);
		json_events(t, r->events);
		printf("}");
	}
	printf("],\"total\":");
	if (per_cpu) {
		printf("{\"objects\":%" PRIu64 ",\"events\":", tab->total_objects);
		json_events(t, tab->total_events);
		printf("}");
	} else {
		printf("null");
	}
	printf("}\n");
}

/* --cpus NAME: the cache's CPU parts. Only the process can walk them (they
 * are its memory, under its locks), so this is a command: its answer is
 * the CPU table. 0, or 1 if it was not answered or there is no such
 * cache. */
static int cpus_view(struct target *t)
{
	static struct export_cpu_table tab;   /* (135 KiB: not on the stack) */
	struct export_cmd r;
	if (post_cmd(t, EXPORT_OP_CPUS, o.cpus, "", 0, &r, &tab))
		return 1;
	if (r.err) {
		warnx("pid %d: --cpus %s: %s", t->pid, o.cpus, r.msg);
		return 1;
	}
	tab.cache[USLAB_NAME_MAX] = 0;
	if (tab.rows > EXPORT_MAX_CPU_ROWS)
		tab.rows = EXPORT_MAX_CPU_ROWS;
	if (tab.parts < tab.rows)
		tab.parts = tab.rows;
	char comm[sizeof t->hdr->comm];
	memcpy(comm, t->hdr->comm, sizeof comm);
	comm[sizeof comm - 1] = 0;
	if (o.json)
		print_cpus_json(t, &tab, comm);
	else
		print_cpus(t, &tab, comm);
	return 0;
}

/* ---- views -------------------------------------------------------------------------- */

static void show(struct target *t, bool fresh)
{
	if (!fresh && (o.json || o.slabinfo))
		stale_note(t);   /* stderr: stdout stays parseable */
	if (o.json) {
		print_json(t, fresh);
		return;
	}
	if (o.slabinfo) {
		print_slabinfo(t);
		return;
	}
	print_header_line(t);
	if (!fresh)
		stale_note(t);
	if (o.report) {
		const struct uslab_cache_info **v = calloc(t->n + 1, sizeof *v);
		size_t n = select_caches(t, v, true);
		if (!n)
			warnx("no cache matches");
		for (size_t i = 0; i < n; i++)
			print_report(t, v[i]);
		free(v);
		return;
	}
	if (o.totals)
		print_totals(t);
	if (o.aliases) {
		print_aliases(t);
		return;
	}
	if (!o.totals)
		print_table(t);
}

static int do_commands(struct target *t)
{
	int rc = 0;
	struct export_cmd r;
	const char *name = NULL;
	char namebuf[USLAB_NAME_MAX + 1] = "";
	if (o.set) {
		char keys[SET_MAX][16];
		uint64_t values[SET_MAX];
		unsigned nset;
		parse_set(o.set, namebuf, keys, values, &nset);
		for (unsigned i = 0; i < nset; i++) {
			const char *key = keys[i];
			uint64_t value = values[i];
			if (post_cmd(t, EXPORT_OP_SET, namebuf, key, value, &r, NULL))
				return 1;
			if (r.err) {
				warnx("pid %d: --set %s: %s", t->pid, o.set, r.msg);
				return 1;
			}
			if (o.json)
				printf("{\"pid\":%d,\"command\":\"set\",\"cache\":\"%s\",\"key\":\"%s\",\"old\":%" PRId64
				       ",\"new\":%" PRIu64 ",\"caches\":%u}\n",
				       t->pid, namebuf, key, r.result, value, r.caches);
			else
				printf("pid %d: %s: %s %" PRId64 " -> %" PRIu64 "\n", t->pid, namebuf, key, r.result,
				       value);
		}
	}
	if (o.validate || o.shrink) {
		/* a regex selects caches by name: one command per cache */
		if (!take_snapshot(t))
			die(1, "pid %d: cannot read a consistent snapshot", t->pid);
		const struct uslab_cache_info **v = calloc(t->n + 1, sizeof *v);
		bool save_zero = o.zero;
		o.zero = true;
		size_t n = o.have_re ? select_caches(t, v, true) : 0;
		o.zero = save_zero;
		for (int pass = 0; pass < 2; pass++) {
			uint32_t op = pass == 0 ? EXPORT_OP_SHRINK : EXPORT_OP_VALIDATE;
			if ((pass == 0 && !o.shrink) || (pass == 1 && !o.validate))
				continue;
			uint64_t total = 0, caches = 0;
			for (size_t i = 0; i < (o.have_re ? n : 1); i++) {
				name = o.have_re ? v[i]->name : "";
				if (post_cmd(t, op, name, "", 0, &r, NULL)) {
					free(v);
					return 1;
				}
				if (r.err) {
					warnx("pid %d: %s: %s", t->pid, op_name(op), r.msg);
					rc = 1;
					continue;
				}
				total += (uint64_t)r.result;
				caches += r.caches;
			}
			if (o.json)
				printf("{\"pid\":%d,\"command\":\"%s\",\"caches\":%" PRIu64 ",\"%s\":%" PRIu64 "}\n", t->pid,
				       op_name(op), caches, op == EXPORT_OP_VALIDATE ? "problems" : "caches_with_slabs", total);
			else if (op == EXPORT_OP_VALIDATE)
				printf("pid %d: validated %" PRIu64 " cache%s: %" PRIu64 " problem%s%s\n", t->pid, caches,
				       caches == 1 ? "" : "s", total, total == 1 ? "" : "s",
				       total ? " (reported on the process's stderr)" : "");
			else
				printf("pid %d: shrank %" PRIu64 " cache%s (%" PRIu64 " still hold slabs)\n", t->pid, caches,
				       caches == 1 ? "" : "s", total);
			if (op == EXPORT_OP_VALIDATE && total)
				rc = 1;
		}
		free(v);
	}
	return rc;
}

static volatile sig_atomic_t stop;
static void on_signal(int sig) { stop = sig; }

static int report_pid(int pid)
{
	struct target t;
	open_target(&t, pid);
	int rc = 0;
	if (o.set || o.validate || o.shrink) {
		rc = do_commands(&t);
		close_target(&t);
		return rc;
	}
	if (o.watch > 0) {
		signal(SIGINT, on_signal);
		signal(SIGTERM, on_signal);
		while (!stop) {
			if (o.cpus) {   /* a command each time: the process must be there to answer */
				if (atomic_load(&t.hdr->state) != EXPORT_LIVE || !exporter_alive(t.fd)) {
					if (!o.json)
						printf("pid %d has exited\n", pid);
					break;
				}
				if (!o.json)
					printf("\033[H\033[2J");
				if (cpus_view(&t)) {
					rc = 1;
					break;
				}
				fflush(stdout);
				for (int i = 0; i < (int)(o.watch * 10) && !stop; i++)
					sleep_ms(100);
				continue;
			}
			bool fresh = request_refresh(&t);
			if (!take_snapshot(&t))
				die(1, "pid %d: cannot read a consistent snapshot", pid);
			if (!o.json)
				printf("\033[H\033[2J");
			show(&t, fresh);
			fflush(stdout);
			if (t.h.state != EXPORT_LIVE || !exporter_alive(t.fd)) {
				if (!o.json)
					printf("pid %d has exited\n", pid);
				break;
			}
			for (int i = 0; i < (int)(o.watch * 10) && !stop; i++)
				sleep_ms(100);
		}
		close_target(&t);
		return rc;
	}
	if (o.cpus) {
		rc = cpus_view(&t);
		close_target(&t);
		return rc;
	}
	bool fresh = request_refresh(&t);
	if (!take_snapshot(&t))
		die(1, "pid %d: cannot read a consistent snapshot (the process may have died while writing it)", pid);
	show(&t, fresh);
	close_target(&t);
	return rc;
}

/* ---- listing ------------------------------------------------------------------------ */

/* One line of the listing. */
struct listed {
	int pid;
	char path[PATH_MAX + 64];
	const char *state;
	int fd;                     /* open while we wait for its answer */
	struct export_header *map;  /* its header, mapped to post a request, or NULL */
	uint64_t req;               /* the request posted */
};

/* Read a file's header; its state for the listing. */
static const char *listed_state(int fd, int pid, struct export_header *h)
{
	memset(h, 0, sizeof *h);
	ssize_t got = pread(fd, h, sizeof *h, 0);
	h->comm[sizeof h->comm - 1] = 0;
	if (got != (ssize_t)sizeof *h || check_layout(h))
		return "invalid";
	uint64_t stt = proc_starttime(pid);
	if (!exporter_alive(fd) || (h->starttime && stt != h->starttime))
		return "stale";
	return h->state == EXPORT_LIVE ? "running" : h->state == EXPORT_FINAL ? "exited" : "starting";
}

/* This user's exporting processes. Those whose uslab thread serves are
 * asked for a fresh snapshot first (all at once, then at most half a
 * second's wait in all), so that the cache counts are current; the others
 * show their last snapshot's. */
static int list_exporters(void)
{
	char dirs[3][PATH_MAX];
	int nd = export_dirs(0, dirs), shown = 0;
	struct listed *v = NULL;
	size_t n = 0, cap = 0;
	for (int d = 0; d < nd; d++) {
		DIR *dir = opendir(dirs[d]);
		if (!dir)
			continue;
		struct dirent *e;
		while ((e = readdir(dir))) {
			int pid;
			char tail[16];
			if (sscanf(e->d_name, EXPORT_PREFIX "%d%15s", &pid, tail) != 2 || strcmp(tail, EXPORT_SUFFIX))
				continue;
			if (n == cap) {
				cap = cap ? 2 * cap : 16;
				v = realloc(v, cap * sizeof *v);
				if (!v)
					die(1, "out of memory");
			}
			struct listed *l = &v[n];
			memset(l, 0, sizeof *l);
			l->pid = pid;
			l->fd = -1;
			snprintf(l->path, sizeof l->path, "%s/%s", dirs[d], e->d_name);
			struct stat st;
			if (lstat(l->path, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid())
				continue;   /* other users' files are none of our business */
			l->fd = open(l->path, (st.st_mode & 077 ? O_RDONLY : O_RDWR) | O_NOFOLLOW | O_CLOEXEC);
			if (l->fd < 0)
				continue;
			struct export_header h;
			l->state = listed_state(l->fd, pid, &h);
			n++;
			if (strcmp(l->state, "running") || !(h.bg & EXPORT_BG_SERVE) || (st.st_mode & 077))
				continue;
			void *m = mmap(NULL, sizeof h, PROT_READ | PROT_WRITE, MAP_SHARED, l->fd, 0);
			if (m == MAP_FAILED)
				continue;
			l->map = m;
			l->req = atomic_fetch_add(&l->map->req, 1) + 1;
			wake_process(l->map);
		}
		closedir(dir);
	}
	uint64_t end = now_ns() + (uint64_t)((o.timeout < 0.5 ? o.timeout : 0.5) * 1e9);
	for (size_t i = 0; i < n; i++)
		while (v[i].map && (int64_t)(atomic_load_explicit(&v[i].map->ack, memory_order_acquire) - v[i].req) < 0 &&
		       atomic_load(&v[i].map->state) == EXPORT_LIVE && now_ns() < end)
			sleep_ms(1);
	if (!o.json)
		printf("%7s %-16s %6s %-8s %s\n", "PID", "COMMAND", "CACHES", "STATE", "FILE");
	else
		printf("[");
	for (size_t i = 0; i < n; i++) {
		struct listed *l = &v[i];
		struct export_header h;
		l->state = listed_state(l->fd, l->pid, &h);
		if (l->map)
			munmap(l->map, sizeof h);
		close(l->fd);
		if (o.json) {
			printf("%s{\"pid\":%d,\"comm\":", shown ? "," : "", l->pid);
			json_str(h.comm);
			printf(",\"caches\":%u,\"state\":\"%s\",\"path\":", h.nr_records, l->state);
			json_str(l->path);
			printf("}");
		} else {
			printf("%7d %-16s %6u %-8s %s\n", l->pid, h.comm, h.nr_records, l->state, l->path);
		}
		shown++;
	}
	free(v);
	if (o.json)
		printf("]\n");
	else if (!shown)
		printf("(no process of this user exports uslab statistics; run one with USLAB_OPTIONS=export)\n");
	return 0;
}

/* ---- run -- CMD ------------------------------------------------------------------------ */

static int run_cmd(char **argv)
{
	int go[2], status_pipe[2];
	if (pipe2(go, O_CLOEXEC) || pipe2(status_pipe, O_CLOEXEC))
		die(1, "pipe: %s", strerror(errno));
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		die(1, "fork: %s", strerror(errno));
	if (pid == 0) {
		char c;
		close(go[1]);
		close(status_pipe[0]);
		if (read(go[0], &c, 1) != 1)
			_exit(127);
		const char *old = getenv("USLAB_OPTIONS");
		char *opts = malloc((old ? strlen(old) : 0) + 16);
		if (opts) {
			sprintf(opts, "%s%sexport", old ? old : "", old && *old ? " " : "");
			setenv("USLAB_OPTIONS", opts, 1);
		}
		execvp(argv[0], argv);
		int e = errno;
		if (write(status_pipe[1], &e, sizeof e) < 0)
			_exit(127);
		_exit(127);
	}
	close(go[0]);
	close(status_pipe[1]);
	/* Reserve the child's file before it starts, and keep it open: the
	 * child adopts it (it is named by its pid) and we read its final
	 * snapshot after it has exited and removed the name. */
	struct target t;
	memset(&t, 0, sizeof t);
	t.pid = pid;
	snprintf(t.path, sizeof t.path, "%s/" EXPORT_PREFIX "%d" EXPORT_SUFFIX, child_export_dir(), (int)pid);
	t.fd = open(t.path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (t.fd < 0 && errno == EEXIST) {
		struct stat st;
		int fd = open(t.path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
		if (fd >= 0 && !fstat(fd, &st) && st.st_uid == geteuid() && !exporter_alive(fd)) {
			unlink(t.path);   /* stale, ours: a previous process with this pid */
			close(fd);
			t.fd = open(t.path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		} else if (fd >= 0) {
			close(fd);
		}
	}
	bool have_file = false;
	if (t.fd >= 0) {
		struct export_header h;
		memset(&h, 0, sizeof h);
		memcpy(h.magic, EXPORT_MAGIC, sizeof h.magic);
		h.version = EXPORT_VERSION;
		h.header_size = sizeof h;
		h.record_size = sizeof(struct uslab_cache_info);
		h.info_version = USLAB_CACHE_INFO_VERSION;
		h.proc_size = sizeof(struct uslab_process_info);
		h.cpu_size = sizeof(struct export_cpu_table);   /* (cpu_offset 0: the child places the table) */
		h.records_offset = sizeof h;
		h.pid = pid;
		h.uid = geteuid();
		atomic_store(&h.state, EXPORT_RESERVED);
		have_file = pwrite(t.fd, &h, sizeof h, 0) == (ssize_t)sizeof h && map_file(&t);
	}
	if (!have_file)
		warnx("cannot reserve %s (%s); the report may be missing", t.path, strerror(errno));
	signal(SIGINT, SIG_IGN);   /* as system(): the child gets the terminal's signals, we report after */
	signal(SIGQUIT, SIG_IGN);
	if (write(go[1], "g", 1) != 1)
		die(1, "cannot start the child");
	close(go[1]);
	int e = 0;
	if (read(status_pipe[0], &e, sizeof e) == (ssize_t)sizeof e) {
		waitpid(pid, NULL, 0);
		if (have_file)
			unlink(t.path);
		die(127, "cannot run %s: %s", argv[0], strerror(e));
	}
	close(status_pipe[0]);
	/* Refresh the snapshot now and then, so that a crash still leaves a
	 * recent one. */
	int status = 0;
	uint64_t next = now_ns() + 200000000ULL;
	for (;;) {
		pid_t w = waitpid(pid, &status, WNOHANG);
		if (w == pid)
			break;
		if (w < 0 && errno != EINTR)
			die(1, "waitpid: %s", strerror(errno));
		if (have_file && now_ns() > next && map_file(&t) &&
		    atomic_load(&t.hdr->state) == EXPORT_LIVE) {
			atomic_fetch_add(&t.hdr->req, 1);
			wake_process(t.hdr);
			next = now_ns() + 200000000ULL;
		}
		sleep_ms(10);
	}
	int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	if (have_file) {
		struct stat a, b;
		if (!fstat(t.fd, &a) && !lstat(t.path, &b) && a.st_ino == b.st_ino && a.st_dev == b.st_dev)
			unlink(t.path);
		if (!map_file(&t) || check_layout(t.hdr))
			warnx("%s exited without a readable export", argv[0]);
		else if (atomic_load(&t.hdr->state) == EXPORT_RESERVED) {
			const char *pre = getenv("LD_PRELOAD");
			warnx("%s exported no statistics: it never initialised uslab. The program must load uslab: "
			      "link it with libuslab (or libuslab-malloc), or preload the malloc family "
			      "(uslab-run, or LD_PRELOAD=.../libuslab-malloc.so; %s%s%s); a program that loads it but "
			      "exits before its first allocation from uslab exports nothing either",
			      argv[0], pre && *pre ? "LD_PRELOAD is '" : "LD_PRELOAD is not set",
			      pre && *pre ? pre : "", pre && *pre ? "'" : "");
		}
		else {
			if (atomic_load(&t.hdr->state) != EXPORT_FINAL)
				warnx("%s died before its final snapshot (%s %d); showing its last snapshot", argv[0],
				      WIFSIGNALED(status) ? "signal" : "status",
				      WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
			if (take_snapshot(&t))
				show(&t, true);
			else
				warnx("cannot read a consistent snapshot of %s", argv[0]);
		}
	}
	close_target(&t);
	return rc;
}

/* ---- main ------------------------------------------------------------------------------- */

static double parse_seconds(const char *opt, const char *s)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v > 0) || v > 86400)
		die(2, "%s '%s': expected a number of seconds (0 < N <= 86400)", opt, s);
	return v;
}

int main(int argc, char **argv)
{
	bool run = argc > 1 && !strcmp(argv[1], "run");
	if (run) {
		argv[1] = argv[0];
		argv++;
		argc--;
	}
	enum { OPT_SET = 256, OPT_JSON, OPT_WATCH, OPT_TIMEOUT, OPT_CPUS };
	static const struct option longs[] = {
		{ "pid", required_argument, NULL, 'p' },      { "activity", no_argument, NULL, 'A' },
		{ "display-active", no_argument, NULL, 'D' }, { "Size", no_argument, NULL, 'S' },
		{ "aliases", no_argument, NULL, 'a' },        { "report", no_argument, NULL, 'r' },
		{ "validate", no_argument, NULL, 'v' },       { "shrink", no_argument, NULL, 's' },
		{ "zero", no_argument, NULL, 'z' },           { "Bytes", no_argument, NULL, 'B' },
		{ "inverted", no_argument, NULL, 'i' },       { "lines", required_argument, NULL, 'N' },
		{ "Totals", no_argument, NULL, 'T' },         { "slabinfo", no_argument, NULL, 'l' },
		{ "set", required_argument, NULL, OPT_SET },  { "json", no_argument, NULL, OPT_JSON },
		{ "watch", required_argument, NULL, OPT_WATCH }, { "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "cpus", required_argument, NULL, OPT_CPUS }, { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;
	while ((ch = getopt_long(argc, argv, run ? "+ADSarzBiN:Tlh" : "p:ADSarvszBiN:Tlh", longs, NULL)) != -1) {
		switch (ch) {
		case 'p': {
			char *end;
			errno = 0;
			long v = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || v <= 0 || v > INT_MAX)
				die(2, "-p '%s': expected a process id", optarg);
			o.pid = (int)v;
			break;
		}
		case 'A': o.activity = true; break;
		case 'D': o.display_active = true; break;
		case 'S': o.sort_size = true; break;
		case 'a': o.aliases = true; break;
		case 'r': o.report = true; break;
		case 'v': o.validate = true; break;
		case 's': o.shrink = true; break;
		case 'z': o.zero = true; break;
		case 'B': o.bytes = true; break;
		case 'i': o.inverted = true; break;
		case 'T': o.totals = true; break;
		case 'l': o.slabinfo = true; break;
		case 'N': {
			char *end;
			o.lines = strtol(optarg, &end, 10);
			if (*end || end == optarg || o.lines < 0)
				die(2, "-N '%s': expected a number of lines", optarg);
			break;
		}
		case OPT_SET:
			if (run)
				die(2, "--set needs a running process (-p PID)");
			o.set = optarg;
			break;
		case OPT_JSON: o.json = true; break;
		case OPT_WATCH:
			if (run)
				die(2, "--watch needs a running process (-p PID)");
			o.watch = parse_seconds("--watch", optarg);
			break;
		case OPT_TIMEOUT: o.timeout = parse_seconds("--timeout", optarg); break;
		case OPT_CPUS:
			if (run)
				die(2, "--cpus needs a running process (-p PID)");
			if (!optarg[0] || strlen(optarg) > USLAB_NAME_MAX)
				die(2, "--cpus '%s': expected a cache name (1 to %d characters)", optarg, USLAB_NAME_MAX);
			o.cpus = optarg;
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (o.set) {   /* check it before touching any process */
		char n[USLAB_NAME_MAX + 1], k[SET_MAX][16];
		uint64_t v[SET_MAX];
		unsigned ns;
		parse_set(o.set, n, k, v, &ns);
	}
	if (run) {
		if (optind >= argc)
			die(2, "run: expected -- CMD [ARGS...]");
		return run_cmd(argv + optind);
	}
	if (o.cpus && (o.set || o.validate || o.shrink))
		die(2, "--cpus is a view: not with --set, -v or -s");
	if (o.cpus && optind < argc)
		die(2, "--cpus names its cache: no NAME-REGEX (got '%s')", argv[optind]);
	if (optind < argc) {
		if (optind + 1 < argc)
			die(2, "one NAME-REGEX at most (got '%s' and '%s')", argv[optind], argv[optind + 1]);
		int e = regcomp(&o.re, argv[optind], REG_EXTENDED | REG_NOSUB);
		if (e) {
			char msg[128];
			regerror(e, &o.re, msg, sizeof msg);
			die(2, "bad NAME-REGEX '%s': %s", argv[optind], msg);
		}
		o.have_re = true;
	}
	if (!o.pid) {
		if (o.set || o.validate || o.shrink || o.watch > 0 || o.cpus)
			die(2, "--set, -v, -s, --cpus and --watch need a process: -p PID");
		return list_exporters();
	}
	return report_pid(o.pid);
}
