/* Fact values in Avro, in C: the worker's writer and the sink's check. streams/avro_writer.py
 * holds both in Python (``compile_writer``, ``compile_checker``): they are the reference, and
 * tests/unit/streams/test_avro_writer.py and test_avro_c.py hold the two of each to the same
 * bytes and answers on valid, broken and hostile values.
 *
 * The writer is in streams/_avro_write.c (``write``, ``write_each``).
 *
 * The sink's check walks a poll's values in one call (~0.2 us a fact against ~5 us a fact in
 * Python):
 *
 * check_all(header, program, keep, values) -> list | None
 *   header   the framing every value starts with (bytes)
 *   program  two bytes per field of the flat record schema, in order: the type (1 string,
 *            2 long, 3 int, 4 double) and where a [null, T] union puts its null (0: not a
 *            union, 1: null is branch 0, 2: null is branch 1)
 *   keep     index of the integer field whose value is returned per value, -1 for none
 *   values   a list of bytes
 * Returns, when every value is a whole record of the schema and nothing more (every string
 * valid UTF-8, every double finite, every integer within its type, no trailing bytes), the
 * list of each value's kept field (None without one, or when it is null); None as soon as
 * one value is not.
 *
 * split_batch(batch_header, fact_header, program, value) -> list | None
 *   value    a batch record: batch_header, then an Avro array of records of the program's
 *            schema (blocks: a count, negative when a byte size follows, the items; a 0 ends)
 * Returns each item as fact_header + its body (a framed single fact), when every item is a
 * whole record of the schema with the same checks as check_all's and nothing follows the
 * array; None when the value is not such a batch.
 *
 * check_batch(batch_header, program, keep, value) -> (count, kept, spans) | None
 *   The same walk and checks as split_batch's, without a copy of any item: the items' count,
 *   the list of each item's kept field as check_all gives it (None when keep is -1), and a
 *   tuple of (count, from, to) a block of the array, value[from:to] the bodies of its items;
 *   None when the value is not such a batch.
 */
#include "_avro_c.h"  /* Python.h first, as it must be */

#include <stdint.h>
#include <string.h>

/* Strict UTF-8 as Python's bytes.decode() has it; ASCII without leaving C. */
static int utf8_ok(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {  /* ASCII 8 bytes a step: no byte with its high bit set */
        uint64_t w;
        memcpy(&w, s + i, 8);
        if (w & 0x8080808080808080ULL)
            break;
    }
    for (; i < n; i++) {
        if (s[i] & 0x80) {
            PyObject *u = PyUnicode_DecodeUTF8((const char *)s + i, n - i, "strict");
            if (u != NULL) {
                Py_DECREF(u);
                return OK;
            }
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                return BAD;
            }
            return ERR;
        }
    }
    return OK;
}

/* A varint of at most ``maxlen`` bytes at *p, as read by _read_varint (any terminator below
 * 0x80); its raw (not zigzag-decoded) value in *raw. */
int read_raw(const unsigned char *b, Py_ssize_t L, Py_ssize_t *p, int maxlen, unsigned __int128 *raw) {
    unsigned __int128 n = 0;
    int shift = 0, k;
    for (k = 0; k < maxlen && *p + k < L; k++) {
        unsigned char c = b[*p + k];
        n |= (unsigned __int128)(c & 0x7F) << shift;
        if (c < 0x80) {
            *raw = n;
            *p += k + 1;
            return OK;
        }
        shift += 7;
    }
    return BAD;
}

/* zigzag-decoded value of a raw varint, when it fits an int64 */
int zigzag(unsigned __int128 raw, int64_t lo, int64_t hi, int64_t *out) {
    unsigned __int128 half = raw >> 1;
    if (raw & 1) {  /* -(half) - 1 */
        if (half > (unsigned __int128)(-(lo + 1)))
            return BAD;
        *out = -(int64_t)half - 1;
    } else {
        if (half > (unsigned __int128)hi)
            return BAD;
        *out = (int64_t)half;
    }
    return OK;
}

/* Steps over an integer without its value: the regexes _LONG_END / _INT_END (at most 10 / 5
 * bytes, the last at most 1 / 0x0f when all are used). */
static int skip_integer(const unsigned char *b, Py_ssize_t L, Py_ssize_t *p, int type) {
    int maxlen = type == T_LONG ? 10 : 5;
    unsigned char lastmax = type == T_LONG ? 0x01 : 0x0f;
    int k;
    for (k = 0; k < maxlen && *p + k < L; k++) {
        unsigned char c = b[*p + k];
        if (c < 0x80) {
            if (k == maxlen - 1 && c > lastmax)
                return BAD;
            *p += k + 1;
            return OK;
        }
    }
    return BAD;
}

