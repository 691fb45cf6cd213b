/* The native floor's steps, shared by bench/parse_floor.c (over scrapes held in memory) and
 * bench/worker_floor.c (over a fleet's records from a Kafka consume loop): the lines split,
 * each series (name and labels) hashed, its value read; with -DDEVICES each series found in a
 * table by its hash and its value kept in its device's slot; with -DFACTS (and DEVICES) each
 * device's facts of the scrape made as a worker writes them for exclusive GPUs: a utilization
 * fact and a health fact, each with its id (SHA-256 over its parts, as domain/_fact_id.c, by
 * OpenSSL's EVP) and its Avro body (the fields of utilization_fact v2 and gpu_health_fact v1
 * in order), into a kind's batch record, sent at 500 facts. A step is left out by building
 * without its -D flag. The file including this one defines ``floor_sent``: what is done with
 * a batch record sent (its bytes, an Avro array of the kind's facts). */
#ifndef GPULEDGER_FLOOR_CORE_H
#define GPULEDGER_FLOOR_CORE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef FACTS
#include <openssl/evp.h>
#endif
#if (defined(DEVICES) && !defined(VALUE)) || (defined(FACTS) && !defined(DEVICES))
#error "DEVICES needs VALUE, FACTS needs DEVICES"
#endif

static void floor_sent(const unsigned char *record, size_t n, int kind);  /* kind 0 utilization, 1 health */

static void *grown(void *p, size_t size) {
    p = realloc(p, size);
    if (!p) { fprintf(stderr, "floor: out of memory\n"); exit(2); }
    return p;
}

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

#ifdef DEVICES
/* A device (GPU) and a series' slot: the table maps a series' hash to its device and field;
 * devices are found by their UUID's hash. */
#define NFIELD 5
typedef struct {
    char uuid[64], node[64], ns[64], pod[96], capacity_fact_id[33];
    double value[NFIELD];
    unsigned has, seen_at;
} Device;
typedef struct {
    uint64_t hash;
    int device, field;  /* field -1: not an attribution series */
} Slot;
#define TABLE (1 << 20)
static Slot table[TABLE];
static struct { uint64_t hash; int device; } by_uuid[TABLE];
static Device *devices;
static int ndevices, devices_size;
static const char *FIELDS[NFIELD] = {"DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED",
                                     "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"};

/* label="value" of the series' labels into out (empty where absent) */
static void label(const char *p, const char *end, const char *name, char *out, size_t size) {
    size_t n = strlen(name);
    out[0] = 0;
    for (const char *q = p; q + n + 2 < end; q++) {
        if ((q == p || q[-1] == '{' || q[-1] == ',') && memcmp(q, name, n) == 0 && q[n] == '=' && q[n + 1] == '"') {
            const char *v = q + n + 2, *close = memchr(v, '"', (size_t)(end - v));
            size_t len = close ? (size_t)(close - v) : 0;
            if (len >= size) len = size - 1;
            memcpy(out, v, len);
            out[len] = 0;
            return;
        }
    }
}

static int device_of(const char *uuid) {
    uint64_t h = hash_series(uuid, uuid + strlen(uuid)) | 1;
    size_t i = (size_t)(h & (TABLE - 1));
    for (; by_uuid[i].hash != 0; i = (i + 1) & (TABLE - 1))
        if (by_uuid[i].hash == h && strcmp(devices[by_uuid[i].device].uuid, uuid) == 0)
            return by_uuid[i].device;
    if (ndevices == devices_size) {
        devices_size = devices_size ? 2 * devices_size : 1024;
        devices = grown(devices, (size_t)devices_size * sizeof *devices);
    }
    memset(&devices[ndevices], 0, sizeof *devices);
    snprintf(devices[ndevices].uuid, sizeof devices->uuid, "%s", uuid);
    /* the capacity fact the samples are attributed to: its id comes with its piece */
    snprintf(devices[ndevices].capacity_fact_id, sizeof devices->capacity_fact_id, "%032x", ndevices);
    by_uuid[i].hash = h;
    by_uuid[i].device = ndevices;
    return ndevices++;
}

