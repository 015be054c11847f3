/*
 * The export file: what a process running with USLAB_OPTIONS=export keeps
 * for uslabinfo. Shared by src/export.c (the writer) and tools/uslabinfo.c
 * (readers); the layout is versioned by EXPORT_VERSION and checked with the
 * sizes recorded in the header, so a tool never misreads another build's
 * file.
 *
 * Where: $XDG_RUNTIME_DIR/uslab-PID.stats when that directory is ours and
 * not writable by others, else /dev/shm/uslab-PID.stats. Mode 0600, owned
 * by the process's effective user; only that user can read it or post
 * commands.
 *
 * Liveness: the exporting process holds a shared flock() on the file for
 * as long as it (or its mapping) lives; exit, a crash and exec all drop it.
 * A file nobody holds a lock on is stale.
 *
 * Layout: struct export_header; the CPU table (struct export_cpu_table,
 * `cpu_size` bytes) at `cpu_offset`; then `capacity` records (struct
 * uslab_cache_info of version `info_version`) at `records_offset`. The
 * header and the CPU table share the process's first mapping, which never
 * moves; the records' mapping moves when the file grows. The file only
 * grows (readers may have it mapped). A file `uslabinfo run` reserved has
 * no CPU table yet (`cpu_offset` 0) until the process adopts it.
 *
 * Snapshot: a sequence lock. The process makes `seq` odd, writes the
 * records and the process summary, and makes it even again; a reader copies
 * and retries if `seq` was odd or changed.
 *
 * Requests: a reader increments `req`, then increments `wake` and calls
 * FUTEX_WAKE on it (a shared futex: not FUTEX_PRIVATE_FLAG). The process's
 * uslab thread (bgthread.c; started by export itself unless the process
 * runs with background_thread=0) sleeps on `wake` and answers at once; `bg`
 * says so (EXPORT_BG_SERVE). Without that thread, the process notices on
 * its next allocation slow path (export_poll: one relaxed load of `req`).
 * Either refreshes the snapshot, serves a posted command, and sets `ack` to
 * the `req` it saw. The process also refreshes the snapshot by itself after
 * a cache is created or destroyed (at once, or when next asked if it
 * refreshed very recently), so that a process that stops allocating still
 * shows its caches to a reader it cannot answer.
 *
 * Commands (a one-slot mailbox, `cmd`, and the CPU table that answers
 * EXPORT_OP_CPUS). `cmd.state` says who owns the slot's fields and the
 * table:
 *
 *   state    entered by                          owner of cmd's fields and the CPU table
 *   EMPTY    the claimer, after DONE; a reader   nobody (nobody writes or reads them)
 *            withdrawing its POSTED command
 *   CLAIMED  a reader, by CAS from EMPTY (or     the claimer (`owner`: its pid), which
 *            from CLAIMED or DONE of a dead      writes the request fields
 *            owner: kill(owner, 0) says ESRCH)
 *   POSTED   the claimer, release store          nobody writes; the process may take it,
 *                                                the claimer may withdraw it (CAS to EMPTY)
 *   TAKEN    the process, CAS from POSTED        the process: it reads the request, writes
 *            (acq_rel)                           the result and, for CPUS, the table
 *   DONE     the process, release store          the claimer: it copies the result and the
 *                                                table, then stores EMPTY
 *
 * Why the ordering is enough: every hand-over of the fields is a release
 * store (or CAS) of `state` that the next owner observes with an acquire
 * load or CAS, so each owner's writes happen before the next owner's
 * reads, and a claimer's copy of the table (before its EMPTY) happens
 * before the process's next write of it (after the next claim, post and
 * take). The CAS decides every race for the slot: a withdrawal against a
 * take, two claims, a take-over against a late owner. A claimer that stops
 * waiting for a TAKEN command leaves the slot DONE (once served) under its
 * pid; it is taken over when that pid is gone.
 */
#ifndef USLAB_EXPORT_H
#define USLAB_EXPORT_H

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "uslab.h"

