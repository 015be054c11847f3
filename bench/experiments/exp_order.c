/*
 * exp_order: slab page order on a fragmenting workload, with and without a
 * memory limit, after the 2009 slub_max_order thread (Zhang, Dickins):
 * high orders cost when memory is short.
 *
 *   exp_order [--limit-mib N] [--live-mib N] [--cycles N] [--survive-permille N] [--seed N]
 *
 * 24 caches of sizes from 24 to 6000 bytes (odd sizes among them). Each of
 * --cycles (12) cycles allocates a generation of --live-mib/2 (48) MiB of
 * objects from a "hot" third of the caches (random sizes among them), then
 * frees the previous generation except a few survivors (--survive-permille,
 * 30 per mille) that live to the end. Survivors pin their slabs: a slab of
 * k objects stays with probability 1 - 0.97^k, so big slabs (many objects)
 * are pinned far more often than small ones, and the next generations,
 * from other caches, cannot use their holes: memory grows with the slab
 * order (the fragmentation argument of the 2009 thread). The order is
 * chosen with USLAB_OPTIONS=slub_max_order=N.
 *
 * --limit-mib N sets RLIMIT_AS, before the first uslab call, to the address
 * space the process has at that point plus N MiB (the page allocator maps
 * 4 MiB segments, so a map fails once the limit is near). Allocations that
 * return NULL are counted and skipped; after 100 in a row the generation
 * ends early.
 *
 * Output: RESULT time_s=.. peak_rss_kib=.. peak_mapped_kib=.. nulls=..
 *         order_fallback=.. allocs=.. slabs=..
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "uslab.h"

#define NC 24
static const size_t sizes[NC] = { 24,  40,  56,  72,   96,   136,  192,  232,  320,  400,  520,  700,
				  900, 1100, 1400, 1800, 2100, 2600, 3000, 3600, 4200, 4800, 5400, 6000 };
static struct uslab_cache *caches[NC];

struct obj {
	void *p;
	uint8_t c;      /* cache index */
	uint16_t gen;   /* generation (cycle + 1); 0 for survivors */
};

static uint64_t rng = 0x2545f4914f6cdd1dULL;
static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t peak_mapped;
static void sample_mapped(void)
{
	struct uslab_process_info pi = { .version = USLAB_PROCESS_INFO_VERSION };
	if (uslab_process_get_info(&pi) == 0 && pi.mapped_bytes > peak_mapped)
		peak_mapped = pi.mapped_bytes;
}

