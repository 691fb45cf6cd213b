/* The worker's fact writer of the _avro_c module (see streams/_avro_c.c for the module and the
 * tests that hold it to streams/avro_writer.py).
 *
 * write(header, program, names, record) -> bytes | None
 *   header   the framing the value starts with (bytes)
 *   program  as check_all's (streams/_avro_c.c), one field per name
 *   names    the record's field names, in the schema's order (a tuple of str)
 *   record   the fact's field dict
 * Returns header + the schemaless Avro body, or None for anything it is not sure of (a value
 * of another exact type, a bool for an integer, an integer out of its type's range, a
 * double that is not finite, a string that does not encode as UTF-8, a missing field): the
 * Python writer then writes it or raises, naming the field.
 *
 * write_each(header, program, names, cls, facts, start, emit, topic, on_full) -> int
 *   header, program, names   as write's
 *   cls      the fact class: facts of another exact type are left to the Python path
 *   facts    a list of facts (dataclass instances, their fields in their __dict__)
 *   start    the index of the first fact to write
 *   emit     called emit(topic, value, key) per fact written (a producer's produce): value as
 *            write returns it, key the fact id in UTF-8
 *   topic    handed to emit as is
 *   on_full  called with no argument when emit raises BufferError (a full queue), then emit again
 * Writes and emits the facts from ``start`` on, in order, and returns the index of the first it
 * did not (one write would return None for, or of another type, or without a str fact_id), or
 * len(facts): the caller writes that one its own way and calls again after it. An exception of
 * emit or on_full other than BufferError is raised, the facts before it emitted.
 *
 * write_bodies(program, names, cls, facts, start, budget) -> (bytes, int)
 *   program, names, cls, facts, start   as write_each's; a bytes among the facts is a fact's
 *            body written already (``avro_body_of``), taken as it is
 *   budget   stop once this many bytes are written (after the fact that reaches it)
 * The Avro bodies of the facts from ``start`` on, back to back with no header (the items of an
 * Avro array block), and the index of the first fact not written: one write would return None
 * for, or of another type, or the first past the budget, or len(facts).
 *
 * container(prefix, values, skip, suffix) -> bytes | None
 *   An Avro object container file of one block (streams/fact_codec.py ``container``): prefix,
 *   the count of values and the size of their bodies (Avro longs), each value past its first
 *   skip bytes (its framing), then suffix; copied once, with no bytes object a value. None
 *   where a value is not bytes or is shorter than skip.
 *
 * batch_container(prefix, records, suffix) -> bytes | None
 *   An Avro object container file of a block per block of batch records' arrays
 *   (streams/fact_batches.py ``batch_container``): records a list of (value, spans), spans as
 *   check_batch (streams/_avro_c.c) gives them; prefix, then per span its count and size (Avro
 *   longs), value[from:to] and suffix (the sync marker). Each body is copied once, in one
 *   memcpy a block. None where a record or span is not of that shape or not within its value.
 */
#include "_avro_c.h"  /* Python.h first, as it must be */

#include <stdint.h>
#include <string.h>

typedef struct {
    char *p;
    Py_ssize_t n, cap;
    char small[1024];
} Buf;

