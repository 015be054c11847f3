/*
 * self_stats: a program that reads its own allocator statistics, the
 * kernel's /proc/slabinfo and SLUB event counters, from inside.
 *
 * Two worker threads allocate and free objects of two caches (one thread
 * frees what the other allocated, as producers and consumers do); then the
 * program reads
 *   - uslab_cache_get_info(): layout, slabs, objects, the totals of
 *     allocations and frees (the same in every per-CPU mode) and every
 *     event counter of each cache, named by uslab_stat_name();
 *   - uslab_process_get_info(): the page allocator's view of the process;
 *   - uslab_stats_print(): the whole table, here captured into a buffer
 *     through the callback, and the /proc/slabinfo 2.1 form to stdout.
 *
 * Build against an installed uslab:
 *   cc -O2 -o self_stats self_stats.c $(pkg-config --cflags --libs uslab) -pthread
 * or with CMake: target_link_libraries(self_stats PRIVATE uslab::uslab).
 */
#include <uslab.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDS 200
#define BATCH 256

struct event { uint64_t when; uint32_t kind; char payload[52]; };
struct session { uint64_t id; char user[120]; };

static struct uslab_cache *events, *sessions;

/* The producer hands each batch of events to the consumer through this slot. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct event *batch[BATCH];
	int full, done;
} slot = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, { 0 }, 0, 0 };

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void *producer(void *arg)
{
	for (int r = 0; r < ROUNDS; r++) {
		struct event *b[BATCH];
		/* bulk allocation: all or nothing */
		if (uslab_cache_alloc_bulk(events, BATCH, (void **)b) != BATCH)
			die("uslab_cache_alloc_bulk");
		for (int i = 0; i < BATCH; i++)
			b[i]->when = (uint64_t)r * BATCH + (uint64_t)i;
		/* sessions come and go in this thread alone */
		struct session *s = uslab_cache_zalloc(sessions);
		if (!s)
			die("uslab_cache_zalloc");
		s->id = (uint64_t)r;
		uslab_cache_free(sessions, s);

		pthread_mutex_lock(&slot.lock);
		while (slot.full)
			pthread_cond_wait(&slot.cond, &slot.lock);
		memcpy(slot.batch, b, sizeof b);
		slot.full = 1;
		pthread_cond_broadcast(&slot.cond);
		pthread_mutex_unlock(&slot.lock);
	}
	pthread_mutex_lock(&slot.lock);
	slot.done = 1;
	pthread_cond_broadcast(&slot.cond);
	pthread_mutex_unlock(&slot.lock);
	return arg;
}

static void *consumer(void *arg)
{
	for (;;) {
		struct event *b[BATCH];
		pthread_mutex_lock(&slot.lock);
		while (!slot.full && !slot.done)
			pthread_cond_wait(&slot.cond, &slot.lock);
		if (!slot.full) {
			pthread_mutex_unlock(&slot.lock);
			return arg;
		}
		memcpy(b, slot.batch, sizeof b);
		slot.full = 0;
		pthread_cond_broadcast(&slot.cond);
		pthread_mutex_unlock(&slot.lock);
		/* freeing objects another thread allocated: remote frees */
		for (int i = 0; i < BATCH; i += 2)
			uslab_cache_free(events, b[i]);
		for (int i = 1; i < BATCH; i += 2)
			uslab_cache_free(events, b[i]);
	}
}

static void show_cache(struct uslab_cache *c)
{
	struct uslab_cache_info info;
	memset(&info, 0, sizeof info);
	info.version = USLAB_CACHE_INFO_VERSION;   /* the fields this program knows */
	if (uslab_cache_get_info(c, &info))
		die("uslab_cache_get_info");
	printf("cache %s%s%s: %zu-byte objects in %zu-byte slots, %u per slab of order %u\n", info.name,
	       info.alias_of[0] ? " (alias of " : "", info.alias_of[0] ? info.alias_of : "",
	       info.object_size, info.slab_object_size, info.objects_per_slab, info.order);
	printf("  %" PRIu64 " slabs (%" PRIu64 " on the node partial list), %" PRIu64 "/%" PRIu64 " objects in use, %" PRIu64 " bytes\n",
	       info.slabs, info.partial_slabs, info.active_objects, info.total_objects, info.slab_bytes);
	/* the totals mean the same in every per-CPU mode; the events below
	 * are the paths the cache's mode took */
	printf("  %" PRIu64 " allocations (%" PRIu64 " on the fast path), %" PRIu64 " frees (%" PRIu64
	       " on the fast path)\n", info.allocs, info.allocs_fast, info.frees, info.frees_fast);
	for (int i = 0; i < USLAB_NR_STAT_ITEMS; i++)
		if (info.events[i])
			printf("  %-24s %10" PRIu64 "  %s\n", uslab_stat_name((enum uslab_stat_item)i), info.events[i],
			       uslab_stat_desc((enum uslab_stat_item)i));
}

/* uslab_stats_print() calls this with pieces of text; it may allocate. */
struct text { char *buf; size_t len, cap; };
static void collect(void *arg, const char *piece)
{
	struct text *t = arg;
	size_t n = strlen(piece);
	if (t->len + n + 1 > t->cap) {
		t->cap = (t->len + n + 1) * 2;
		t->buf = realloc(t->buf, t->cap);
		if (!t->buf)
			die("realloc");
	}
	memcpy(t->buf + t->len, piece, n + 1);
	t->len += n;
}

int main(void)
{
	events = uslab_cache_create("event", sizeof(struct event), 0, USLAB_NO_MERGE, NULL);
	sessions = uslab_cache_create("session", sizeof(struct session), 0, USLAB_NO_MERGE, NULL);
	if (!events || !sessions)
		die("uslab_cache_create");

	pthread_t p, c;
	if (pthread_create(&p, NULL, producer, NULL) || pthread_create(&c, NULL, consumer, NULL))
		die("pthread_create");
	pthread_join(p, NULL);
	pthread_join(c, NULL);

	printf("uslab %d (header %s)\n\n", uslab_version(), USLAB_VERSION_STRING);
	show_cache(events);
	show_cache(sessions);

	struct uslab_process_info pi;
	memset(&pi, 0, sizeof pi);
	pi.version = USLAB_PROCESS_INFO_VERSION;
	if (uslab_process_get_info(&pi))
		die("uslab_process_get_info");
	printf("\nprocess: %" PRIu64 " segments, %" PRIu64 " KiB mapped, %" PRIu64 " KiB used, %" PRIu64 " KiB RSS\n",
	       pi.segments, pi.mapped_bytes >> 10, pi.used_bytes >> 10, pi.rss_bytes >> 10);

	struct text table = { 0 };
	uslab_stats_print(collect, &table, USLAB_STATS_TABLE);
	printf("\nthe statistics table, %zu bytes:\n%s", table.len, table.buf);
	if (!table.buf || !strstr(table.buf, "event") || !strstr(table.buf, "session")) {
		fprintf(stderr, "self_stats: the table lacks this program's caches\n");
		return 1;
	}
	free(table.buf);

	printf("\n/proc/slabinfo form:\n");
	fflush(stdout);
	uslab_stats_print_fd_opts(1, USLAB_STATS_SLABINFO);

	uslab_cache_destroy(events);
	uslab_cache_destroy(sessions);
	return 0;
}
