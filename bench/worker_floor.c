/* A worker's per-record path in native code at the least, as a library a Kafka consume loop in
 * Python hands whole batches to (bench/worker_floor.py, loaded with ctypes.PyDLL: the calls
 * hold the GIL): a DCGM record's Avro fields read, its scrape walked and its facts made by the
 * steps of bench/floor_core.h (built with -DVALUE -DHASH_WORDS -DDEVICES -DFACTS), a
 * PodResources record's response compared with its node's last one (a copy kept where it
 * changed). The batch records sent are appended to an outbox the loop produces from. Not the
 * engine: no attribution, no capacity facts, no health fold.
 *
 * wf_messages(messages, dcgm_topic, changed): a consume batch (confluent-kafka Message
 * objects, read with their value(), topic(), partition() and offset() from C), each record
 * of the DCGM topic or else a PodResources record. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "floor_core.h"

static Buf outbox;  /* the batch records sent: each a 4-byte length, a kind byte, its bytes */
static char topic[256];
static unsigned scrape_no;

static void floor_sent(const unsigned char *record, size_t n, int kind) {
    uint32_t len = (uint32_t)n;
    need(&outbox, 5 + n);
    memcpy(outbox.p + outbox.used, &len, 4);
    outbox.p[outbox.used + 4] = (unsigned char)kind;
    memcpy(outbox.p + outbox.used + 5, record, n);
    outbox.used += 5 + n;
}

/* A node's last PodResources response, found by its name's hash. */
#define NODES (1 << 16)
static struct { uint64_t hash; char *name, *response; size_t name_len, len; } nodes[NODES];

int wf_init(const char *dcgm_topic) {
    snprintf(topic, sizeof topic, "%s", dcgm_topic);
    return facts_init();
}

size_t wf_outbox(const unsigned char **p) {
    *p = outbox.p;
    return outbox.used;
}

void wf_outbox_clear(void) { outbox.used = 0; }

void wf_flush(void) {  /* the batch records still open, sent */
    batch_send(&util);
    batch_send(&health);
}

/* Avro: a long (zigzag varint) and a string (its length, then its bytes) read at *p; 0 where
 * the record ends first. */
static int read_long(const unsigned char **p, const unsigned char *end, int64_t *out) {
    uint64_t z = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*p >= end) return 0;
        unsigned char c = *(*p)++;
        z |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *out = (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
            return 1;
        }
    }
    return 0;
}
static int read_str(const unsigned char **p, const unsigned char *end, const char **s, size_t *n) {
    int64_t len;
    if (!read_long(p, end, &len) || len < 0 || len > end - *p) return 0;
    *s = (const char *)*p;
    *n = (size_t)len;
    *p += len;
    return 1;
}

/* One PodResources record's response against its node's last one: 1 changed (kept), 0 the same. */
static int snapshot(const char *node, size_t node_len, const char *response, size_t len) {
    uint64_t h = hash_series(node, node + node_len) | 1;
    size_t i = (size_t)(h & (NODES - 1));
    while (nodes[i].hash != 0 && !(nodes[i].hash == h && nodes[i].name_len == node_len &&
                                   memcmp(nodes[i].name, node, node_len) == 0))
        i = (i + 1) & (NODES - 1);
    if (nodes[i].hash == 0) {
        nodes[i].hash = h;
        nodes[i].name = grown(NULL, node_len);
        memcpy(nodes[i].name, node, node_len);
        nodes[i].name_len = node_len;
    } else if (nodes[i].len == len && memcmp(nodes[i].response, response, len) == 0) {
        return 0;
    }
    nodes[i].response = grown(nodes[i].response, len ? len : 1);
    memcpy(nodes[i].response, response, len);
    nodes[i].len = len;
    return 1;
}

/* One record (its value's bytes): 0 done (*samples and *changed added to), -1 not a DCGM or a
 * PodResources record of the fleet's schemas. */
static int record(const unsigned char *buf, size_t size, int dcgm, int partition, long long offset, long *samples,
                  long *changed) {
    const unsigned char *p = buf + 5, *end = buf + size;
    int64_t observed, ingested;
    const char *cluster, *node, *text;
    size_t cluster_len, node_len, text_len;
    if (size < 5 || buf[0] != 0 || !read_long(&p, end, &observed) || !read_long(&p, end, &ingested) ||
        !read_str(&p, end, &cluster, &cluster_len) || !read_str(&p, end, &node, &node_len) ||
        !read_str(&p, end, &text, &text_len) || cluster_len >= 128)
        return -1;
    if (dcgm) {
        char c[128];
        int seen;
        memcpy(c, cluster, cluster_len);
        c[cluster_len] = 0;
        scrape_walk(text, text_len, ++scrape_no, c, observed, topic, partition, offset, &seen);
        *samples += seen;
    } else {
        *changed += snapshot(node, node_len, text, text_len);
    }
    return 0;
}

static PyObject *s_value, *s_topic, *s_partition, *s_offset;

/* A consume batch: the device samples of its DCGM records (*changed: the PodResources
 * responses that changed), -1 - i where message i is not a fleet's record, or -2**62 with a
 * Python error set. */
long wf_messages(PyObject *messages, PyObject *dcgm_topic, long *changed) {
    long samples = 0;
    Py_ssize_t i, n;
    if (s_value == NULL && ((s_value = PyUnicode_InternFromString("value")) == NULL ||
                            (s_topic = PyUnicode_InternFromString("topic")) == NULL ||
                            (s_partition = PyUnicode_InternFromString("partition")) == NULL ||
                            (s_offset = PyUnicode_InternFromString("offset")) == NULL))
        return -(1L << 62);
    if (!PyList_Check(messages) || !PyUnicode_Check(dcgm_topic)) {
        PyErr_SetString(PyExc_TypeError, "wf_messages(list of messages, str, changed)");
        return -(1L << 62);
    }
    n = PyList_GET_SIZE(messages);
    for (i = 0; i < n; i++) {
        PyObject *m = PyList_GET_ITEM(messages, i), *v = NULL, *t = NULL, *part = NULL, *off = NULL;
        long long o;
        int r = -1, dcgm;
        /* the first that cannot be read stops the batch, with its error */
        if ((v = PyObject_CallMethodNoArgs(m, s_value)) == NULL || (t = PyObject_CallMethodNoArgs(m, s_topic)) == NULL
            || (part = PyObject_CallMethodNoArgs(m, s_partition)) == NULL
            || (off = PyObject_CallMethodNoArgs(m, s_offset)) == NULL) {
            r = -2;
        } else if (PyBytes_Check(v) && (dcgm = PyUnicode_Compare(t, dcgm_topic) == 0, !PyErr_Occurred())) {
            o = PyLong_AsLongLong(off);
            r = record((const unsigned char *)PyBytes_AS_STRING(v), (size_t)PyBytes_GET_SIZE(v), dcgm,
                       (int)PyLong_AsLong(part), o, &samples, changed);
            if (PyErr_Occurred())
                r = -2;
        }
        Py_XDECREF(v);
        Py_XDECREF(t);
        Py_XDECREF(part);
        Py_XDECREF(off);
        if (r == -2)
            return -(1L << 62);
        if (r < 0)
            return -1 - i;
    }
    return samples;
}