static int put(Buf *b, const void *data, Py_ssize_t n) {
    if (b->n + n > b->cap) {
        Py_ssize_t cap = (b->n + n) * 2;
        char *q = b->p == b->small ? PyMem_Malloc(cap) : PyMem_Realloc(b->p, cap);
        if (q == NULL) {
            PyErr_NoMemory();
            return ERR;
        }
        if (b->p == b->small)
            memcpy(q, b->small, b->n);
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
    return OK;
}

static int put_varint(Buf *b, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);  /* zigzag */
    unsigned char out[10];
    int k = 0;
    while (z >= 0x80) {
        out[k++] = (unsigned char)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    out[k++] = (unsigned char)z;
    return put(b, out, k);
}

static int write_value(Buf *b, PyObject *v, int type) {
    switch (type) {
    case T_STRING: {
        Py_ssize_t n;
        const char *s;
        if (!PyUnicode_CheckExact(v))
            return BAD;
        s = PyUnicode_AsUTF8AndSize(v, &n);
        if (s == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
                return ERR;
            PyErr_Clear();
            return BAD;
        }
        if (put_varint(b, n) != OK)
            return ERR;
        return put(b, s, n) == OK ? OK : ERR;
    }
    case T_LONG:
    case T_INT: {
        int overflow;
        long long x;
        if (!PyLong_CheckExact(v))
            return BAD;
        x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow)
            return BAD;
        if (x == -1 && PyErr_Occurred())
            return ERR;
        if (type == T_INT && (x < INT32_MIN || x > INT32_MAX))
            return BAD;
        return put_varint(b, x) == OK ? OK : ERR;
    }
    case T_DOUBLE: {
        double x;
        if (PyFloat_CheckExact(v)) {
            x = PyFloat_AS_DOUBLE(v);
        } else if (PyLong_CheckExact(v)) {
            x = PyLong_AsDouble(v);  /* float(v), rounded as Python rounds it */
            if (x == -1.0 && PyErr_Occurred()) {
                if (!PyErr_ExceptionMatches(PyExc_OverflowError))
                    return ERR;
                PyErr_Clear();
                return BAD;
            }
        } else {
            return BAD;
        }
        if (x - x != 0.0)
            return BAD;
        return put(b, &x, 8) == OK ? OK : ERR;  /* little-endian hosts only: checked at import */
    }
    }
    return BAD;
}

/* Field i of the program, of value v, appended to b: OK, BAD (not sure of it) or ERR. */
static int write_field(Buf *b, const char *prog, Py_ssize_t i, PyObject *v) {
    int type = prog[2 * i], null_at = prog[2 * i + 1];
    if (type < T_STRING || type > T_DOUBLE || null_at < 0 || null_at > 2) {
        PyErr_Format(PyExc_ValueError, "program: field %zd has type %d, union %d", i, type, null_at);
        return ERR;
    }
    if (null_at) {  /* 1: null is branch 0, 2: null is branch 1 */
        unsigned char branch;
        if (v == Py_None) {
            branch = null_at == 1 ? 0 : 2;
            return put(b, &branch, 1);
        }
        branch = null_at == 1 ? 2 : 0;
        if (put(b, &branch, 1) != OK)
            return ERR;
    }
    return write_value(b, v, type);
}

/* The record's fields by the program, appended to b: OK, BAD (not sure: the Python writer
 * decides; b may hold part of the record) or ERR (an exception is set). A fact's dict holds
 * its fields in the schema's order, keyed by the same interned names: they are read in the
 * dict's order while its keys are the program's names, one after the other, and looked up
 * by name from the first one that is not. */
static int write_fields(Buf *b, const char *prog, Py_ssize_t plen, PyObject *names, PyObject *record) {
    Py_ssize_t i, pos = 0;
    int r = OK, in_order = 1;
    for (i = 0; i < plen / 2 && r == OK; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i), *k, *v = NULL;
        if (in_order && !(PyDict_Next(record, &pos, &k, &v) && k == name))
            in_order = 0;
        if (!in_order && (v = PyDict_GetItemWithError(record, name)) == NULL)
            return PyErr_Occurred() ? ERR : BAD;
        r = write_field(b, prog, i, v);
    }
    return r;
}

/* The Avro body of a record whose fields' values are handed in the schema's order, as
 * write_fields writes it from a dict holding them: a new bytes, None where the writer is not
 * sure of a value (the record's own dict then goes to the writers, which name the field), or
 * NULL with the error set. For the C steps of other modules that build facts (the capsule
 * ``body_of``, BODY_API). */
PyObject *avro_body_of(const char *prog, Py_ssize_t plen, PyObject *const *values, Py_ssize_t n) {
    Buf b;
    Py_ssize_t i;
    int r = n == plen / 2 ? OK : BAD;
    PyObject *out;
    b.p = b.small;
    b.n = 0;
    b.cap = sizeof b.small;
    for (i = 0; i < n && r == OK; i++)
        r = write_field(&b, prog, i, values[i]);
    out = r == OK ? PyBytes_FromStringAndSize(b.p, b.n) : r == BAD ? Py_NewRef(Py_None) : NULL;
    if (b.p != b.small)
        PyMem_Free(b.p);
    return out;
}