static int check_value(const unsigned char *b, Py_ssize_t L, Py_ssize_t *p, int type, int keep,
                       int64_t *kept, int *has_kept) {
    if (*p >= L)
        return BAD;
    switch (type) {
    case T_STRING: {
        unsigned __int128 raw;
        Py_ssize_t start;
        if (b[*p] < 0x80)  /* a length below 64: one byte */
            raw = b[(*p)++];
        else if (read_raw(b, L, p, 10, &raw) != OK)
            return BAD;
        if (raw & 1)
            return BAD;
        raw >>= 1;
        if (raw > (unsigned __int128)(L - *p))
            return BAD;
        start = *p;
        *p += (Py_ssize_t)raw;
        return utf8_ok(b + start, (Py_ssize_t)raw);
    }
    case T_LONG:
    case T_INT:
        if (keep) {
            unsigned __int128 raw;
            int64_t v;
            if (read_raw(b, L, p, 10, &raw) != OK)
                return BAD;
            if (zigzag(raw, type == T_LONG ? INT64_MIN : INT32_MIN, type == T_LONG ? INT64_MAX : INT32_MAX, &v) != OK)
                return BAD;
            *kept = v;
            *has_kept = 1;
            return OK;
        }
        return skip_integer(b, L, p, type);
    case T_DOUBLE: {
        double v;
        if (L - *p < 8)
            return BAD;
        memcpy(&v, b + *p, 8);  /* little-endian hosts only: checked at import */
        if (v - v != 0.0)
            return BAD;
        *p += 8;
        return OK;
    }
    }
    return BAD;
}

/* One record's fields by the program from *p on, every value checked; *p moves past them. */
static int walk_fields(const unsigned char *b, Py_ssize_t L, Py_ssize_t *pp, const unsigned char *prog,
                       Py_ssize_t fields, Py_ssize_t keep, int64_t *kept, int *has_kept) {
    Py_ssize_t p = *pp, i;
    for (i = 0; i < fields; i++) {
        int type = prog[2 * i], null_at = prog[2 * i + 1], r;
        if (null_at) {  /* 1: null is branch 0, 2: null is branch 1 */
            unsigned char branch;
            if (p >= L)
                return BAD;
            branch = b[p++];
            if (branch == 2 * (null_at == 1 ? 1 : 0)) {
                r = check_value(b, L, &p, type, i == keep, kept, has_kept);
                if (r != OK)
                    return r;
            } else if (branch != 2 * (null_at == 1 ? 0 : 1)) {
                return BAD;
            }
        } else {
            r = check_value(b, L, &p, type, i == keep, kept, has_kept);
            if (r != OK)
                return r;
        }
    }
    *pp = p;
    return OK;
}

static int check_one(const unsigned char *b, Py_ssize_t L, const char *hdr, Py_ssize_t hlen,
                     const unsigned char *prog, Py_ssize_t fields, Py_ssize_t keep, int64_t *kept, int *has_kept) {
    Py_ssize_t p = hlen;
    int r;
    if (L < hlen || memcmp(b, hdr, (size_t)hlen) != 0)
        return BAD;
    r = walk_fields(b, L, &p, prog, fields, keep, kept, has_kept);
    if (r != OK)
        return r;
    return p == L ? OK : BAD;
}

static int check_program(const char *prog, Py_ssize_t plen) {
    Py_ssize_t i;
    if (plen % 2) {
        PyErr_SetString(PyExc_ValueError, "program: two bytes per field");
        return ERR;
    }
    for (i = 0; i < plen; i += 2) {
        if (prog[i] < T_STRING || prog[i] > T_DOUBLE || prog[i + 1] < 0 || prog[i + 1] > 2) {
            PyErr_Format(PyExc_ValueError, "program: field %zd has type %d, union %d", i / 2, prog[i], prog[i + 1]);
            return ERR;
        }
    }
    return OK;
}

/* An Avro long (zigzag varint) at *p, as fastavro reads one: at most 10 bytes, within int64. */
static int read_long(const unsigned char *b, Py_ssize_t L, Py_ssize_t *p, int64_t *out) {
    unsigned __int128 raw;
    if (read_raw(b, L, p, 10, &raw) != OK)
        return BAD;
    return zigzag(raw, INT64_MIN, INT64_MAX, out);
}

/* What walk_batch hands each item (its body at b[start:end], the kept field) and each block
 * (its count and the span of its items' bodies) to; either may be NULL. OK, or ERR with a
 * Python exception set. */
typedef int (*item_fn)(void *ctx, const unsigned char *b, Py_ssize_t start, Py_ssize_t end, int64_t kept,
                       int has_kept);
typedef int (*block_fn)(void *ctx, int64_t count, Py_ssize_t from, Py_ssize_t to);

