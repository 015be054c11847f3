/*
 * Statistics API (issue 6), in process, and the live child that
 * test_uslabinfo.sh drives.
 *
 *   test_stats_api               unit checks (CTest: test_stats_api)
 *   test_stats_api print FORM    print uslab_stats_print(FORM) of a known
 *                                heap to stdout (table|json|slabinfo)
 *   test_stats_api child         the live child: known caches, then a loop
 *                                that takes allocation slow paths every few
 *                                ms, until SIGTERM or stdin closes (bounded:
 *                                120 s); exits normally (final snapshot)
 *   test_stats_api cpu-child     the live child of uslabinfo --cpus: cache
 *                                obs_cpu used by one thread pinned to each
 *                                CPU it may run on, one after the other
 *                                (CPU i: 300 (i + 1) allocations, then their
 *                                frees), then left alone; prints
 *                                "BACKEND rseq|thread PERCPU 0|1" (does
 *                                obs_cpu keep parts of CPUs: check.h's
 *                                cache_per_cpu), "PINNED n" (CPUs a thread
 *                                ran pinned to), one line "CPU cpu objects
 *                                alloc_pcs free_pcs" per CPU that
 *                                uslab_cache_cpu_stats knows, then "READY
 *                                pid file"; then as child (obs_tick's slow
 *                                paths) until stdin closes
 *
 * Known heap: obs_a (200 B, no merge) with 1000 live objects; obs_b (64 B,
 * no merge) with 300 allocated and 100 freed: 200 live; obs_m1 and obs_m2
 * (96 B, mergeable): obs_m2 is an alias of obs_m1 (unless slab_nomerge),
 * 10 live objects each; obs_slab (128 B, no merge) in slab mode by its
 * tunables (limit 33, batchcount 17, sharedfactor 5; classic under
 * slub_debug, which takes no mode), 150 allocated (100 in bulk) and 50
 * freed in bulk: 100 live.
 */
#include "check.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "uslab.h"

static struct uslab_cache *a, *b, *m1, *m2, *tick, *sl;
static bool sl_debugged;   /* slub_debug took obs_slab: no slab mode */

static void build_heap(void)
{
	a = uslab_cache_create("obs_a", 200, 0, USLAB_NO_MERGE, NULL);
	b = uslab_cache_create("obs_b", 64, 0, USLAB_NO_MERGE, NULL);
	m1 = uslab_cache_create("obs_m1", 96, 0, 0, NULL);
	m2 = uslab_cache_create("obs_m2", 96, 0, 0, NULL);
	tick = uslab_cache_create("obs_tick", 512, 0, USLAB_NO_MERGE, NULL);
	CHECK(a && b && m1 && m2 && tick);
	static void *pa[1000], *pb[300], *pm[20];
	for (int i = 0; i < 1000; i++)
		CHECK((pa[i] = uslab_cache_alloc(a)) != NULL);
	for (int i = 0; i < 300; i++)
		CHECK((pb[i] = uslab_cache_alloc(b)) != NULL);
	for (int i = 0; i < 100; i++)
		uslab_cache_free(b, pb[i]);
	for (int i = 0; i < 10; i++) {
		CHECK((pm[i] = uslab_cache_alloc(m1)) != NULL);
		CHECK((pm[10 + i] = uslab_cache_alloc(m2)) != NULL);
	}
	sl = uslab_cache_create("obs_slab", 128, 0, USLAB_NO_MERGE, NULL);
	CHECK(sl != NULL);
	struct uslab_cache_info info = { .version = USLAB_CACHE_INFO_VERSION };
	CHECK(uslab_cache_get_info(sl, &info) == 0);
	sl_debugged = cache_debugged(&info);
	if (!sl_debugged) {
		CHECK(uslab_cache_tune_set(sl, "cpu_mode", USLAB_CPU_SLAB) == 0);
		CHECK(uslab_cache_tune_set(sl, "limit", 33) == 0);
		CHECK(uslab_cache_tune_set(sl, "batchcount", 17) == 0);
		CHECK(uslab_cache_tune_set(sl, "sharedfactor", 5) == 0);
	}
	static void *ps[150];
	CHECK(uslab_cache_alloc_bulk(sl, 60, ps) == 60);
	for (int i = 60; i < 110; i++)
		CHECK((ps[i] = uslab_cache_alloc(sl)) != NULL);
	CHECK(uslab_cache_alloc_bulk(sl, 40, ps + 110) == 40);
	uslab_cache_free_bulk(sl, 50, ps + 100);
}

static char out[1 << 20];
static size_t outlen;
static void to_buf(void *arg, const char *text)
{
	size_t n = strlen(text);
	(void)arg;
	if (outlen + n < sizeof out) {
		memcpy(out + outlen, text, n);
		outlen += n;
		out[outlen] = 0;
	}
}