static Slot *slot_of(uint64_t h, const char *p, const char *brace, const char *end) {
    size_t i = (size_t)(h & (TABLE - 1));
    while (table[i].hash != 0 && table[i].hash != h) i = (i + 1) & (TABLE - 1);
    if (table[i].hash == 0) {  /* first seen: its labels read once */
        char uuid[64];
        table[i].hash = h;
        table[i].field = -1;
        for (int f = 0; f < NFIELD; f++)
            if ((size_t)(brace - p) == strlen(FIELDS[f]) && memcmp(p, FIELDS[f], (size_t)(brace - p)) == 0)
                table[i].field = f;
        label(brace, end, "UUID", uuid, sizeof uuid);
        table[i].device = device_of(uuid);
        Device *d = &devices[table[i].device];
        label(brace, end, "Hostname", d->node, sizeof d->node);
        label(brace, end, "namespace", d->ns, sizeof d->ns);
        label(brace, end, "pod", d->pod, sizeof d->pod);
    }
    return &table[i];
}
#endif

#ifdef FACTS
/* Avro: zigzag varints, strings as length and bytes, a union's branch then its value */
typedef struct {
    unsigned char *p;
    size_t used, size;
} Buf;
static void need(Buf *b, size_t n) {
    if (b->used + n > b->size) {
        b->size = 2 * (b->used + n);
        b->p = grown(b->p, b->size);
    }
}
static void put_long(Buf *b, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    need(b, 10);
    while (z >= 0x80) { b->p[b->used++] = (unsigned char)(z | 0x80); z >>= 7; }
    b->p[b->used++] = (unsigned char)z;
}
static void put_str(Buf *b, const char *s, size_t n) {
    put_long(b, (int64_t)n);
    need(b, n);
    memcpy(b->p + b->used, s, n);
    b->used += n;
}
#define PUT(b, s) put_str(b, s, strlen(s))
static void put_double(Buf *b, double v) {  /* ["null", "double"], present */
    put_long(b, 1);
    need(b, 8);
    memcpy(b->p + b->used, &v, 8);
    b->used += 8;
}
static void put_null(Buf *b) { put_long(b, 0); }

static EVP_MD *sha256;
static EVP_MD_CTX *ctx;
static int facts_init(void) {
    sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
    ctx = EVP_MD_CTX_new();
    return sha256 && ctx ? 0 : -1;
}

/* the first 32 hex digits of SHA-256 over the parts joined by U+001F */
static void fact_id(const char **parts, int n, char out[33]) {
    unsigned char in[512], md[EVP_MAX_MD_SIZE];
    unsigned md_len = 0;
    size_t used = 0;
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < n; i++) {
        size_t len = strlen(parts[i]);
        if (used + len + 1 > sizeof in) { fprintf(stderr, "floor: fact id parts too long\n"); exit(2); }
        if (i) in[used++] = 0x1f;
        memcpy(in + used, parts[i], len);
        used += len;
    }
    if (!EVP_DigestInit_ex2(ctx, sha256, NULL) || !EVP_DigestUpdate(ctx, in, used) ||
        !EVP_DigestFinal_ex(ctx, md, &md_len)) { fprintf(stderr, "floor: SHA-256 failed\n"); exit(2); }
    for (int i = 0; i < 16; i++) { out[2 * i] = hex[md[i] >> 4]; out[2 * i + 1] = hex[md[i] & 15]; }
    out[32] = 0;
}

/* a kind's batch record (an Avro array: a block per fact), sent at 500 facts */
typedef struct {
    Buf buf;
    long n;
    int kind;
} Batch;
static Batch util = {.kind = 0}, health = {.kind = 1};
static long facts_made;
static void batch_send(Batch *b) {
    if (b->n == 0) return;
    put_long(&b->buf, 0);  /* the array's end */
    floor_sent(b->buf.p, b->buf.used, b->kind);
    b->buf.used = 0;
    b->n = 0;
}
static Buf *fact_start(Batch *b) {
    if (b->n == 500) batch_send(b);
    b->n++;
    facts_made++;
    put_long(&b->buf, 1);  /* a block of one fact */
    return &b->buf;
}

