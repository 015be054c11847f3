/*
 * uhackbench: hackbench (thread mode, pipes) where every message is an
 * allocated object, so that the allocator's cross-thread traffic is what is
 * measured, as in the SLUB threads under reference/.
 *
 *   uhackbench [--mode cache|malloc] [--transport pipe|ring] [--size BYTES] [--rx-spin N] GROUPS [LOOPS]
 *
 * Transport. "pipe" is hackbench's own: one write(2) and one read(2) per
 * message, so kernel pipe code takes most of the time and the allocator's
 * share is small. "ring" (the default) passes the pointers through a
 * bounded ring per receiver under a mutex, with condition variables to
 * sleep on when it is empty or full; a receiver takes all waiting messages
 * at once. Threads still block and wake as in hackbench, but the cross-
 * thread allocation traffic is what the run measures.
 *
 * Each group has 20 senders and 20 receivers, all threads, and one pipe per
 * receiver. Each sender, LOOPS times, for each receiver of its group:
 * allocates a message of BYTES bytes (cache mode: from one uslab cache shared
 * by all threads; malloc mode: malloc), fills it with a check pattern and
 * writes the pointer (8 bytes, so the write is atomic) into the receiver's
 * pipe. Each receiver reads 20 * LOOPS pointers, checks each message and
 * frees it. Every message is therefore freed by a thread other than the one
 * that allocated it, and every cache sees 20 senders x 20 receivers per group.
 *
 * As in hackbench, all threads are created first and wait; the clock starts
 * when they are released and stops when the last one has been joined.
 * Output:
 *   Time: N.NNN
 *   MaxRSS: N KiB                (getrusage ru_maxrss, the whole process)
 *   uslab: ...                   (cache mode only: the cache's stats)
 *   uslab: cpu_mode N (NAME)     (cache mode only: the per-CPU mode the cache
 *                                ran, USLAB_CPU_*; scripts check that
 *                                USLAB_OPTIONS=slub_cpu_mode=NAME took)
 *   uslab: events NAME N ...     (cache mode only: every stat item that is
 *                                not 0)
 *   PeakLive: N messages, N KiB  (with --sample-live: the most messages
 *                                allocated and not yet freed at once)
 *
 * --sample-live: a sampler thread adds up, every millisecond, what each
 * sender has sent and each receiver has freed (counters each thread
 * writes alone, on lines of their own) and keeps the largest difference.
 * With pipes, senders can run up to a pipe's buffer (8,192 pointers)
 * ahead of each receiver, so peak RSS measures how far the scheduler let
 * them run ahead as much as what the allocator keeps: RSS over the peak
 * live payload separates the two. Off by default (one more thread).
 *
 * Malloc mode calls no uslab function, so LD_PRELOAD of any malloc measures
 * that malloc alone (libuslab is loaded but idle).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "uslab.h"

#define NUM_FDS 20            /* senders and receivers per group, as hackbench */
#define DEFAULT_SIZE 100      /* hackbench's message size */
#define DEFAULT_LOOPS 500     /* 10 groups: ~1-2 s on a 2-vCPU Xeon guest */
#define STACK_SIZE (256 * 1024)

enum mode { MODE_CACHE, MODE_MALLOC };

static enum mode mode = MODE_CACHE;
static size_t msg_size = DEFAULT_SIZE;
static unsigned long loops = DEFAULT_LOOPS;
static struct uslab_cache *cache;

/* Start line: workers report ready, then wait for the go. */
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t start_ready = PTHREAD_COND_INITIALIZER;
static pthread_cond_t start_go = PTHREAD_COND_INITIALIZER;
static unsigned nr_ready;
static int go;

struct ring;
struct sender {
	int out_fds[NUM_FDS];   /* write ends of the group's receiver pipes */
	struct ring *rings[NUM_FDS]; /* or the group's receiver rings */
	unsigned id;            /* global sender number, seeds the pattern */
	struct live_count *sent; /* --sample-live */
};

/* Ring transport: one per receiver, written by the 20 senders of its group. */
#define RING_CAP 512
#define RING_BATCH 64
struct ring {
	pthread_mutex_t lock;       /* protects everything below */
	pthread_cond_t not_empty;   /* the receiver waits here */
	pthread_cond_t not_full;    /* senders wait here */
	unsigned head, count, full_waiters;
	void *slot[RING_CAP];
};

struct receiver {
	int in_fd;              /* read end of this receiver's pipe (pipe transport) */
	struct ring *ring;      /* ring transport */
	unsigned long expect;   /* messages to read */
	struct live_count *freed; /* --sample-live */
};

static int use_ring = 1;