static void to_stdout(void *arg, const char *text)
{
	(void)arg;
	fputs(text, stdout);
}

static void unit(void)
{
	build_heap();
	/* version 2 snapshot */
	struct uslab_cache_info info = { .version = USLAB_CACHE_INFO_VERSION };
	CHECK(uslab_cache_get_info(a, &info) == 0);
	CHECK(info.active_objects == 1000);
	CHECK(info.object_size == 200);
	CHECK(info.slabs >= 1 && info.total_objects >= 1000);
	if (cache_per_cpu(&info))   /* a part of each CPU this thread ran on */
		CHECK(info.cpu_parts >= 1 && info.cpu_parts <= check_ncpus_conf());
	else
		CHECK(info.cpu_parts == 1);
	switch (info.cpu_mode) {
	case USLAB_CPU_SHEAVES:      /* this thread holds sheaves of obs_a */
		CHECK(info.cpu_slabs == 0 && info.owned_slabs == 0);
		CHECK(info.sheaf_objects <= 2 * info.sheaf_capacity);
		break;
	case USLAB_CPU_CLASSIC:      /* one CPU slab */
		CHECK(info.cpu_slabs == 1 && info.owned_slabs == 0);
		break;
	case USLAB_CPU_HOME:         /* the slabs it allocated from, one of them current */
		CHECK(info.cpu_slabs == 1 && info.owned_slabs >= 1 && info.owned_slabs <= info.slabs);
		break;
	default:                     /* slqb: owned slabs, no current one */
		CHECK(info.cpu_mode == USLAB_CPU_SLQB && info.owned_slabs >= 1);
		break;
	}
	/* the totals mean the same in every mode */
	CHECK(info.allocs - info.frees == info.active_objects);
	CHECK(info.allocs_fast <= info.allocs && info.frees_fast <= info.frees);
	CHECK(info.flags & USLAB_NO_MERGE);
	CHECK(uslab_cache_get_info(b, &info) == 0 && info.active_objects == 200);
	/* version 1 and 2 callers: their layout (30 stat items), nothing
	 * written past it */
	CHECK(uslab_cache_get_info(a, &info) == 0);
	unsigned char raw[sizeof(struct uslab_cache_info) + 16];
	size_t v1_events = offsetof(struct uslab_cache_info, events), v2_end = v1_events + 30 * 8 + 8 + 4 + 4;
	for (unsigned version = 1; version <= 2; version++) {
		memset(raw, 0xab, sizeof raw);
		struct uslab_cache_info *old = (struct uslab_cache_info *)raw;
		old->version = version;
		CHECK(uslab_cache_get_info(a, old) == 0);
		CHECK(old->version == version && old->active_objects == 1000);
		size_t end = version == 1 ? v1_events + 30 * 8 : v2_end;
		for (size_t i = end; i < sizeof raw; i++)
			CHECK(raw[i] == 0xab);
		uint64_t ev[30];
		memcpy(ev, raw + v1_events, sizeof ev);
		CHECK(ev[USLAB_STAT_ALLOC_FAILED] == info.events[USLAB_STAT_ALLOC_FAILED]);
		CHECK(ev[USLAB_STAT_ALLOC_SLAB] == info.events[USLAB_STAT_ALLOC_SLAB]);
	}
	/* obs_slab: slab mode's tunables in version 5 (set in every mode) */
	CHECK(uslab_cache_get_info(sl, &info) == 0 && info.active_objects == 100);
	if (!sl_debugged) {
		CHECK(info.cpu_mode == USLAB_CPU_SLAB);
		CHECK(info.limit == 33 && info.batchcount == 17 && info.sharedfactor == 5);
		CHECK(info.free_slabs <= info.slabs);
	}
	/* a version 4 caller: nothing written past version 4's fields */
	memset(raw, 0xab, sizeof raw);
	((struct uslab_cache_info *)raw)->version = 4;
	CHECK(uslab_cache_get_info(a, (struct uslab_cache_info *)raw) == 0);
	CHECK(((struct uslab_cache_info *)raw)->version == 4 && ((struct uslab_cache_info *)raw)->active_objects == 1000);
	CHECK(((struct uslab_cache_info *)raw)->allocs >= 1000);
	for (size_t i = offsetof(struct uslab_cache_info, limit); i < sizeof raw; i++)
		CHECK(raw[i] == 0xab);
	/* a version 3 caller: nothing written past version 3's fields */
	memset(raw, 0xab, sizeof raw);
	((struct uslab_cache_info *)raw)->version = 3;
	CHECK(uslab_cache_get_info(a, (struct uslab_cache_info *)raw) == 0);
	CHECK(((struct uslab_cache_info *)raw)->version == 3 && ((struct uslab_cache_info *)raw)->active_objects == 1000);
	for (size_t i = offsetof(struct uslab_cache_info, cpu_mode); i < sizeof raw; i++)
		CHECK(raw[i] == 0xab);
	info.version = USLAB_CACHE_INFO_VERSION + 1;
	errno = 0;
	CHECK(uslab_cache_get_info(a, &info) == -1 && errno == EINVAL);
	/* the merged pair */
	info.version = USLAB_CACHE_INFO_VERSION;
	CHECK(uslab_cache_get_info(m2, &info) == 0);
	if (info.alias_of[0])
		CHECK(!strcmp(info.alias_of, "obs_m1") && info.active_objects == 20);
	/* process summary */
	struct uslab_process_info pi = { .version = USLAB_PROCESS_INFO_VERSION };
	CHECK(uslab_process_get_info(&pi) == 0 && pi.mapped_bytes >= pi.used_bytes && pi.used_bytes > 0);

	/* table */
	outlen = 0;
	uslab_stats_print(to_buf, NULL, USLAB_STATS_TABLE);
	CHECK(strstr(out, "Name                   Objects Objsize           Space Slabs/Part/Cpu  O/S O %Fr %Ef") == out);
	CHECK(strstr(out, "\nobs_a                     1000     200 "));
	CHECK(strstr(out, "process: mapped "));
	/* Fast%: of every allocation and free, bulk calls included (the
	 * totals uslabinfo divides by too); obs_slab made 100 of its 150
	 * allocations and all 50 frees in bulk */
	CHECK(uslab_cache_get_info(sl, &info) == 0);
	CHECK(info.events[USLAB_STAT_ALLOC_BULK] == 100 && info.events[USLAB_STAT_FREE_BULK] == 50);
	{
		uint64_t f10 = (info.allocs_fast + info.frees_fast) * 1000 / (info.allocs + info.frees);
		char want[64];
		snprintf(want, sizeof want, " %3u.%u ", (unsigned)(f10 / 10), (unsigned)(f10 % 10));
		const char *row = strstr(out, "\nobs_slab ");
		CHECK(row != NULL);
		const char *eol = strchr(row + 1, '\n');
		const char *hit = strstr(row, want);
		CHECKF(hit && (!eol || hit < eol), "obs_slab's Fast%% should be%s(allocs %" PRIu64 " fast %" PRIu64
		       ", frees %" PRIu64 " fast %" PRIu64 "): %.*s", want, info.allocs, info.allocs_fast, info.frees,
		       info.frees_fast, eol ? (int)(eol - row) : 100, row);
	}
	/* slabinfo 2.1 */
	outlen = 0;
	uslab_stats_print(to_buf, NULL, USLAB_STATS_SLABINFO);
	CHECK(!strncmp(out, "slabinfo - version: 2.1\n# name            <active_objs> <num_objs> <objsize> "
			    "<objperslab> <pagesperslab> : tunables <limit> <batchcount> <sharedfactor> : slabdata "
			    "<active_slabs> <num_slabs> <sharedavail>\n", 200));
	CHECK(strstr(out, "\nobs_a               1000 "));
	/* a SLAB cache shows its tunables, as the kernel's did; SLUB's 0 0 0 */
	CHECK(strstr(out, "\nobs_slab             100 "));
	if (!sl_debugged) {
		const char *row = strstr(out, "\nobs_slab ");
		const char *eol = strchr(row + 1, '\n');
		const char *hit = strstr(row, " : tunables   33   17    5 : slabdata ");
		CHECKF(hit && hit < eol, "obs_slab's 2.1 row: %.*s", (int)(eol - row), row);
	}
	{
		const char *row = strstr(out, "\nobs_a ");
		const char *eol = strchr(row + 1, '\n');
		const char *hit = strstr(row, " : tunables    0    0    0 : slabdata ");
		CHECKF(hit && hit < eol, "obs_a's 2.1 row: %.*s", (int)(eol - row), row);
	}
	/* JSON: shape only here (test_uslabinfo.sh parses it with python3) */
	outlen = 0;
	uslab_stats_print(to_buf, NULL, USLAB_STATS_JSON);
	CHECK(out[0] == '{' && out[outlen - 2] == '}' && out[outlen - 1] == '\n');
	CHECK(strstr(out, "\"name\":\"obs_a\""));
	CHECK(strstr(out, "\"ALLOC_FASTPATH\":"));
	/* not exporting: no path, refresh says ENOENT */
	CHECK(uslab_export_path() == NULL || getenv("USLAB_OPTIONS"));
}