#define EXPORT_MAGIC      "USLABEX1"
#define EXPORT_VERSION    4         /* 2: `wake` and `bg` beside `req`; 3: `bg` holds EXPORT_BG_* bits;
				     * 4: the CPU table and EXPORT_OP_CPUS */
#define EXPORT_PREFIX     "uslab-"
#define EXPORT_SUFFIX     ".stats"
#define EXPORT_SHM_DIR    "/dev/shm"
#define EXPORT_MAX_STATS  64        /* stat name slots in the header */
#define EXPORT_STAT_NAME  32
#define EXPORT_MIN_MS     5         /* the process refreshes at most this often */
#define EXPORT_MAX_RECORDS 65536
#define EXPORT_MAX_CPU_ROWS 256     /* rows of the CPU table: CPUs above the 256 lowest with a part
				     * are left out of the rows (but not out of the totals) */

enum export_state {
	EXPORT_RESERVED = 1,   /* created by `uslabinfo run` for a child that has not started exporting */
	EXPORT_LIVE = 2,       /* the process is running and exporting */
	EXPORT_FINAL = 3,      /* the process exited normally; the snapshot is its last */
};

/* struct export_header's `bg`: what the process's uslab thread does. */
enum {
	EXPORT_BG_SERVE = 1,   /* a thread sleeps on `wake` and answers at once */
	EXPORT_BG_DECAY = 2,   /* it also runs decay passes (background_thread) */
};

enum export_op {
	EXPORT_OP_NONE = 0,
	EXPORT_OP_SET = 1,       /* cache:key = value (uslab_cache_tune_set) */
	EXPORT_OP_SHRINK = 2,    /* uslab_cache_shrink on cache ("" = all) */
	EXPORT_OP_VALIDATE = 3,  /* uslab_cache_validate on cache ("" = all) */
	EXPORT_OP_CPUS = 4,      /* uslab_cache_cpu_stats of every CPU part of cache (a name: real
				  * cache or alias) into the CPU table */
};

/* struct export_cpu_table's `kind`: whether the cache's parts are CPUs'. */
enum export_cpus_kind {
	EXPORT_CPUS_CPU = 1,      /* parts of CPUs (the rows) */
	EXPORT_CPUS_BACKEND = 2,  /* the process's backend is "thread": every part is a thread's */
	EXPORT_CPUS_MODE = 3,     /* the cache is not in sheaves mode (cpu_mode): its parts are threads' */
	EXPORT_CPUS_DEBUG = 4,    /* a debugged cache: no CPU parts, every operation takes the slow path */
	EXPORT_CPUS_OTHER = 5,    /* an internal cache, or one beyond the per-CPU slots: threads' parts */
};

/* One CPU's part of a cache: uslab_cache_cpu_stats() of that CPU. */
struct export_cpu_row {
	uint32_t cpu;
	uint32_t pad;
	uint64_t objects;                  /* objects its sheaves hold */
	uint64_t events[EXPORT_MAX_STATS]; /* by stat_names (ALLOC_PCS, FREE_PCS: its fast paths) */
};

/* The answer to EXPORT_OP_CPUS, written by the process while the command
 * is TAKEN (owned as the command's fields are: see the file comment). */
struct export_cpu_table {
	char cache[USLAB_NAME_MAX + 1];    /* the real cache (the name asked may be an alias) */
	uint32_t kind;                     /* enum export_cpus_kind */
	uint32_t cpu_mode;                 /* USLAB_CPU_* the cache's parts run */
	uint32_t parts;                    /* the cache's CPU parts */
	uint32_t rows;                     /* rows filled: the parts of the lowest CPU numbers, in
					    * order; parts - rows were left out */
	uint64_t total_objects;            /* over every part, those left out included */
	uint64_t total_events[EXPORT_MAX_STATS];
	struct export_cpu_row row[EXPORT_MAX_CPU_ROWS];
};

enum export_cmd_state {
	CMD_EMPTY = 0,
	CMD_CLAIMED = 1,
	CMD_POSTED = 2,
	CMD_TAKEN = 3,
	CMD_DONE = 4,
};