/* header + the record's fields by the program into b (which the caller frees). */
static int write_into(Buf *b, const char *hdr, Py_ssize_t hlen, const char *prog, Py_ssize_t plen, PyObject *names,
                      PyObject *record) {
    b->p = b->small;
    b->n = 0;
    b->cap = sizeof b->small;
    if (put(b, hdr, hlen) != OK)
        return ERR;
    return write_fields(b, prog, plen, names, record);
}

PyObject *avro_write_record(PyObject *self, PyObject *args) {
    const char *hdr, *prog;
    Py_ssize_t hlen, plen;
    PyObject *names, *record, *out = NULL;
    Buf b;
    int r;
    if (!PyArg_ParseTuple(args, "y#y#O!O!", &hdr, &hlen, &prog, &plen, &PyTuple_Type, &names, &PyDict_Type, &record))
        return NULL;
    if (plen != 2 * PyTuple_GET_SIZE(names)) {
        PyErr_SetString(PyExc_ValueError, "program: two bytes per name");
        return NULL;
    }
    r = write_into(&b, hdr, hlen, prog, plen, names, record);
    if (r == OK)
        out = PyBytes_FromStringAndSize(b.p, b.n);
    if (b.p != b.small)
        PyMem_Free(b.p);
    if (r == BAD)
        Py_RETURN_NONE;
    return out;  /* NULL with the error set when r == ERR */
}

/* emit(topic, value, key); while it raises BufferError (a full producer queue), on_full() and
 * again. 0, or -1 with the error set. */
static int emit_one(PyObject *emit, PyObject *topic, PyObject *value, PyObject *key, PyObject *on_full) {
    PyObject *args[3] = {topic, value, key};
    for (;;) {
        PyObject *got = PyObject_Vectorcall(emit, args, 3, NULL);
        if (got != NULL) {
            Py_DECREF(got);
            return 0;
        }
        if (!PyErr_ExceptionMatches(PyExc_BufferError))
            return -1;
        PyErr_Clear();
        if ((got = PyObject_CallNoArgs(on_full)) == NULL)
            return -1;
        Py_DECREF(got);
    }
}

PyObject *avro_write_each(PyObject *self, PyObject *args) {
    const char *hdr, *prog;
    Py_ssize_t hlen, plen, start, i;
    PyObject *names, *cls, *facts, *emit, *topic, *on_full, *fact_id_name;
    if (!PyArg_ParseTuple(args, "y#y#O!OO!nOUO", &hdr, &hlen, &prog, &plen, &PyTuple_Type, &names, &cls,
                          &PyList_Type, &facts, &start, &emit, &topic, &on_full))
        return NULL;
    if (plen != 2 * PyTuple_GET_SIZE(names)) {
        PyErr_SetString(PyExc_ValueError, "program: two bytes per name");
        return NULL;
    }
    if ((fact_id_name = PyUnicode_InternFromString("fact_id")) == NULL)
        return NULL;
    for (i = start < 0 ? 0 : start; i < PyList_GET_SIZE(facts); i++) {
        PyObject *fact = PyList_GET_ITEM(facts, i), *record, *fact_id, *value, *key;
        const char *id;
        Py_ssize_t id_len;
        Buf b;
        int r, failed;
        if ((PyObject *)Py_TYPE(fact) != cls)
            break;  /* the Python path says what is wrong with it */
        Py_INCREF(fact);  /* emit may run code that changes the list */
        if ((record = PyObject_GenericGetDict(fact, NULL)) == NULL) {  /* fact.__dict__ */
            Py_DECREF(fact);
            goto error;
        }
        if (!PyDict_CheckExact(record) || (fact_id = PyDict_GetItemWithError(record, fact_id_name)) == NULL
                || !PyUnicode_CheckExact(fact_id) || (id = PyUnicode_AsUTF8AndSize(fact_id, &id_len)) == NULL) {
            Py_DECREF(record);
            Py_DECREF(fact);
            if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
                goto error;
            PyErr_Clear();
            break;
        }
        r = write_into(&b, hdr, hlen, prog, plen, names, record);
        value = r == OK ? PyBytes_FromStringAndSize(b.p, b.n) : NULL;
        if (b.p != b.small)
            PyMem_Free(b.p);
        key = value == NULL ? NULL : PyBytes_FromStringAndSize(id, id_len);
        Py_DECREF(record);
        if (key == NULL) {
            Py_XDECREF(value);
            Py_DECREF(fact);
            if (r == BAD)
                break;
            goto error;
        }
        failed = emit_one(emit, topic, value, key, on_full);
        Py_DECREF(key);
        Py_DECREF(value);
        Py_DECREF(fact);
        if (failed)
            goto error;
    }
    Py_DECREF(fact_id_name);
    return PyLong_FromSsize_t(i);
error:
    Py_DECREF(fact_id_name);
    return NULL;
}