/* --rx-spin N: N turns of an empty loop after each free in the receivers, an
 * experiment's knob (bench/results/2026-11-27-uhackbench-receiver-work.md):
 * how the run's time answers to the receivers' speed alone. 0 by default. */
static unsigned long rx_spin;
static inline void spin(unsigned long n)
{
	for (unsigned long i = 0; i < n; i++)
		__asm__ volatile("" ::: "memory");   /* (kept: one turn a cycle or so) */
}

/* --sample-live: a count each sender or receiver writes alone (relaxed:
 * the sampler only needs each count's own latest value, not an order
 * between threads; a sum of counts read at slightly different times is
 * off by the messages in flight meanwhile, a handful per thread). */
struct live_count {
	_Atomic unsigned long n;
	char pad[64 - sizeof(unsigned long)];
};
static int sample_live;
static struct live_count *sent_counts, *freed_counts;
static unsigned long nr_counts;
/* set by main once every worker is joined; the sampler only has to see
 * it eventually (relaxed), and main reads peak_live after joining the
 * sampler (the join orders it) */
static _Atomic int sampling_done;
static unsigned long peak_live;

static void *live_sampler(void *arg)
{
	(void)arg;
	const struct timespec ms = { 0, 1000000 };
	while (!atomic_load_explicit(&sampling_done, memory_order_relaxed)) {
		unsigned long s = 0, f = 0;
		for (unsigned long i = 0; i < nr_counts; i++) {
			f += atomic_load_explicit(&freed_counts[i].n, memory_order_relaxed);
			s += atomic_load_explicit(&sent_counts[i].n, memory_order_relaxed);
		}
		/* (the counts are read at slightly different times: a sum of
		 * frees may briefly pass the sends it follows) */
		if (s > f && s - f > peak_live)
			peak_live = s - f;
		nanosleep(&ms, NULL);
	}
	return NULL;
}

static inline void live_add(struct live_count *c)
{
	if (sample_live)
		atomic_store_explicit(&c->n, atomic_load_explicit(&c->n, memory_order_relaxed) + 1,
				      memory_order_relaxed);
}

/* Names of the cpu_mode values (include/uslab.h's USLAB_CPU_*; 4 is "slab"
 * where the build has SLAB's arrays). */
static const char *cpu_mode_name(unsigned m)
{
	static const char *const names[] = { "classic", "sheaves", "home", "slqb", "slab" };
	return m < sizeof(names) / sizeof(names[0]) ? names[m] : "?";
}