int main(int argc, char **argv)
{
	unsigned long limit_mib = 0, live_mib = 96, cycles = 12, survive_permille = 30;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--limit-mib") && i + 1 < argc)
			limit_mib = strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--live-mib") && i + 1 < argc)
			live_mib = strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--cycles") && i + 1 < argc)
			cycles = strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--survive-permille") && i + 1 < argc)
			survive_permille = strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			rng = strtoull(argv[++i], NULL, 10) | 1;
		else {
			fprintf(stderr, "usage: exp_order [--limit-mib N] [--live-mib N] [--cycles N] [--survive-permille N] [--seed N]\n");
			return 2;
		}
	}
	size_t live_bytes_max = live_mib << 20;
	/* the object table is allocated before the limit: it is not the
	 * allocator's memory */
	size_t cap = live_bytes_max / 24 + 1024;
	struct obj *objs = malloc(cap * sizeof *objs);
	if (!objs) {
		perror("malloc");
		return 1;
	}
	memset(objs, 0, cap * sizeof *objs);
	unsigned long base_mib = 0;
	if (limit_mib) {
		/* the limit is on top of what the process has mapped so far
		 * (program, libraries, the object table above) */
		FILE *f = fopen("/proc/self/statm", "r");
		unsigned long pages = 0;
		if (!f || fscanf(f, "%lu", &pages) != 1) {
			perror("/proc/self/statm");
			return 1;
		}
		fclose(f);
		base_mib = (pages * 4096UL) >> 20;
		rlim_t lim = (rlim_t)(base_mib + limit_mib) << 20;
		struct rlimit rl = { lim, lim };
		if (setrlimit(RLIMIT_AS, &rl)) {
			perror("setrlimit");
			return 1;
		}
	}
	for (int c = 0; c < NC; c++) {
		char name[32];
		snprintf(name, sizeof name, "frag-%zu", sizes[c]);
		caches[c] = uslab_cache_create(name, sizes[c], 0, USLAB_NO_MERGE, NULL);
		if (!caches[c]) {
			fprintf(stderr, "exp_order: create %s failed: %s\n", name, strerror(errno));
			return 1;
		}
	}
	size_t n = 0, live = 0;
	unsigned long nulls = 0, allocs = 0;
	size_t gen_bytes_max = live_bytes_max / 2;
	double t0 = now();
	for (unsigned long cy = 0; cy < cycles; cy++) {
		/* a new generation from a hot third of the caches */
		int hot[NC / 3];
		for (int k = 0; k < NC / 3; k++)
			hot[k] = (int)(rnd() % NC);
		size_t gen_bytes = 0;
		unsigned long fails_in_row = 0;
		while (gen_bytes < gen_bytes_max && n < cap && fails_in_row < 100) {
			int c = hot[rnd() % (NC / 3)];
			void *p = uslab_cache_alloc(caches[c]);
			allocs++;
			if (!p) {
				nulls++;
				fails_in_row++;
				continue;
			}
			fails_in_row = 0;
			memset(p, (int)c, sizes[c] < 64 ? sizes[c] : 64);   /* touch it */
			objs[n].p = p;
			objs[n].c = (uint8_t)c;
			objs[n].gen = (uint16_t)(cy + 1);
			n++;
			live += sizes[c];
			gen_bytes += sizes[c];
			if ((allocs & 0xffff) == 0)
				sample_mapped();
		}
		sample_mapped();
		/* the previous generation dies, but for a few survivors that live
		 * on (generation 0): they pin their slabs */
		size_t w = 0;
		for (size_t i = 0; i < n; i++) {
			if (objs[i].gen == cy && cy > 0) {
				if (rnd() % 1000 < survive_permille) {
					objs[i].gen = 0;
				} else {
					uslab_cache_free(caches[objs[i].c], objs[i].p);
					live -= sizes[objs[i].c];
					continue;
				}
			}
			objs[w++] = objs[i];
		}
		n = w;
	}
	double t1 = now();
	sample_mapped();
	uint64_t fallback = 0, slabs = 0;
	for (int c = 0; c < NC; c++) {
		struct uslab_cache_info in;
		memset(&in, 0, sizeof in);
		in.version = USLAB_CACHE_INFO_VERSION;
		if (uslab_cache_get_info(caches[c], &in) == 0) {
			fallback += in.events[USLAB_STAT_ORDER_FALLBACK];
			slabs += in.slabs;
		}
	}
	struct uslab_cache_info in0;
	memset(&in0, 0, sizeof in0);
	in0.version = USLAB_CACHE_INFO_VERSION;
	uslab_cache_get_info(caches[NC - 1], &in0);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("exp_order: %d caches, order of the %zu-byte cache %u; generations of %lu MiB, %lu cycles, "
	       "RLIMIT_AS %s%lu MiB above the %lu MiB mapped at start\n",
	       NC, sizes[NC - 1], in0.order, live_mib / 2, cycles, limit_mib ? "" : "none, ", limit_mib, base_mib);
	printf("RESULT time_s=%.3f peak_rss_kib=%ld peak_mapped_kib=%llu nulls=%lu order_fallback=%llu allocs=%lu "
	       "slabs=%llu\n",
	       t1 - t0, ru.ru_maxrss, (unsigned long long)(peak_mapped >> 10), nulls, (unsigned long long)fallback,
	       allocs, (unsigned long long)slabs);
	for (size_t i = 0; i < n; i++)
		uslab_cache_free(caches[objs[i].c], objs[i].p);
	for (int c = 0; c < NC; c++)
		uslab_cache_destroy(caches[c]);
	free(objs);
	return 0;
}