PyObject *avro_write_bodies(PyObject *self, PyObject *args) {
    const char *prog;
    Py_ssize_t plen, start, budget, i;
    PyObject *names, *cls, *facts, *out = NULL;
    Buf b;
    if (!PyArg_ParseTuple(args, "y#O!OO!nn", &prog, &plen, &PyTuple_Type, &names, &cls, &PyList_Type, &facts, &start,
                          &budget))
        return NULL;
    if (plen != 2 * PyTuple_GET_SIZE(names)) {
        PyErr_SetString(PyExc_ValueError, "program: two bytes per name");
        return NULL;
    }
    b.p = b.small;
    b.n = 0;
    b.cap = sizeof b.small;
    for (i = start < 0 ? 0 : start; i < PyList_GET_SIZE(facts) && b.n < budget; i++) {
        PyObject *fact = PyList_GET_ITEM(facts, i), *record;
        Py_ssize_t before = b.n;
        int r;
        if (PyBytes_CheckExact(fact)) {  /* a body written when the fact was made (avro_body_of) */
            if (put(&b, PyBytes_AS_STRING(fact), PyBytes_GET_SIZE(fact)) != OK)
                goto done;
            continue;
        }
        if ((PyObject *)Py_TYPE(fact) != cls)
            break;  /* the Python path says what is wrong with it */
        if ((record = PyObject_GenericGetDict(fact, NULL)) == NULL)  /* fact.__dict__ */
            goto done;
        if (!PyDict_CheckExact(record)) {
            Py_DECREF(record);
            break;
        }
        r = write_fields(&b, prog, plen, names, record);
        Py_DECREF(record);
        if (r == ERR)
            goto done;
        if (r == BAD) {
            b.n = before;  /* what it wrote of this one goes */
            break;
        }
    }
    out = Py_BuildValue("y#n", b.p, b.n, i);
done:
    if (b.p != b.small)
        PyMem_Free(b.p);
    return out;
}

/* An object container block's head into b's own space: its count and its bodies' size, as Avro
 * longs (20 bytes at most: no allocation). */
static int block_head(Buf *b, int64_t count, Py_ssize_t size) {
    b->p = b->small, b->n = 0, b->cap = sizeof b->small;
    return put_varint(b, count) == OK && put_varint(b, size) == OK ? OK : ERR;
}

PyObject *avro_container(PyObject *self, PyObject *args) {
    const char *pre, *suf;
    Py_ssize_t plen, slen, skip, n, i, block = 0;
    PyObject *values, *out;
    Buf counts;
    char *o;
    (void)self;
    if (!PyArg_ParseTuple(args, "y#O!ny#", &pre, &plen, &PyList_Type, &values, &skip, &suf, &slen))
        return NULL;
    if (skip < 0) {
        PyErr_SetString(PyExc_ValueError, "container: skip is negative");
        return NULL;
    }
    n = PyList_GET_SIZE(values);
    for (i = 0; i < n; i++) {
        PyObject *v = PyList_GET_ITEM(values, i);
        if (!PyBytes_CheckExact(v) || PyBytes_GET_SIZE(v) < skip)
            Py_RETURN_NONE;
        block += PyBytes_GET_SIZE(v) - skip;
    }
    if (block_head(&counts, n, block) != OK)
        return NULL;
    if ((out = PyBytes_FromStringAndSize(NULL, plen + counts.n + block + slen)) == NULL)
        return NULL;
    o = PyBytes_AS_STRING(out);
    memcpy(o, pre, plen);
    memcpy(o += plen, counts.p, counts.n);
    o += counts.n;
    for (i = 0; i < n; i++) {
        PyObject *v = PyList_GET_ITEM(values, i);
        memcpy(o, PyBytes_AS_STRING(v) + skip, PyBytes_GET_SIZE(v) - skip);
        o += PyBytes_GET_SIZE(v) - skip;
    }
    memcpy(o, suf, slen);
    return out;
}