/* A batch record's array, every item checked as check_one checks a single value: OK when it is
 * a whole batch (the header, blocks of whole items, the closing 0, nothing after), BAD when not,
 * ERR when a callback or the check set an exception. */
static int walk_batch(const unsigned char *b, Py_ssize_t L, const char *bhdr, Py_ssize_t bhlen,
                      const unsigned char *prog, Py_ssize_t fields, Py_ssize_t keep, item_fn item, block_fn block,
                      void *ctx) {
    Py_ssize_t p = bhlen;
    if (L < bhlen || memcmp(b, bhdr, (size_t)bhlen) != 0)
        return BAD;
    for (;;) {  /* blocks: a count (negative: then its size in bytes), the items; a count of 0 ends */
        int64_t count, size = -1, k;
        Py_ssize_t items_from;
        if (read_long(b, L, &p, &count) != OK)
            return BAD;
        if (count == 0)
            break;
        if (count < 0) {
            if (count == INT64_MIN || read_long(b, L, &p, &size) != OK || size < 0)
                return BAD;
            count = -count;
        }
        items_from = p;
        if (count > L - p)  /* every item takes a byte at least */
            return BAD;
        for (k = 0; k < count; k++) {
            Py_ssize_t start = p;
            int64_t kept = 0;
            int has_kept = 0, r;
            r = walk_fields(b, L, &p, prog, fields, keep, &kept, &has_kept);
            if (r != OK)
                return r;
            if (item != NULL && item(ctx, b, start, p, kept, has_kept) != OK)
                return ERR;
        }
        if (size >= 0 && p - items_from != size)  /* a block's stated size is its items' */
            return BAD;
        if (block != NULL && block(ctx, count, items_from, p) != OK)
            return ERR;
    }
    return p == L ? OK : BAD;
}

typedef struct {
    PyObject *out;
    const char *fhdr;
    Py_ssize_t fhlen;
} Split;

static int split_item(void *ctx, const unsigned char *b, Py_ssize_t start, Py_ssize_t end, int64_t kept,
                      int has_kept) {
    Split *s = ctx;
    PyObject *one = PyBytes_FromStringAndSize(NULL, s->fhlen + (end - start));
    int r;
    (void)kept, (void)has_kept;
    if (one == NULL)
        return ERR;
    memcpy(PyBytes_AS_STRING(one), s->fhdr, (size_t)s->fhlen);
    memcpy(PyBytes_AS_STRING(one) + s->fhlen, b + start, (size_t)(end - start));
    r = PyList_Append(s->out, one);
    Py_DECREF(one);
    return r < 0 ? ERR : OK;
}

static PyObject *split_batch(PyObject *self, PyObject *args) {
    const char *bhdr, *prog;
    Py_ssize_t bhlen, plen;
    PyObject *value;
    Split s;
    int r;
    if (!PyArg_ParseTuple(args, "y#y#y#O!", &bhdr, &bhlen, &s.fhdr, &s.fhlen, &prog, &plen, &PyBytes_Type, &value))
        return NULL;
    if (check_program(prog, plen) != OK)
        return NULL;
    if ((s.out = PyList_New(0)) == NULL)
        return NULL;
    r = walk_batch((const unsigned char *)PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value), bhdr, bhlen,
                   (const unsigned char *)prog, plen / 2, -1, split_item, NULL, &s);
    if (r == OK)
        return s.out;
    Py_DECREF(s.out);
    if (r == ERR)
        return NULL;
    Py_RETURN_NONE;
}

typedef struct {
    PyObject *kept, *spans;  /* kept: NULL without a kept field */
    int64_t count;
} Checked;

/* The kept field as check_all and check_batch give it: an int, or None (a new reference). */
static PyObject *kept_value(int64_t kept, int has_kept) {
    return has_kept ? PyLong_FromLongLong(kept) : Py_NewRef(Py_None);
}

static int check_item(void *ctx, const unsigned char *b, Py_ssize_t start, Py_ssize_t end, int64_t kept,
                      int has_kept) {
    Checked *c = ctx;
    PyObject *k;
    int r;
    (void)b, (void)start, (void)end;
    if (c->kept == NULL)
        return OK;
    if ((k = kept_value(kept, has_kept)) == NULL)
        return ERR;
    r = PyList_Append(c->kept, k);
    Py_DECREF(k);
    return r < 0 ? ERR : OK;
}

static int check_block(void *ctx, int64_t count, Py_ssize_t from, Py_ssize_t to) {
    Checked *c = ctx;
    PyObject *span = Py_BuildValue("(Lnn)", (long long)count, from, to);
    int r;
    if (span == NULL)
        return ERR;
    r = PyList_Append(c->spans, span);
    Py_DECREF(span);
    c->count += count;
    return r < 0 ? ERR : OK;
}

