/*
 * exp_skb: merged caches vs slab_nomerge vs tuned cpu_partial/min_partial,
 * modelled on the 2015 slab-nomerge thread (Brouer's IPv4 forwarding test
 * with SKBs bulk-freed in TX completion).
 *
 *   exp_skb [--skbs N] [--bulk N] [--churn-live N] [--churn-ratio N] [--no-churn]
 *
 * Three threads:
 *   rx     allocates 256-byte "skb" objects from the cache
 *          "skbuff_head_cache", writes a header into each and puts the
 *          pointer into a single-producer ring (the RX path);
 *   tx     takes them off the ring and frees them in bulks of --bulk
 *          (default 32, as ixgbe_clean_tx_irq) with uslab_cache_free_bulk,
 *          or one by one with --bulk 1 (TX completion);
 *   churn  another user of 256-byte objects: cache "other-256" (created
 *          second, so it is merged into skbuff_head_cache unless
 *          slab_nomerge), holding about --churn-live objects with random
 *          lifetimes, allocating and freeing singly, paced to at most
 *          --churn-ratio (default 1) operations per skb produced, until tx
 *          is done. The pacing fixes the work per run, so that a mode
 *          cannot look faster because the scheduler starved a thread.
 * The ring is 1024 entries; a side that finds it full or empty yields.
 *
 * The clock runs from the start of rx to the last free of tx. Output:
 *   skb: N objects in S s: X Mops/s (ops = skbs through rx+tx), Y ns per skb
 *   churn: N operations
 *   a stats line for the skb cache
 * With USLAB_OPTIONS one picks the mode:
 *   (none)                           merged (default)
 *   slab_nomerge                     every cache its own
 *   skbuff_head_cache:cpu_partial=256 skbuff_head_cache:min_partial=9
 *                                    merged, tuned as in the thread
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "uslab.h"

#define SKB_SIZE 256
#define RING 1024
#define MAXBULK 256

static struct uslab_cache *skb_cache, *other_cache;
static unsigned long nr_skbs = 2000000;
static unsigned bulk = 32;
static unsigned long churn_live = 20000;
static unsigned churn_ratio = 1;      /* churn operations per skb, at most */
static int churn_on = 1;