static void fatal(const char *what)
{
	fprintf(stderr, "uhackbench: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void wait_for_start(void)
{
	pthread_mutex_lock(&start_lock);
	nr_ready++;
	pthread_cond_signal(&start_ready);
	while (!go)
		pthread_cond_wait(&start_go, &start_lock);
	pthread_mutex_unlock(&start_lock);
}

static inline void *msg_alloc(void)
{
	return mode == MODE_CACHE ? uslab_cache_alloc(cache) : malloc(msg_size);
}

static inline void msg_free(void *p)
{
	if (mode == MODE_CACHE)
		uslab_cache_free(cache, p);
	else
		free(p);
}

/* Pattern: byte 0 is a tag, byte i is tag + 7i (mod 256). */
static inline void msg_fill(unsigned char *m, unsigned char tag)
{
	m[0] = tag;
	for (size_t i = 1; i < msg_size; i++)
		m[i] = (unsigned char)(tag + 7 * i);
}

static inline void msg_check(const unsigned char *m)
{
	unsigned char tag = m[0];
	for (size_t i = 1; i < msg_size; i++) {
		if (m[i] != (unsigned char)(tag + 7 * i)) {
			fprintf(stderr, "uhackbench: message %p corrupt at byte %zu "
					"(0x%02x, expected 0x%02x)\n",
				(const void *)m, i, m[i], (unsigned char)(tag + 7 * i));
			abort();
		}
	}
}

static void ring_put(struct ring *r, void *m)
{
	pthread_mutex_lock(&r->lock);
	while (r->count == RING_CAP) {
		r->full_waiters++;
		pthread_cond_wait(&r->not_full, &r->lock);
		r->full_waiters--;
	}
	r->slot[(r->head + r->count) % RING_CAP] = m;
	if (r->count++ == 0)
		pthread_cond_signal(&r->not_empty);
	pthread_mutex_unlock(&r->lock);
}

/* Take up to RING_BATCH messages, waiting for at least one. */
static unsigned ring_get(struct ring *r, void **out)
{
	pthread_mutex_lock(&r->lock);
	while (r->count == 0)
		pthread_cond_wait(&r->not_empty, &r->lock);
	unsigned n = r->count < RING_BATCH ? r->count : RING_BATCH;
	for (unsigned i = 0; i < n; i++)
		out[i] = r->slot[(r->head + i) % RING_CAP];
	r->head = (r->head + n) % RING_CAP;
	r->count -= n;
	if (r->full_waiters)
		pthread_cond_broadcast(&r->not_full);
	pthread_mutex_unlock(&r->lock);
	return n;
}

static void *sender(void *arg)
{
	struct sender *s = arg;
	wait_for_start();
	for (unsigned long l = 0; l < loops; l++) {
		for (int j = 0; j < NUM_FDS; j++) {
			void *m = msg_alloc();
			if (!m)
				fatal("message allocation");
			msg_fill(m, (unsigned char)(s->id * 31 + l + j));
			live_add(s->sent);
			if (use_ring) {
				ring_put(s->rings[j], m);
				continue;
			}
			ssize_t n;
			do
				n = write(s->out_fds[j], &m, sizeof(m));
			while (n < 0 && errno == EINTR);
			if (n != (ssize_t)sizeof(m))
				fatal("write");
		}
	}
	return NULL;
}

static void *receiver(void *arg)
{
	struct receiver *r = arg;
	wait_for_start();
	if (use_ring) {
		void *batch[RING_BATCH];
		for (unsigned long k = 0; k < r->expect;) {
			unsigned n = ring_get(r->ring, batch);
			for (unsigned i = 0; i < n; i++) {
				msg_check(batch[i]);
				msg_free(batch[i]);
				spin(rx_spin);
				live_add(r->freed);
			}
			k += n;
		}
		return NULL;
	}
	for (unsigned long k = 0; k < r->expect; k++) {
		void *m;
		size_t done = 0;
		while (done < sizeof(m)) {
			ssize_t n = read(r->in_fd, (char *)&m + done, sizeof(m) - done);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				fatal("read");
			done += (size_t)n;
		}
		msg_check(m);
		msg_free(m);
		spin(rx_spin);
		live_add(r->freed);
	}
	return NULL;
}

/* A decimal count of at least min (0 or 1); anything else exits 2. */
static unsigned long parse_ulong(const char *what, const char *s, unsigned long min)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v < min) {
		fprintf(stderr, "uhackbench: %s must be a %s integer, not '%s'\n", what,
			min ? "positive" : "non-negative", s);
		exit(2);
	}
	return v;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: uhackbench [--mode cache|malloc] [--transport ring|pipe] [--size BYTES] [--rx-spin N] GROUPS [LOOPS]\n"
		"  GROUPS groups of %d sender and %d receiver threads, one channel per receiver;\n"
		"  each sender sends LOOPS (default %d) rounds of one allocated message to\n"
		"  every receiver of its group; receivers check and free them.\n"
		"  --mode cache   messages come from one shared uslab cache (default)\n"
		"  --mode malloc  messages come from malloc(); no uslab call at all\n"
		"  --transport ring  a mutex-protected ring per receiver (default)\n"
		"  --transport pipe  a pipe per receiver, one syscall per message (hackbench's)\n"
		"  --size BYTES   message size (default %d, as hackbench)\n"
		"  --sample-live  also report the most messages live at once (PeakLive;\n"
		"                 a sampler thread, every millisecond)\n"
		"  --rx-spin N    N turns of an empty loop after each free in the receivers\n"
		"                 (an experiment: the run's answer to slower receivers)\n",
		NUM_FDS, NUM_FDS, DEFAULT_LOOPS, DEFAULT_SIZE);
}