static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig; stop = 1; }

/* The live loop: obs_tick's slow paths every few ms (a process without a
 * serving thread answers on them) until stdin closes, SIGTERM or 120 s. */
static void tick_loop(void)
{
	static void *p[64];
	struct pollfd pfd = { .fd = 0, .events = POLLIN };
	for (int round = 0; !stop && round < 120 * 200; round++) {
		/* 64 objects of 512 B: more than a slab's worth, so slow paths */
		for (int i = 0; i < 64; i++)
			p[i] = uslab_cache_alloc(tick);
		for (int i = 0; i < 64; i++)
			uslab_cache_free(tick, p[i]);
		if (poll(&pfd, 1, 5) > 0) {
			char buf[64];
			if (read(0, buf, sizeof buf) <= 0)
				break;   /* stdin closed: the driver is done */
		}
	}
}

static struct uslab_cache *cpuc;
struct pinned {
	int cpu;      /* in: the CPU to run on */
	int n;        /* in: objects to allocate, then free */
	bool ok;      /* out: the thread ran pinned to cpu */
};

static void *pinned_run(void *arg)
{
	struct pinned *w = arg;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(w->cpu, &set);
	w->ok = !sched_setaffinity(0, sizeof set, &set);
	void **v = malloc((size_t)w->n * sizeof *v);
	CHECK(v != NULL);
	for (int i = 0; i < w->n; i++)
		CHECK((v[i] = uslab_cache_alloc(cpuc)) != NULL);
	for (int i = 0; i < w->n; i++)
		uslab_cache_free(cpuc, v[i]);
	free(v);
	return NULL;
}