struct export_cmd {
	_Atomic uint32_t state;          /* enum export_cmd_state: who owns the fields below and the
					  * CPU table, handed over by release/acquire (file comment) */
	_Atomic int32_t owner;           /* pid of the reader that claimed the slot */
	uint32_t op;                     /* enum export_op */
	uint32_t pad;
	char cache[USLAB_NAME_MAX + 1];  /* cache name; "" = every cache (shrink, validate) */
	char key[16];                    /* SET: cpu_partial, min_partial, order, cpu_queue */
	uint64_t value;                  /* SET: the new value */
	/* written by the process before state = DONE */
	int64_t result;                  /* SET: previous value; SHRINK: caches left with slabs; VALIDATE:
					  * problems; CPUS: rows in the CPU table */
	uint32_t caches;                 /* caches the command applied to */
	int32_t err;                     /* 0, or ENOENT (no such cache), EINVAL (bad key or value),
					  * EPERM (the file is no longer owner-only), ESRCH (exiting) */
	char msg[128];                   /* one line for the user when err != 0 */
};

struct export_header {
	char magic[8];                   /* EXPORT_MAGIC */
	uint32_t version;                /* EXPORT_VERSION */
	uint32_t header_size;            /* sizeof(struct export_header) */
	uint32_t records_offset;         /* where records start */
	uint32_t record_size;            /* sizeof(struct uslab_cache_info) */
	uint32_t info_version;           /* USLAB_CACHE_INFO_VERSION of the records */
	uint32_t proc_size;              /* sizeof(struct uslab_process_info) */
	uint32_t nr_stat_items;          /* names used in stat_names */
	_Atomic uint32_t state;          /* enum export_state */
	int32_t pid;                     /* the exporting process */
	uint32_t uid;                    /* its effective uid */
	uint64_t starttime;              /* field 22 of /proc/PID/stat: tells a reused pid apart */
	char comm[32];                   /* /proc/PID/comm at start */
	char stat_names[EXPORT_MAX_STATS][EXPORT_STAT_NAME]; /* event names, in record order */
	uint32_t cpu_offset;             /* where the CPU table is (0: not yet: a reserved file) */
	uint32_t cpu_size;               /* sizeof(struct export_cpu_table) */

	/* written by readers; the process's slow path loads `req` */
	_Alignas(64) _Atomic uint64_t req; /* incremented by a reader that wants a fresh snapshot */
	_Atomic uint32_t wake;           /* futex word: a reader adds 1 after req and FUTEX_WAKEs it */
	_Atomic uint32_t bg;             /* written by the process: EXPORT_BG_* while its uslab
					  * thread serves; 0: the next allocation slow path
					  * answers (no thread, or not yet started) */
	_Alignas(64) _Atomic uint64_t ack; /* the last req the process served */
	struct export_cmd cmd;

	/* the snapshot, under seq */
	_Alignas(64) _Atomic uint64_t seq; /* odd while the process writes the snapshot */
	uint64_t snap_ns;                /* CLOCK_MONOTONIC time of the snapshot */
	uint64_t snaps;                  /* snapshots taken */
	uint32_t nr_records;             /* records in the snapshot */
	uint32_t capacity;               /* records the file has room for */
	uint32_t dropped;                /* caches left out (no room) */
	uint32_t cpu_backend;            /* 1: caches in sheaves mode keep parts of CPUs (rseq); 0: of
					  * threads (uslab_cpu_backend()) */
	struct uslab_process_info proc;  /* uslab_process_get_info() */
};


/* Field 22 (starttime) of a /proc/PID/stat line; 0 if it cannot be parsed.
 * The command name (field 2) may hold spaces and parentheses: fields are
 * counted from the last ')'. */
static inline uint64_t export_parse_starttime(const char *buf)
{
	const char *p = strrchr(buf, ')');
	if (!p)
		return 0;
	p++;
	for (int field = 3; field < 22; field++) {
		while (*p == ' ')
			p++;
		while (*p && *p != ' ')
			p++;
		if (!*p)
			return 0;
	}
	while (*p == ' ')
		p++;
	uint64_t v = 0;
	while (*p >= '0' && *p <= '9')
		v = v * 10 + (uint64_t)(*p++ - '0');
	return v;
}

#endif