/* a device's utilization fact (v2's fields in order) and health fact (v1's) of a scrape at t */
static void device_facts(const Device *d, const char *cluster, long long t, const char *topic, int partition,
                         long long offset) {
    char ts[24], id[33];
    Buf *b;
    snprintf(ts, sizeof ts, "%lld", t);
    const char *u_parts[] = {"utilization", cluster, d->uuid, ts};
    fact_id(u_parts, 4, id);
    b = fact_start(&util);
    PUT(b, id); PUT(b, cluster); PUT(b, d->uuid); PUT(b, d->uuid); PUT(b, d->node);
    put_long(b, t); put_long(b, 10000);
    put_double(b, d->value[0]);
    put_long(b, 1); put_long(b, (int64_t)(d->value[2] * 1048576.0));
    put_double(b, d->value[3]); put_double(b, d->value[4] / 1000.0);
    PUT(b, d->capacity_fact_id); PUT(b, "exclusive"); PUT(b, "tenant-research"); PUT(b, "project-llm-train");
    PUT(b, d->ns); PUT(b, d->pod); PUT(b, "0b9f2c1e-5d4a-4c3b-9a8e-7f6d5c4b3a21");
    PUT(b, d->ns[0] ? "high" : "unattributed"); PUT(b, "");
    PUT(b, topic); put_long(b, partition); put_long(b, offset);
    const char *h_parts[] = {"health", cluster, d->uuid, "None", ts};
    fact_id(h_parts, 5, id);
    b = fact_start(&health);
    PUT(b, id); PUT(b, cluster); PUT(b, d->node); PUT(b, d->uuid); put_null(b);
    PUT(b, ""); PUT(b, "NVIDIA H100 80GB HBM3"); PUT(b, "00000000:18:00.0"); put_long(b, t);
    for (int f = 0; f < 18; f++) put_null(b);  /* xid_last .. fb_free_bytes */
    put_long(b, 1); put_long(b, (int64_t)(d->value[2] * 1048576.0));  /* fb_used_bytes */
    for (int f = 0; f < 3; f++) put_null(b);  /* fb_reserved_bytes .. thermal_violation_s */
    PUT(b, topic); put_long(b, partition); put_long(b, offset);
}
#endif

/* One scrape, p[0:n): its series walked by the steps built in; returns the series read and
 * sets *devices_seen to the devices whose values it held (DEVICES). ``scrape_no`` is new for
 * every scrape. */
static long scrape_walk(const char *p, size_t n, unsigned scrape_no, const char *cluster, long long t,
                        const char *topic, int partition, long long offset, int *devices_seen) {
    const char *end = p + n, *nl;
    long series = 0;
    static volatile double values;
    static volatile uint64_t hashes;
#ifdef DEVICES
    int seen[256], nseen = 0;
#endif
    (void)cluster, (void)t, (void)topic, (void)partition, (void)offset;
    for (; p < end; p = nl + 1) {
        nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) nl = end;
        if (p == nl || *p == '#') continue;
        const char *brace = memchr(p, '{', (size_t)(nl - p));
        const char *close = brace ? memchr(brace, '}', (size_t)(nl - brace)) : NULL;
        const char *space = close ? close + 1 : memchr(p, ' ', (size_t)(nl - p));
        if (!space) continue;
        uint64_t h = hash_series(p, space);
        hashes += h;
#ifdef VALUE
        double v = strtod(space, NULL);
        values += v;
#endif
#ifdef DEVICES
        Slot *slot = slot_of(h | 1, p, brace ? brace : space, space);
        if (slot->field >= 0) {
            Device *d = &devices[slot->device];
            if (d->seen_at != scrape_no) {
                d->seen_at = scrape_no, d->has = 0;
                if (nseen < 256) seen[nseen++] = slot->device;
            }
            d->value[slot->field] = v;
            d->has |= 1u << slot->field;
        }
#endif
        series++;
    }
#ifdef DEVICES
    *devices_seen = nseen;
#else
    *devices_seen = 0;
#endif
#ifdef FACTS
    for (int i = 0; i < nseen; i++)
        device_facts(&devices[seen[i]], cluster, t, topic, partition, offset);
#endif
    return series;
}

#endif