static PyObject *check_batch(PyObject *self, PyObject *args) {
    const char *bhdr, *prog;
    Py_ssize_t bhlen, plen, keep;
    PyObject *value, *spans;
    Checked c = {NULL, NULL, 0};
    int r;
    if (!PyArg_ParseTuple(args, "y#y#nO!", &bhdr, &bhlen, &prog, &plen, &keep, &PyBytes_Type, &value))
        return NULL;
    if (check_program(prog, plen) != OK)
        return NULL;
    if ((c.spans = PyList_New(0)) == NULL || (keep >= 0 && (c.kept = PyList_New(0)) == NULL))
        goto error;
    r = walk_batch((const unsigned char *)PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value), bhdr, bhlen,
                   (const unsigned char *)prog, plen / 2, keep, check_item, check_block, &c);
    if (r == ERR)
        goto error;
    if (r != OK) {
        Py_XDECREF(c.kept);
        Py_DECREF(c.spans);
        Py_RETURN_NONE;
    }
    spans = PyList_AsTuple(c.spans);
    Py_DECREF(c.spans);
    if (spans == NULL) {
        Py_XDECREF(c.kept);
        return NULL;
    }
    return Py_BuildValue("(LNN)", (long long)c.count, c.kept != NULL ? c.kept : Py_NewRef(Py_None), spans);
error:
    Py_XDECREF(c.kept);
    Py_XDECREF(c.spans);
    return NULL;
}

static PyObject *check_all(PyObject *self, PyObject *args) {
    const char *hdr, *prog;
    Py_ssize_t hlen, plen, keep, n, i;
    PyObject *values, *out;
    if (!PyArg_ParseTuple(args, "y#y#nO!", &hdr, &hlen, &prog, &plen, &keep, &PyList_Type, &values))
        return NULL;
    if (check_program(prog, plen) != OK)
        return NULL;
    n = PyList_GET_SIZE(values);
    out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        PyObject *v = PyList_GET_ITEM(values, i), *k;
        int64_t kept = 0;
        int has_kept = 0, r;
        if (!PyBytes_CheckExact(v)) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        r = check_one((const unsigned char *)PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v), hdr, hlen,
                      (const unsigned char *)prog, plen / 2, keep, &kept, &has_kept);
        if (r != OK) {
            Py_DECREF(out);
            if (r == ERR)
                return NULL;
            Py_RETURN_NONE;
        }
        if ((k = kept_value(kept, has_kept)) == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, k);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"write", avro_write_record, METH_VARARGS,
     "write(header, program, names, record) -> bytes | None: see streams/_avro_c.c"},
    {"write_each", avro_write_each, METH_VARARGS,
     "write_each(header, program, names, cls, facts, start, emit, topic, on_full) -> int: see streams/_avro_c.c"},
    {"check_all", check_all, METH_VARARGS,
     "check_all(header, program, keep, values) -> list | None: see streams/_avro_c.c"},
    {"container", avro_container, METH_VARARGS,
     "container(prefix, values, skip, suffix) -> bytes | None: see streams/_avro_write.c"},
    {"write_bodies", avro_write_bodies, METH_VARARGS,
     "write_bodies(program, names, cls, facts, start, budget) -> (bytes, int): see streams/_avro_write.c"},
    {"read", (PyCFunction)(void (*)(void))avro_read_record, METH_FASTCALL,
     "read(header, program, names, value) -> dict | None: see streams/_avro_read.c"},
    {"split_batch", split_batch, METH_VARARGS,
     "split_batch(batch_header, fact_header, program, value) -> list | None: see streams/_avro_c.c"},
    {"check_batch", check_batch, METH_VARARGS,
     "check_batch(batch_header, program, keep, value) -> (int, list | None, tuple) | None: see streams/_avro_c.c"},
    {"batch_container", avro_batch_container, METH_VARARGS,
     "batch_container(prefix, records, suffix) -> bytes | None: see streams/_avro_write.c"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_avro_c", NULL, -1, methods};

PyMODINIT_FUNC PyInit__avro_c(void) {
    const uint16_t one = 1;
    PyObject *m, *api = NULL;
    if (*(const unsigned char *)&one != 1) {
        PyErr_SetString(PyExc_ImportError, "_avro_c reads doubles as little-endian; this host is big-endian");
        return NULL;
    }
    if ((m = PyModule_Create(&module)) == NULL)
        return NULL;
    if ((api = PyCapsule_New((void *)avro_body_of, BODY_API, NULL)) == NULL || PyModule_AddObject(m, "body_of", api) < 0) {
        Py_XDECREF(api);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
