/* What the two halves of the _dcgm_walk module share (domain/_dcgm_walk.c: the walk and the
 * module; domain/_dcgm_samples.c: the samples; domain/_dcgm_table.c: its lookups). */
#ifndef GPULEDGER_DCGM_WALK_H
#define GPULEDGER_DCGM_WALK_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyObject *dcgm_samples(PyObject *self, PyObject *args);
int dcgm_samples_init(void);  /* 0, or -1 with the error set */
/* the names samples are built of, set by dcgm_samples_init: the exporter fields' (domain/dcgm.py
 * _FIELDS' values, the three ratio fields first) and a DeviceSample's, in its dataclass's order */
#define NFIELD 6  /* sm_active, gr_active, gpu_util_pct, fb_used_mib, power_w, energy_mj */
extern PyObject *dcgm_field[NFIELD];
enum { S_UUID, S_INSTANCE, S_RATIO, S_FB, S_POWER, S_ENERGY, S_MODEL, S_PER_POD, S_N };
extern PyObject *sample_key[S_N], *dcgm_no_args;
/* a sample of cls from its S_N fields' values (new references, taken; NULL where one could not
 * be made): in its slots, or as its __dict__ (as ``built``) */
PyObject *sample_new(PyObject *cls, PyObject **values);

/* domain/_dcgm_table.c: series found by their bytes, plain decimals read exactly, recent devices */
#include <stdint.h>
uint64_t series_hash(const char *s, Py_ssize_t n);
PyObject *series_table_find(PyObject *cache, const char *s, Py_ssize_t n, uint64_t hash);  /* borrowed, or NULL */
int series_table_put(PyObject *cache, const char *s, Py_ssize_t n, uint64_t hash, PyObject *info);  /* 0, or -1 with the error set */
PyObject *dcgm_table_size(PyObject *self, PyObject *unused);  /* table_size() */
int plain_decimal(const char *s, const char *stop, double *out);  /* 1 read, 0 left to float() */
PyObject *plain_float(PyObject *text, Py_ssize_t from, Py_ssize_t to);  /* new reference, or NULL: ask float() */

/* The dicts of the devices a walk met last, found by their key object: a scrape's series
 * name a few devices over and over, with the same key objects (from the series' cached
 * info), and the dict holding each key keeps it alive for the walk. A key not met yet, or
 * equal to one met under another object, is looked up in the dict as before. */
#define RECENT 16
typedef struct {
    PyObject *key[RECENT], *value[RECENT];  /* borrowed */
    int n;
} Recent;

PyObject *recent_find(const Recent *r, PyObject *key);  /* borrowed, or NULL */
void recent_keep(Recent *r, PyObject *key, PyObject *value);
PyObject *inner_dict(PyObject *d, PyObject *key);  /* d.setdefault(key, {}), borrowed; NULL on error */
/* where c is in text[start:end], first (direction 1) or last (-1): -1 nowhere, -2 on error */
Py_ssize_t find_char(PyObject *text, int plain, Py_ssize_t start, Py_ssize_t end, char c, int direction);

/* domain/_dcgm_reading.c: a line's value, and a health series' reading of it */
extern PyObject *dcgm_value_of, *dcgm_lenient;  /* domain/dcgm.py's helpers (set by setup) */
extern double dcgm_sentinel, dcgm_fp64_blank, dcgm_fp64_blank_end, dcgm_int64_limit;
/* float(rest), or what fallback (dcgm_value_of: raises naming the line; dcgm_lenient: None) makes of it */
PyObject *read_value(PyObject *rest, PyObject *line, PyObject *fallback);
int health_reading(PyObject *health, PyObject *value, PyObject *rest, PyObject *health_out, Recent *devices);

/* domain/_dcgm_template.c: a node's last scrape, whose lines its next one is met with */
typedef struct {
    Py_ssize_t start, len;  /* a line's series: text[start:start + len] */
    PyObject *info;         /* what the cache held for it (a new reference), or NULL: none kept */
} Hint;
typedef struct TemplateObject TemplateObject;
extern PyTypeObject TemplateType;
typedef struct {
    TemplateObject *t;  /* the template handed to the walk, or NULL */
    const char *old;    /* its text, where its lines may be met (else hints is NULL) */
    const Hint *hints;
    Py_ssize_t nhints;
    Hint *rec;  /* this walk's lines, each kept where its series was found in the cache */
    Py_ssize_t n, size, met;  /* met: lines whose series was the template's */
} Lines;
void lines_start(Lines *l, PyObject *template, PyObject *text, PyObject *cache);  /* template NULL: none */
int lines_next(Lines *l);  /* a line begins: 0, or -1 with the error set */
PyObject *lines_hint(Lines *l, const char *series, Py_ssize_t len);  /* the line's info (borrowed), or NULL */
void lines_keep(Lines *l, Py_ssize_t start, Py_ssize_t len, PyObject *info);  /* the line's series was found */
void lines_end(Lines *l, PyObject *text, PyObject *cache, int kept);  /* kept: the walk ended well */

/* domain/_dcgm_devices.c: a scrape's devices in C while the walk reads it, then its samples */
#define NRATIO 3  /* dcgm_field's first: the ratio fields */
typedef struct {
    PyObject *key, *model;  /* new references */
    double value[NFIELD];
    unsigned has;  /* bit i: value[i] was put */
    PyObject *pod[NRATIO];  /* a ratio field's one pod (new reference) and its value, */
    double pod_value[NRATIO];
    PyObject *pods[NRATIO];  /* or {pod: value} once a second pod came */
} Device;
#define HELD_DEVICES 16
typedef struct {
    Device *d, held[HELD_DEVICES], *last;  /* d: held, or a larger array on the heap */
    Py_ssize_t n, size;
} Devices;
#define DEVICES_INIT(ds) ((ds).d = (ds).held, (ds).last = NULL, (ds).n = 0, (ds).size = HELD_DEVICES)
void devices_clear(Devices *ds);
/* a valid attribution value of a series: 1 new, 0 repeated, -1 error, -2 not what the devices hold */
int devices_put(Devices *ds, PyObject *key, PyObject *field, PyObject *model, PyObject *pod, PyObject *ratio,
                PyObject *value);
PyObject *devices_samples(Devices *ds, PyObject *per_pod, PyObject *cls);  /* the samples in device order */
/* a device's sample (its key's UUID and instance, model, values; per_pod_value taken, NULL an
 * error), its fields put as domain/dcgm_reference.py ``_samples`` puts them; NULL on error */
PyObject *device_sample(const Device *d, PyObject *per_pod_value, PyObject *cls);

#endif
