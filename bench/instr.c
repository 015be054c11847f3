/*
 * instr: a malloc/free mix to count instructions per operation with
 * valgrind --tool=cachegrind (bench/instr.sh), the same program under every
 * allocator (LD_PRELOAD). Counts are exact and repeat from run to run, so
 * they compare fast paths on a noisy machine where times do not.
 *
 *   instr [--mode mix|pair|batch] [--steps N] [--live N] [--lo B] [--hi B] [--loop-only]
 *
 *   mix    (default) `live` slots (4096) filled first; then `steps` times:
 *          pick a random slot, free its block, allocate a new one of a
 *          random size in [lo, hi] (16..512) into it. One step = one free
 *          and one malloc, most of them of cold blocks.
 *   pair   malloc(lo) and free at once, `steps` times: the hot fast paths.
 *   batch  rounds of `live` mallocs of random sizes, then their frees in a
 *          shuffled order (the same permutation each round); one step =
 *          one malloc and one free.
 *
 * --loop-only runs the same loop with the allocator calls left out (the
 * random numbers, the slot traffic): what the loop itself costs, to be
 * subtracted or quoted beside. bench/instr.sh runs each allocator at two
 * step counts and divides the difference in instructions by the difference
 * in steps, so that start-up and the initial fill cancel out.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

static uint64_t rng = 0x2545f4914f6cdd1dULL;
static inline uint64_t rnd(void)
{
	uint64_t x = rng;   /* xorshift64: a few instructions, as every allocator's loop pays alike */
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng = x;
}

static int loop_only;
static inline void *do_malloc(size_t n)
{
	if (loop_only)
		return (void *)(uintptr_t)(n | 1);
	return malloc(n);
}
static inline void do_free(void *p)
{
	if (!loop_only)
		free(p);
	else
		KEEP(p);
}

int main(int argc, char **argv)
{
	const char *mode = "mix";
	unsigned long steps = 1000000, live = 4096, lo = 16, hi = 512;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--loop-only"))
			loop_only = 1;
		else if (i + 1 < argc && !strcmp(argv[i], "--mode"))
			mode = argv[++i];
		else if (i + 1 < argc && !strcmp(argv[i], "--steps"))
			steps = strtoul(argv[++i], NULL, 0);
		else if (i + 1 < argc && !strcmp(argv[i], "--live"))
			live = strtoul(argv[++i], NULL, 0);
		else if (i + 1 < argc && !strcmp(argv[i], "--lo"))
			lo = strtoul(argv[++i], NULL, 0);
		else if (i + 1 < argc && !strcmp(argv[i], "--hi"))
			hi = strtoul(argv[++i], NULL, 0);
		else {
			fprintf(stderr, "usage: instr [--mode mix|pair|batch] [--steps N] [--live N] [--lo B] "
					"[--hi B] [--loop-only]\n");
			return 2;
		}
	}
	if (!live || lo < 1 || hi < lo) {
		fprintf(stderr, "instr: bad sizes\n");
		return 2;
	}
	unsigned long span = hi - lo + 1;
	void **slot = calloc(live, sizeof(void *));
	unsigned *perm = malloc(live * sizeof(unsigned));
	if (!slot || !perm)
		return 1;
	if (!strcmp(mode, "mix")) {
		for (unsigned long i = 0; i < live; i++)
			slot[i] = do_malloc(lo + rnd() % span);
		for (unsigned long s = 0; s < steps; s++) {
			uint64_t r = rnd();
			unsigned long i = (r >> 32) % live;
			do_free(slot[i]);
			slot[i] = do_malloc(lo + (uint32_t)r % span);
			KEEP(slot[i]);
		}
		for (unsigned long i = 0; i < live; i++)
			do_free(slot[i]);
	} else if (!strcmp(mode, "pair")) {
		for (unsigned long s = 0; s < steps; s++) {
			void *p = do_malloc(lo);
			KEEP(p);
			do_free(p);
		}
	} else if (!strcmp(mode, "batch")) {
		for (unsigned long i = 0; i < live; i++)
			perm[i] = (unsigned)i;
		for (unsigned long i = live - 1; i > 0; i--) {
			unsigned long j = rnd() % (i + 1);
			unsigned t = perm[i];
			perm[i] = perm[j];
			perm[j] = t;
		}
		for (unsigned long done = 0; done < steps; done += live) {
			for (unsigned long i = 0; i < live; i++) {
				slot[i] = do_malloc(lo + rnd() % span);
				KEEP(slot[i]);
			}
			for (unsigned long i = 0; i < live; i++)
				do_free(slot[perm[i]]);
		}
	} else {
		fprintf(stderr, "instr: unknown mode '%s'\n", mode);
		return 2;
	}
	printf("instr: mode %s steps %lu live %lu sizes %lu..%lu%s\n", mode, steps, live, lo, hi,
	       loop_only ? " (loop only)" : "");
	return 0;
}