/* One (count, from, to) span of a block of value, as check_batch gives them: 0 when it is
 * one within value, else -1. */
static int span_of(PyObject *span, Py_ssize_t L, long long *count, Py_ssize_t *from, Py_ssize_t *to) {
    if (!PyTuple_CheckExact(span) || PyTuple_GET_SIZE(span) != 3)
        return -1;
    *count = PyLong_AsLongLong(PyTuple_GET_ITEM(span, 0));
    *from = PyLong_AsSsize_t(PyTuple_GET_ITEM(span, 1));
    *to = PyLong_AsSsize_t(PyTuple_GET_ITEM(span, 2));
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return *count > 0 && *from >= 0 && *from <= *to && *to <= L ? 0 : -1;
}

PyObject *avro_batch_container(PyObject *self, PyObject *args) {
    const char *pre, *suf;
    Py_ssize_t plen, slen, n, i, j, total;
    PyObject *records, *out;
    char *o;
    (void)self;
    if (!PyArg_ParseTuple(args, "y#O!y#", &pre, &plen, &PyList_Type, &records, &suf, &slen))
        return NULL;
    n = PyList_GET_SIZE(records);
    total = plen;
    for (i = 0; i < n; i++) {  /* first the size, every span checked */
        PyObject *r = PyList_GET_ITEM(records, i), *value, *spans;
        if (!PyTuple_CheckExact(r) || PyTuple_GET_SIZE(r) != 2)
            Py_RETURN_NONE;
        value = PyTuple_GET_ITEM(r, 0), spans = PyTuple_GET_ITEM(r, 1);
        if (!PyBytes_CheckExact(value) || !PyTuple_CheckExact(spans))
            Py_RETURN_NONE;
        for (j = 0; j < PyTuple_GET_SIZE(spans); j++) {
            long long count;
            Py_ssize_t from, to;
            if (span_of(PyTuple_GET_ITEM(spans, j), PyBytes_GET_SIZE(value), &count, &from, &to) != 0)
                Py_RETURN_NONE;
            total += 20 + (to - from) + slen;  /* two longs of 10 bytes at most */
        }
    }
    if ((out = PyBytes_FromStringAndSize(NULL, total)) == NULL)
        return NULL;
    o = PyBytes_AS_STRING(out);
    memcpy(o, pre, plen);
    o += plen;
    for (i = 0; i < n; i++) {  /* then the blocks, each body copied once */
        PyObject *value = PyTuple_GET_ITEM(PyList_GET_ITEM(records, i), 0);
        PyObject *spans = PyTuple_GET_ITEM(PyList_GET_ITEM(records, i), 1);
        for (j = 0; j < PyTuple_GET_SIZE(spans); j++) {
            long long count = 0;
            Py_ssize_t from = 0, to = 0;
            Buf counts;
            span_of(PyTuple_GET_ITEM(spans, j), PyBytes_GET_SIZE(value), &count, &from, &to);
            if (block_head(&counts, count, to - from) != OK) {
                Py_DECREF(out);
                return NULL;
            }
            memcpy(o, counts.p, counts.n);
            o += counts.n;
            memcpy(o, PyBytes_AS_STRING(value) + from, to - from);
            o += to - from;
            memcpy(o, suf, slen);
            o += slen;
        }
    }
    if (_PyBytes_Resize(&out, o - PyBytes_AS_STRING(out)) < 0)
        return NULL;
    return out;
}