/* Each group needs 2 * NUM_FDS descriptors; raise the soft limit if needed. */
static void ensure_fds(unsigned long groups)
{
	struct rlimit rl;
	rlim_t need = (rlim_t)groups * 2 * NUM_FDS + 64;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
		rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

int main(int argc, char **argv)
{
	unsigned long groups = 0;
	int npos = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--mode") && i + 1 < argc) {
			const char *m = argv[++i];
			if (!strcmp(m, "cache"))
				mode = MODE_CACHE;
			else if (!strcmp(m, "malloc"))
				mode = MODE_MALLOC;
			else {
				usage(stderr);
				return 2;
			}
		} else if (!strcmp(a, "--transport") && i + 1 < argc) {
			const char *t = argv[++i];
			if (!strcmp(t, "ring"))
				use_ring = 1;
			else if (!strcmp(t, "pipe"))
				use_ring = 0;
			else {
				usage(stderr);
				return 2;
			}
		} else if (!strcmp(a, "--sample-live")) {
			sample_live = 1;
		} else if (!strcmp(a, "--rx-spin") && i + 1 < argc) {
			rx_spin = parse_ulong("--rx-spin", argv[++i], 0);
		} else if (!strcmp(a, "--size") && i + 1 < argc) {
			msg_size = parse_ulong("--size", argv[++i], 1);
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if (a[0] == '-' || npos >= 2) {
			usage(stderr);
			return 2;
		} else if (npos++ == 0) {
			groups = parse_ulong("GROUPS", a, 1);
		} else {
			loops = parse_ulong("LOOPS", a, 1);
		}
	}
	if (!groups) {
		usage(stderr);
		return 2;
	}
	if (mode == MODE_CACHE && msg_size > USLAB_CACHE_MAX_SIZE) {
		fprintf(stderr, "uhackbench: --size above %lu is not a cache size\n",
			(unsigned long)USLAB_CACHE_MAX_SIZE);
		return 2;
	}

	printf("Running in threaded mode with %lu groups using %d %s each (== %lu tasks)\n",
	       groups, 2 * NUM_FDS, use_ring ? "ring ends" : "file descriptors", groups * 2 * NUM_FDS);
	printf("Each sender will pass %lu messages of %zu bytes (%s)\n",
	       loops * NUM_FDS, msg_size, mode == MODE_CACHE ? "uslab cache" : "malloc");
	fflush(stdout);

	if (mode == MODE_CACHE) {
		cache = uslab_cache_create("uhackbench-msg", msg_size, 0, 0, NULL);
		if (!cache)
			fatal("uslab_cache_create");
	}

	ensure_fds(groups);
	unsigned long nthreads = groups * 2 * NUM_FDS;
	struct sender *senders = calloc(groups * NUM_FDS, sizeof(*senders));
	struct receiver *receivers = calloc(groups * NUM_FDS, sizeof(*receivers));
	pthread_t *tids = calloc(nthreads, sizeof(*tids));
	if (!senders || !receivers || !tids)
		fatal("calloc");
	if (sample_live) {   /* (without it, the heap is as it was before the option) */
		nr_counts = groups * NUM_FDS;
		sent_counts = aligned_alloc(64, nr_counts * sizeof(struct live_count));
		freed_counts = aligned_alloc(64, nr_counts * sizeof(struct live_count));
		if (!sent_counts || !freed_counts)
			fatal("aligned_alloc");
		memset(sent_counts, 0, nr_counts * sizeof(struct live_count));
		memset(freed_counts, 0, nr_counts * sizeof(struct live_count));
	}

	pthread_attr_t attr;
	pthread_attr_init(&attr);
	if (pthread_attr_setstacksize(&attr, STACK_SIZE))
		fatal("pthread_attr_setstacksize");

	unsigned long t = 0;
	for (unsigned long g = 0; g < groups; g++) {
		int wfd[NUM_FDS];
		struct ring *rings[NUM_FDS];
		for (int j = 0; j < NUM_FDS; j++) {
			struct receiver *r = &receivers[g * NUM_FDS + j];
			r->expect = loops * NUM_FDS;
			r->freed = sample_live ? &freed_counts[g * NUM_FDS + j] : NULL;
			if (use_ring) {
				rings[j] = r->ring = calloc(1, sizeof(struct ring));
				if (!r->ring)
					fatal("calloc");
				pthread_mutex_init(&r->ring->lock, NULL);
				pthread_cond_init(&r->ring->not_empty, NULL);
				pthread_cond_init(&r->ring->not_full, NULL);
				wfd[j] = -1;
			} else {
				int p[2];
				if (pipe(p))
					fatal("pipe");
				r->in_fd = p[0];
				wfd[j] = p[1];
			}
			int err = pthread_create(&tids[t++], &attr, receiver, r);
			if (err) {
				errno = err;
				fatal("pthread_create");
			}
		}
		for (int i = 0; i < NUM_FDS; i++) {
			struct sender *s = &senders[g * NUM_FDS + i];
			memcpy(s->out_fds, wfd, sizeof(wfd));
			if (use_ring)
				memcpy(s->rings, rings, sizeof(rings));
			s->id = (unsigned)(g * NUM_FDS + i);
			s->sent = sample_live ? &sent_counts[g * NUM_FDS + i] : NULL;
			int err = pthread_create(&tids[t++], &attr, sender, s);
			if (err) {
				errno = err;
				fatal("pthread_create");
			}
		}
	}
	pthread_attr_destroy(&attr);

	pthread_mutex_lock(&start_lock);
	while (nr_ready < nthreads)
		pthread_cond_wait(&start_ready, &start_lock);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	go = 1;
	pthread_cond_broadcast(&start_go);
	pthread_mutex_unlock(&start_lock);
	pthread_t sampler;
	if (sample_live) {
		int err = pthread_create(&sampler, NULL, live_sampler, NULL);
		if (err) {
			errno = err;
			fatal("pthread_create");
		}
	}

	for (unsigned long i = 0; i < nthreads; i++)
		pthread_join(tids[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (sample_live) {
		atomic_store(&sampling_done, 1);
		pthread_join(sampler, NULL);
	}

	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("Time: %.3f\n", secs);
	printf("MaxRSS: %ld KiB\n", ru.ru_maxrss);
	if (sample_live)
		printf("PeakLive: %lu messages, %lu KiB\n", peak_live, peak_live * msg_size / 1024);

	if (mode == MODE_CACHE) {
		struct uslab_process_info pinfo = { .version = USLAB_PROCESS_INFO_VERSION };
		if (uslab_process_get_info(&pinfo) == 0)
			printf("uslab: segments %llu, mapped %llu KiB, in page blocks %llu KiB, free not returned %llu KiB\n",
			       (unsigned long long)pinfo.segments, (unsigned long long)pinfo.mapped_bytes >> 10,
			       (unsigned long long)pinfo.used_bytes >> 10, (unsigned long long)pinfo.dirty_bytes >> 10);
		struct uslab_cache_info info;
		memset(&info, 0, sizeof(info));
		info.version = USLAB_CACHE_INFO_VERSION;
		if (uslab_cache_get_info(cache, &info) == 0) {
			const uint64_t *ev = info.events;
			/* "fast": no lock and no atomic: a sheaf, or classic mode's CPU free list */
			uint64_t af = ev[USLAB_STAT_ALLOC_FASTPATH] + ev[USLAB_STAT_ALLOC_PCS];
			uint64_t as = ev[USLAB_STAT_ALLOC_SLOWPATH];
			uint64_t ff = ev[USLAB_STAT_FREE_FASTPATH] + ev[USLAB_STAT_FREE_PCS];
			uint64_t fs = ev[USLAB_STAT_FREE_SLOWPATH];
			printf("uslab: cache %s objsize %zu stride %zu order %u objs/slab %u: "
			       "alloc fast %.2f%% (%llu/%llu), free fast %.2f%% (%llu/%llu), "
			       "NODE_LOCK %llu, CMPXCHG_DOUBLE_FAIL %llu, "
			       "CPU_PARTIAL_ALLOC %llu, CPU_PARTIAL_FREE %llu, ALLOC_SLAB %llu, FREE_SLAB %llu, "
			       "slabs %llu, slab KiB %llu\n",
			       info.name, info.object_size, info.slab_object_size, info.order,
			       info.objects_per_slab,
			       af + as ? 100.0 * (double)af / (double)(af + as) : 0.0,
			       (unsigned long long)af, (unsigned long long)(af + as),
			       ff + fs ? 100.0 * (double)ff / (double)(ff + fs) : 0.0,
			       (unsigned long long)ff, (unsigned long long)(ff + fs),
			       (unsigned long long)ev[USLAB_STAT_NODE_LOCK],
			       (unsigned long long)ev[USLAB_STAT_CMPXCHG_DOUBLE_FAIL],
			       (unsigned long long)ev[USLAB_STAT_CPU_PARTIAL_ALLOC],
			       (unsigned long long)ev[USLAB_STAT_CPU_PARTIAL_FREE],
			       (unsigned long long)ev[USLAB_STAT_ALLOC_SLAB],
			       (unsigned long long)ev[USLAB_STAT_FREE_SLAB],
			       (unsigned long long)info.slabs,
			       (unsigned long long)(info.slab_bytes / 1024));
			printf("uslab: cpu_mode %u (%s)\n", info.cpu_mode, cpu_mode_name(info.cpu_mode));
			printf("uslab: events");   /* every counter that moved, for experiments */
			for (unsigned i = 0; i < USLAB_NR_STAT_ITEMS; i++)
				if (ev[i])
					printf(" %s %llu", uslab_stat_name((enum uslab_stat_item)i), (unsigned long long)ev[i]);
			printf("\n");
			if (info.active_objects)
				printf("uslab: warning: %llu objects still active after the run\n",
				       (unsigned long long)info.active_objects);
		}
		uslab_cache_destroy(cache);
	}

	for (unsigned long i = 0; i < groups * NUM_FDS; i++) {
		close(receivers[i].in_fd);
		if (i % NUM_FDS == 0)
			for (int j = 0; j < NUM_FDS; j++)
				close(senders[i].out_fds[j]);
	}
	free(senders);
	free(receivers);
	free(tids);
	return 0;
}