static void cpu_child(void)
{
	signal(SIGTERM, on_term);
	tick = uslab_cache_create("obs_tick", 512, 0, USLAB_NO_MERGE, NULL);
	cpuc = uslab_cache_create("obs_cpu", 48, 0, USLAB_NO_MERGE, NULL);
	CHECK(tick && cpuc);
	cpu_set_t allowed;
	CHECK(sched_getaffinity(0, sizeof allowed, &allowed) == 0);
	int pinned = 0, max_cpu = 0;
	for (int cpu = 0, i = 0; cpu < CPU_SETSIZE && i < 64; cpu++) {
		if (!CPU_ISSET(cpu, &allowed))
			continue;
		struct pinned w = { .cpu = cpu, .n = 300 * ++i };
		pthread_t th;
		CHECK(pthread_create(&th, NULL, pinned_run, &w) == 0);
		CHECK(pthread_join(th, NULL) == 0);
		pinned += w.ok;
		max_cpu = cpu;
	}
	struct uslab_cache_info info = { .version = USLAB_CACHE_INFO_VERSION };
	CHECK(uslab_cache_get_info(cpuc, &info) == 0);
	printf("BACKEND %s PERCPU %d\nPINNED %d\n", uslab_cpu_backend(), cache_per_cpu(&info), pinned);
	for (unsigned cpu = 0; cpu <= (unsigned)max_cpu || cpu < check_ncpus_conf(); cpu++) {
		uint64_t ev[USLAB_NR_STAT_ITEMS], objects;
		if (uslab_cache_cpu_stats(cpuc, cpu, ev, USLAB_NR_STAT_ITEMS, &objects)) {
			CHECK(errno == ENOENT);
			continue;
		}
		printf("CPU %u %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", cpu, objects, ev[USLAB_STAT_ALLOC_PCS],
		       ev[USLAB_STAT_FREE_PCS]);
	}
	const char *path = uslab_export_path();
	printf("READY %d %s\n", (int)getpid(), path ? path : "-");
	fflush(stdout);
	tick_loop();   /* (obs_cpu is left alone: its parts' pops and pushes stay as printed) */
	exit(0);
}

static void child(void)
{
	signal(SIGTERM, on_term);
	build_heap();
	const char *path = uslab_export_path();
	printf("READY %d %s\n", (int)getpid(), path ? path : "-");
	fflush(stdout);
	tick_loop();
	exit(0);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "child")) {
		child();
		return 0;
	}
	if (argc > 1 && !strcmp(argv[1], "cpu-child")) {
		cpu_child();
		return 0;
	}
	if (argc > 2 && !strcmp(argv[1], "print")) {
		build_heap();
		unsigned long form = !strcmp(argv[2], "json") ? USLAB_STATS_JSON
				     : !strcmp(argv[2], "slabinfo") ? USLAB_STATS_SLABINFO : USLAB_STATS_TABLE;
		uslab_stats_print(to_stdout, NULL, form);
		return 0;
	}
	check_init("test_stats_api");
	RUN(unit);
	return 0;
}