static void *_Atomic ring[RING];
static _Atomic unsigned long head, tail;   /* head: next to write (rx); tail: next to read (tx) */
static _Atomic int tx_done;
static unsigned long churn_ops;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
	fprintf(stderr, "exp_skb: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void *rx(void *arg __attribute__((unused)))
{
	unsigned long h = 0;
	for (unsigned long i = 0; i < nr_skbs; i++) {
		uint64_t *skb = uslab_cache_alloc(skb_cache);
		if (!skb)
			die("skb alloc");
		skb[0] = i;                /* a header, as the driver would write */
		skb[3] = i ^ 0x5a5a;
		while (h - atomic_load_explicit(&tail, memory_order_acquire) >= RING)
			sched_yield();
		atomic_store_explicit(&ring[h % RING], skb, memory_order_relaxed);
		atomic_store_explicit(&head, ++h, memory_order_release);
	}
	return NULL;
}

static void *tx(void *arg __attribute__((unused)))
{
	void *batch[MAXBULK];
	unsigned n = 0;
	unsigned long t = 0;
	while (t < nr_skbs) {
		unsigned long h = atomic_load_explicit(&head, memory_order_acquire);
		if (h == t) {
			if (n) {   /* nothing more now: complete what we have */
				uslab_cache_free_bulk(skb_cache, n, batch);
				n = 0;
			}
			sched_yield();
			continue;
		}
		while (t < h) {
			uint64_t *skb = atomic_load_explicit(&ring[t % RING], memory_order_relaxed);
			if (skb[0] != t || skb[3] != (t ^ 0x5a5a)) {
				fprintf(stderr, "exp_skb: skb %lu corrupt\n", t);
				abort();
			}
			t++;
			if (bulk == 1) {
				uslab_cache_free(skb_cache, skb);
				continue;
			}
			batch[n++] = skb;
			if (n == bulk) {
				uslab_cache_free_bulk(skb_cache, n, batch);
				n = 0;
			}
		}
		atomic_store_explicit(&tail, t, memory_order_release);
	}
	if (n)
		uslab_cache_free_bulk(skb_cache, n, batch);
	atomic_store_explicit(&tail, t, memory_order_release);
	atomic_store(&tx_done, 1);
	return NULL;
}

static void *churn(void *arg __attribute__((unused)))
{
	void **live = calloc(churn_live, sizeof *live);
	if (!live)
		die("calloc");
	uint64_t x = 88172645463325252ULL;
	unsigned long ops = 0;
	while (!atomic_load_explicit(&tx_done, memory_order_relaxed)) {
		/* paced: at most churn_ratio operations per skb produced, so that
		 * every mode does the same work whatever the scheduler does */
		if (ops >= churn_ratio * atomic_load_explicit(&head, memory_order_relaxed)) {
			sched_yield();
			continue;
		}
		for (int k = 0; k < 64; k++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			unsigned long i = x % churn_live;
			if (live[i]) {
				uslab_cache_free(other_cache, live[i]);
				live[i] = NULL;
			} else {
				live[i] = uslab_cache_alloc(other_cache);
				if (!live[i])
					die("churn alloc");
				memset(live[i], 0x11, 64);
			}
			ops++;
		}
	}
	for (unsigned long i = 0; i < churn_live; i++)
		if (live[i])
			uslab_cache_free(other_cache, live[i]);
	free(live);
	churn_ops = ops;
	return NULL;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--skbs") && i + 1 < argc)
			nr_skbs = strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--bulk") && i + 1 < argc)
			bulk = (unsigned)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--churn-live") && i + 1 < argc)
			churn_live = strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--churn-ratio") && i + 1 < argc)
			churn_ratio = (unsigned)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--no-churn"))
			churn_on = 0;
		else {
			fprintf(stderr, "usage: exp_skb [--skbs N] [--bulk N] [--churn-live N] [--churn-ratio N] [--no-churn]\n");
			return 2;
		}
	}
	if (!nr_skbs || !bulk || bulk > MAXBULK || !churn_live) {
		fprintf(stderr, "exp_skb: bad arguments\n");
		return 2;
	}
	skb_cache = uslab_cache_create("skbuff_head_cache", SKB_SIZE, 0, USLAB_HWCACHE_ALIGN, NULL);
	other_cache = uslab_cache_create("other-256", SKB_SIZE, 0, USLAB_HWCACHE_ALIGN, NULL);
	if (!skb_cache || !other_cache)
		die("uslab_cache_create");
	struct uslab_cache_info oi;
	memset(&oi, 0, sizeof oi);
	oi.version = USLAB_CACHE_INFO_VERSION;
	uslab_cache_get_info(other_cache, &oi);
	unsigned long cp = 0, mp = 0;
	uslab_cache_tune_get(skb_cache, "cpu_partial", &cp);
	uslab_cache_tune_get(skb_cache, "min_partial", &mp);
	printf("exp_skb: %lu skbs of %d bytes, tx frees in bulks of %u; churn %s; other-256 %s; "
	       "skb cache cpu_partial %lu min_partial %lu\n",
	       nr_skbs, SKB_SIZE, bulk, churn_on ? "on" : "off",
	       oi.alias_of[0] ? "merged into skbuff_head_cache" : "a cache of its own", cp, mp);

	pthread_t trx, ttx, tch;
	double t0 = now();
	if (churn_on && pthread_create(&tch, NULL, churn, NULL))
		die("pthread_create");
	if (pthread_create(&ttx, NULL, tx, NULL) || pthread_create(&trx, NULL, rx, NULL))
		die("pthread_create");
	pthread_join(trx, NULL);
	pthread_join(ttx, NULL);
	double t1 = now();
	if (churn_on)
		pthread_join(tch, NULL);
	double s = t1 - t0;
	printf("skb: %lu objects in %.3f s: %.3f Mops/s, %.2f ns per skb\n", nr_skbs, s, nr_skbs / s / 1e6,
	       s * 1e9 / (double)nr_skbs);
	printf("churn: %lu operations (%.2f Mops/s)\n", churn_ops, churn_ops / s / 1e6);
	/* every skb is one alloc and one free; every churn operation one of them */
	double ops = 2.0 * (double)nr_skbs + (double)churn_ops;
	printf("RESULT ns_per_skb=%.3f mops=%.4f churn_ops=%lu\n", s * 1e9 / (double)nr_skbs, ops / s / 1e6, churn_ops);
	struct uslab_cache_info in;
	memset(&in, 0, sizeof in);
	in.version = USLAB_CACHE_INFO_VERSION;
	if (uslab_cache_get_info(skb_cache, &in) == 0)
		printf("stats: NODE_LOCK %llu, ALLOC_SLAB %llu, FREE_SLAB %llu, CPU_PARTIAL_ALLOC %llu, "
		       "CPU_PARTIAL_FREE %llu, FREE_PCS %llu, FREE_BULK %llu, CMPXCHG_DOUBLE_FAIL %llu\n",
		       (unsigned long long)in.events[USLAB_STAT_NODE_LOCK],
		       (unsigned long long)in.events[USLAB_STAT_ALLOC_SLAB],
		       (unsigned long long)in.events[USLAB_STAT_FREE_SLAB],
		       (unsigned long long)in.events[USLAB_STAT_CPU_PARTIAL_ALLOC],
		       (unsigned long long)in.events[USLAB_STAT_CPU_PARTIAL_FREE],
		       (unsigned long long)in.events[USLAB_STAT_FREE_PCS],
		       (unsigned long long)in.events[USLAB_STAT_FREE_BULK],
		       (unsigned long long)in.events[USLAB_STAT_CMPXCHG_DOUBLE_FAIL]);
	uslab_cache_destroy(other_cache);
	uslab_cache_destroy(skb_cache);
	return 0;
}
