/* What parsing a DCGM scrape costs in native code at the least: the lines split, each series
 * (name and labels) hashed, its value read. bench/parse_floor.py builds and runs it over the
 * scrapes of a generated fleet; a step is left out by building without its -D flag.
 * usage: parse_floor FILE SCRAPES REPS   (FILE: the scrapes, one after the other) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t hash_series(const char *p, const char *end) {
#if defined(HASH_BYTES) /* FNV-1a, a byte at a time */
    uint64_t h = 1469598103934665603ULL;
    for (; p < end; p++) { h ^= (unsigned char)*p; h *= 1099511628211ULL; }
    return h;
#elif defined(HASH_WORDS) /* eight bytes at a time, multiply and fold */
    uint64_t h = 0x9E3779B97F4A7C15ULL, w;
    for (; p + 8 <= end; p += 8) { memcpy(&w, p, 8); h = (h ^ w) * 0xFF51AFD7ED558CCDULL; h ^= h >> 32; }
    w = 0;
    memcpy(&w, p, (size_t)(end - p));
    return (h ^ w) * 0xC4CEB9FE1A85EC53ULL;
#else
    return (uint64_t)(end - p);
#endif
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: %s FILE SCRAPES REPS\n", argv[0]); return 2; }
    FILE *f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 2; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) { fprintf(stderr, "%s: short read\n", argv[1]); return 2; }
    buf[n] = 0;
    fclose(f);
    long scrapes = atol(argv[2]), reps = atol(argv[3]), series = 0;
    volatile double values = 0;
    volatile uint64_t hashes = 0;
    double t0 = now_s();
    for (long r = 0; r < reps; r++) {
        for (char *p = buf, *end = buf + n, *nl; p < end; p = nl + 1) {
            nl = memchr(p, '\n', (size_t)(end - p));
            if (!nl) nl = end;
            if (p == nl || *p == '#') continue;
            char *close = memchr(p, '}', (size_t)(nl - p));
            char *space = close ? close + 1 : memchr(p, ' ', (size_t)(nl - p));
            if (!space) continue;
            hashes += hash_series(p, space);
#ifdef VALUE
            values += strtod(space, NULL);
#endif
            series++;
        }
    }
    double dt = now_s() - t0;
    printf("%.3f us_per_scrape %.3f series_per_scrape\n", dt / reps / scrapes * 1e6, (double)series / reps / scrapes);
    return 0;
}
