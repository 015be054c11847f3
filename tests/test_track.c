/*
 * A tracked build (-DUSLAB_SANITIZE=address -DUSLAB_TRACK=asan): ASan must
 * see uslab's objects as heap blocks: a use after free and an overflow
 * into a neighbour's slot are reported by ASan itself, and correct use is
 * not. Registered only in that build (tests/CMakeLists.txt).
 */
#include "check.h"

static struct uslab_cache *cache;

static void use_after_free(void *arg)
{
	char *p = uslab_cache_alloc(cache);
	uslab_cache_free(cache, p);
	((volatile char *)p)[5] = 1;
}

static void read_never_allocated(void *arg)
{
	char *p = uslab_cache_alloc(cache);
	/* the next slot of the slab has not been handed out */
	volatile char c = p[uslab_cache_size(cache) + 16];
	(void)c;
}

static void clean_use(void)
{
	void *objs[1000];
	for (int r = 0; r < 3; r++) {
		for (int i = 0; i < 1000; i++) {
			objs[i] = uslab_cache_alloc(cache);
			CHECK(objs[i] != NULL);
			memset(objs[i], i, uslab_cache_size(cache));
		}
		for (int i = 0; i < 1000; i++)
			uslab_cache_free(cache, objs[i]);
	}
	CHECK_EQ(uslab_cache_validate(cache), 0);
}

static void expect_asan(const char *what, void (*fn)(void *), const char *needle)
{
	struct child_result *r = malloc(sizeof *r);
	CHECK(r != NULL);
	run_in_child(fn, NULL, 30, r);
	CHECKF(!(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0) && check_contains(r->out, needle),
	       "%s: expected an ASan report '%s'; child stderr:\n%s", what, needle, r->out);
	printf("    %-30s ASan reported: %s\n", what, needle);
	free(r);
}

static void asan_sees_objects(void)
{
	expect_asan("use after free", use_after_free, "use-after-poison");
	expect_asan("never-allocated slot", read_never_allocated, "use-after-poison");
}

int main(void)
{
	check_init("test_track");
	cache = uslab_cache_create("tracked", 40, 0, USLAB_NO_MERGE, NULL);
	CHECK(cache != NULL);
	RUN(clean_use);
	RUN(asan_sees_objects);
	return 0;
}
