/*
 * strbuild: a realloc-heavy string builder. STRINGS strings are built at
 * once by appending pieces of 1 .. 64 bytes, each append a realloc to the
 * exact new length (as naive code does); target lengths are log-uniform up
 * to MAXLEN. Then the strings are freed and the next batch starts.
 *
 *   strbuild [BATCHES=20] [STRINGS=200] [MAXLEN=1048576]
 */
#include "common.h"

int main(int argc, char **argv)
{
	long batches = arg_or(argc, argv, 1, 20);
	long nstr = arg_or(argc, argv, 2, 200);
	long maxlen = arg_or(argc, argv, 3, 1 << 20);
	uint64_t seed = 42, sum = 0;
	char **s = calloc((size_t)nstr, sizeof *s);
	size_t *len = calloc((size_t)nstr, sizeof *len), *want = calloc((size_t)nstr, sizeof *want);
	for (long b = 0; b < batches; b++) {
		size_t left = 0;
		for (long i = 0; i < nstr; i++) {
			want[i] = rnd_size(&seed, 16, (size_t)maxlen);
			len[i] = 0;
			s[i] = NULL;
			left++;
		}
		while (left) {
			for (long i = 0; i < nstr; i++) {
				if (len[i] >= want[i])
					continue;
				size_t piece = 1 + rnd(&seed) % 64;
				char *p = realloc(s[i], len[i] + piece + 1);
				if (!p) {
					fprintf(stderr, "strbuild: out of memory\n");
					return 1;
				}
				memset(p + len[i], 'a' + (int)(piece % 26), piece);
				len[i] += piece;
				p[len[i]] = 0;
				s[i] = p;
				if (len[i] >= want[i])
					left--;
			}
		}
		for (long i = 0; i < nstr; i++) {
			sum += (unsigned char)s[i][len[i] / 2] + len[i];
			free(s[i]);
		}
	}
	printf("strbuild: checksum %llu\n", (unsigned long long)sum);
	return 0;
}
