/*
 * smallloop: a single-thread malloc/free loop of 16 .. 64 bytes. Each of
 * ROUNDS rounds makes PAIRS allocations each freed at once (malloc, write,
 * free), then a burst: 8 .. 64 blocks allocated, written, and freed in
 * reverse order (LIFO) or in allocation order (FIFO), one or the other at
 * random. Sizes cycle through 16, 17, .., 64 bytes, one step per malloc.
 *
 *   smallloop [ROUNDS=1000000] [PAIRS=16]
 */
#include "common.h"

#define BURST_MAX 64

int main(int argc, char **argv)
{
	long rounds = arg_or(argc, argv, 1, 1000000);
	long pairs = arg_or(argc, argv, 2, 16);
	uint64_t seed = 42, sum = 0;
	unsigned sz = 0;   /* size - 16, cycles 0 .. 48 */
	char *b[BURST_MAX];
	for (long r = 0; r < rounds; r++) {
		for (long i = 0; i < pairs; i++) {
			size_t n = 16 + sz;
			sz = sz == 48 ? 0 : sz + 1;
			char *p = xmalloc(n);
			p[0] = (char)r;
			p[n - 1] = (char)n;
			/* keep the compiler from pairing malloc and free away */
			__asm__ volatile("" : : "r"(p) : "memory");
			sum += (unsigned char)p[n - 1];
			free(p);
		}
		uint64_t x = rnd(&seed);
		unsigned m = 8 + (unsigned)(x % (BURST_MAX - 7));
		for (unsigned i = 0; i < m; i++) {
			size_t n = 16 + sz;
			sz = sz == 48 ? 0 : sz + 1;
			b[i] = xmalloc(n);
			b[i][0] = (char)i;
			b[i][n - 1] = (char)n;
		}
		__asm__ volatile("" : : "r"(b) : "memory");
		if (x >> 63) {
			for (unsigned i = m; i-- > 0;) {
				sum += (unsigned char)b[i][0];
				free(b[i]);
			}
		} else {
			for (unsigned i = 0; i < m; i++) {
				sum += (unsigned char)b[i][0];
				free(b[i]);
			}
		}
	}
	printf("smallloop: checksum %llu\n", (unsigned long long)sum);
	return 0;
}
