/* What a DCGM scrape costs in native code at the least, over scrapes held in memory: the steps
 * of bench/floor_core.h, each left out by building without its -D flag (-DVALUE, -DHASH_WORDS
 * or -DHASH_BYTES, -DDEVICES, -DFACTS). bench/parse_floor.py builds and runs it over the scrapes
 * of a generated fleet.
 * usage: parse_floor FILE SCRAPES REPS [DUMP]   (FILE: the scrapes one after the other; FILE.len:
 * the length of each in bytes, one a line; DUMP: with FACTS, where the last batch records of each
 * kind are written, DUMP.utilization and DUMP.health, so that a reader can check them) */
#include "floor_core.h"

/* a batch record sent: copied out once, as a producer copies a record's value; the last of each
 * kind kept for DUMP */
static struct { unsigned char *p; size_t n, size; } produced, last[2];

static void floor_sent(const unsigned char *record, size_t n, int kind) {
    if (n > produced.size) produced.p = grown(produced.p, produced.size = 2 * n);
    memcpy(produced.p, record, n);
    produced.n = n;
    if (n > last[kind].size) last[kind].p = grown(last[kind].p, last[kind].size = 2 * n);
    memcpy(last[kind].p, record, n);
    last[kind].n = n;
}

static void dump(const char *prefix) {
    const char *names[2] = {"utilization", "health"};
    for (int k = 0; k < 2; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s.%s", prefix, names[k]);
        FILE *out = fopen(path, "wb");
        if (!out || fwrite(last[k].p, 1, last[k].n, out) != last[k].n || fclose(out)) {
            perror(path);
            exit(2);
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) { fprintf(stderr, "usage: %s FILE SCRAPES REPS [DUMP]\n", argv[0]); return 2; }
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
    char lens_path[4096];
    snprintf(lens_path, sizeof lens_path, "%s.len", argv[1]);
    FILE *lf = fopen(lens_path, "r");
    if (!lf) { perror(lens_path); return 2; }
    long *lens = malloc((size_t)scrapes * sizeof *lens);
    for (long i = 0; i < scrapes; i++)
        if (!lens || fscanf(lf, "%ld", &lens[i]) != 1) { fprintf(stderr, "%s: short\n", lens_path); return 2; }
    fclose(lf);
#ifdef FACTS
    if (facts_init() < 0) { fprintf(stderr, "no SHA-256 in OpenSSL\n"); return 2; }
#endif
    double t0 = now_s();
    unsigned scrape_no = 0;
    for (long r = 0; r < reps; r++) {
        const char *p = buf;
        for (long s = 0; s < scrapes; s++) {
            int seen;
            series += scrape_walk(p, (size_t)lens[s], ++scrape_no, "fleet-1024", 1796600000000LL + (long long)s * 10000,
                                  "gpuledger.dcgm.scrapes.v1", 2, s, &seen);
            p += lens[s];
        }
    }
    double dt = now_s() - t0;
    printf("%.3f us_per_scrape %.3f series_per_scrape", dt / reps / scrapes * 1e6, (double)series / reps / scrapes);
#ifdef FACTS
    printf(" %.3f facts_per_scrape", (double)facts_made / reps / scrapes);
    batch_send(&util);  /* the records still open, sent: the last of each kind is theirs */
    batch_send(&health);
    if (argc == 5)
        dump(argv[4]);
#endif
    printf("\n");
    return 0;
}
