/* The utilization facts of one scrape's samples on exclusive GPUs, in C: what
 * domain/samples.py ``_emit_sample`` does for a sample whose segments are final, one sample
 * after another, without a Python call per sample. A sample this does not take (not of an
 * exclusive GPU in the inventory at its time, per-pod series, a value of an unexpected type)
 * is handed to ``fallback(sample)`` in its turn, so the facts keep the samples' order.
 *
 * exclusive_facts(cluster_id, node, t, end, samples, pos, gap_reason, pieces_by_device,
 *                 gpus_by_uuid, out, fallback[, encoded]) -> (attributed, unattributed)
 *
 * For each sample s of an exclusive GPU (the first inventory entry of s.gpu_uuid valid at t):
 * the pieces of the GPU (sorted by start, not overlapping) that overlap [t, end) each give a
 * fact over their overlap; none give one fact over [t, end) with the piece covering t (none)
 * and ``gap_reason``. The facts are ``utilization_fact``'s (domain/_facts.c), appended to
 * ``out``; the counts are of each sample's first fact, attributed or not. Times epoch ms.
 * ``encoded`` True (and ``utilization_body`` handed to setup): each fact appended as the Avro
 * body ``utilization_body`` writes of it, or as the fact where it writes none. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_fields.h"

static PyObject *utilization_fact, *utilization_body, *sample_cls, *piece_cls;
static PyObject *s_exclusive, *s_unattributed, *s_empty, *one, *no_pods;
static PyObject *a_uuid, *a_per_pod, *a_mode, *a_from, *a_to, *a_start, *a_end, *a_confidence;
static Fields sample_fields = FIELDS(&a_uuid, &a_per_pod), piece_fields = FIELDS(&a_start, &a_end),
              entry_fields = FIELDS(&a_from, &a_to, &a_mode);

static PyObject *setup(PyObject *self, PyObject *args) {
    PyObject *f, *sample, *piece, *body = Py_None;
    if (!PyArg_ParseTuple(args, "OO!O!|O", &f, &PyType_Type, &sample, &PyType_Type, &piece, &body))
        return NULL;
    Py_XSETREF(utilization_fact, Py_NewRef(f));
    Py_XSETREF(utilization_body, Py_NewRef(body));
    Py_XSETREF(sample_cls, Py_NewRef(sample));
    Py_XSETREF(piece_cls, Py_NewRef(piece));
    Py_RETURN_NONE;
}

/* An int attribute as a long long, as ``as_ll`` answers; -1 also where it cannot be read. */
static int attr_ll(Fields *f, PyObject *o, PyObject *name, long long *out) {
    int r;
    PyObject *v = field_of(f, o, name);
    if (v == NULL)
        return -1;
    r = as_ll(v, out);
    Py_DECREF(v);
    return r;
}

/* The piece's start and end: 1 read, 0 not a Piece of exact int times, -1 error. */
static int bounds(PyObject *piece, long long *start, long long *end) {
    int r;
    if (Py_TYPE(piece) != (PyTypeObject *)piece_cls)
        return 0;
    if ((r = attr_ll(&piece_fields, piece, a_start, start)) != 1)
        return r;
    return attr_ll(&piece_fields, piece, a_end, end);
}

/* Is the sample of an exclusive GPU at t? 1 yes, 0 no (or not sure), -1 error. */
static int exclusive_at(PyObject *gpus_by_uuid, PyObject *uuid, long long t) {
    PyObject *entries = PyDict_GetItemWithError(gpus_by_uuid, uuid), *mode;
    Py_ssize_t i;
    int r;
    if (entries == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!PyList_CheckExact(entries))
        return 0;
    for (i = 0; i < PyList_GET_SIZE(entries); i++) {
        PyObject *g = PyList_GET_ITEM(entries, i), *to;
        long long from, to_ms = 0;
        int open_ended;
        if ((r = attr_ll(&entry_fields, g, a_from, &from)) != 1)
            return r;
        if ((to = field_of(&entry_fields, g, a_to)) == NULL)
            return -1;
        open_ended = to == Py_None;
        r = open_ended ? 1 : as_ll(to, &to_ms);
        Py_DECREF(to);
        if (r != 1)
            return r;
        if (!(from <= t && (open_ended || t < to_ms)))
            continue;
        if ((mode = field_of(&entry_fields, g, a_mode)) == NULL)  /* the first entry valid at t decides */
            return -1;
        r = PyUnicode_CheckExact(mode) && PyUnicode_Compare(mode, s_exclusive) == 0;
        Py_DECREF(mode);
        return r;
    }
    return 0;
}

/* One fact appended to out (with ``encoded``, its Avro body where utilization_body wrote one);
 * *unattributed set from its confidence. 0 done, -1 error. */
static int emit(PyObject *const *head, PyObject *s, PyObject *uuid, PyObject *a, PyObject *b, PyObject *piece,
                PyObject *why, PyObject *out, int *unattributed) {
    PyObject *args[13], *fact, *confidence, *got = NULL;
    int r;
    args[0] = head[0], args[1] = head[1], args[2] = head[2], args[3] = s, args[4] = head[3], args[5] = uuid;
    args[6] = a, args[7] = b, args[8] = piece, args[9] = why, args[10] = no_pods, args[11] = no_pods, args[12] = one;
    if (head[4] == Py_True) {  /* (body or fact, confidence) */
        if ((got = PyObject_Vectorcall(utilization_body, args, 13, NULL)) == NULL)
            return -1;
        if (!PyTuple_CheckExact(got) || PyTuple_GET_SIZE(got) != 2) {
            Py_DECREF(got);
            PyErr_SetString(PyExc_TypeError, "utilization_body() returns (body or fact, confidence)");
            return -1;
        }
        fact = Py_NewRef(PyTuple_GET_ITEM(got, 0));
        confidence = Py_NewRef(PyTuple_GET_ITEM(got, 1));
        Py_DECREF(got);
    } else {
        if ((fact = PyObject_Vectorcall(utilization_fact, args, 13, NULL)) == NULL)
            return -1;
        if ((confidence = PyObject_GetAttr(fact, a_confidence)) == NULL) {
            Py_DECREF(fact);
            return -1;
        }
    }
    r = PyList_Append(out, fact);
    *unattributed = PyUnicode_CheckExact(confidence) && PyUnicode_Compare(confidence, s_unattributed) == 0;
    Py_DECREF(confidence);
    Py_DECREF(fact);
    return r;
}

#define MAX_PARTS 64  /* more pieces under one sample than this: the reference takes it */

/* The sample's facts: 1 emitted (*unattributed set), 0 not taken, -1 error. */
static int sample_facts(PyObject *const *head, long long t, PyObject *end, long long end_ms, PyObject *s,
                        PyObject *gap, PyObject *pieces_by_device, PyObject *gpus_by_uuid, PyObject *out,
                        int *unattributed) {
    PyObject *uuid = NULL, *per_pod = NULL, *pieces, *at_t = Py_None, *parts[MAX_PARTS];
    Py_ssize_t n, lo, hi, mid, i, nparts = 0;
    long long start, stop, starts[MAX_PARTS], stops[MAX_PARTS];
    int r = 0, k;
    if (Py_TYPE(s) != (PyTypeObject *)sample_cls)
        return 0;
    if ((uuid = field_of(&sample_fields, s, a_uuid)) == NULL ||
        (per_pod = field_of(&sample_fields, s, a_per_pod)) == NULL) {
        r = -1;
        goto done;
    }
    if (!PyUnicode_CheckExact(uuid) || !PyTuple_CheckExact(per_pod) || PyTuple_GET_SIZE(per_pod) != 0)
        goto done;
    if ((r = exclusive_at(gpus_by_uuid, uuid, t)) != 1)
        goto done;
    r = 0;
    pieces = PyDict_GetItemWithError(pieces_by_device, uuid);
    if (pieces == NULL && PyErr_Occurred()) {
        r = -1;
        goto done;
    }
    if (pieces != NULL && !PyList_CheckExact(pieces))
        goto done;
    n = pieces == NULL ? 0 : PyList_GET_SIZE(pieces);
    for (lo = 0, hi = n; lo < hi;) {  /* bisect_right by start */
        mid = lo + (hi - lo) / 2;
        if ((k = bounds(PyList_GET_ITEM(pieces, mid), &start, &stop)) != 1) {
            r = k;
            goto done;
        }
        if (t < start)
            hi = mid;
        else
            lo = mid + 1;
    }
    i = lo - 1;
    if (i >= 0) {
        if ((k = bounds(PyList_GET_ITEM(pieces, i), &start, &stop)) != 1) {
            r = k;
            goto done;
        }
        if (start <= t && t < stop)
            at_t = PyList_GET_ITEM(pieces, i);
    }
    for (i = i > 0 ? i : 0; i < n; i++) {  /* the pieces overlapping [t, end) */
        if ((k = bounds(PyList_GET_ITEM(pieces, i), &start, &stop)) != 1) {
            r = k;
            goto done;
        }
        if (start >= end_ms)
            break;
        if (stop > t) {
            if (nparts == MAX_PARTS)
                goto done;
            starts[nparts] = start, stops[nparts] = stop;
            parts[nparts++] = PyList_GET_ITEM(pieces, i);
        }
    }
    Py_INCREF(at_t);  /* the pieces stay alive while their facts are made: the list may not */
    for (i = 0; i < nparts; i++)
        Py_INCREF(parts[i]);
    if (nparts == 0) {
        r = emit(head, s, uuid, head[2], end, at_t, at_t == Py_None ? gap : s_empty, out, unattributed) ? -1 : 1;
    } else {
        for (i = 0; i < nparts; i++) {
            PyObject *a, *b;
            int un;
            if ((a = field_of(&piece_fields, parts[i], a_start)) == NULL ||
                (b = field_of(&piece_fields, parts[i], a_end)) == NULL) {
                Py_XDECREF(a);
                r = -1;
                break;
            }
            /* max(t, start), min(end, stop): the first of equals, as Python's */
            k = emit(head, s, uuid, starts[i] > t ? a : head[2], end_ms <= stops[i] ? end : b, parts[i], s_empty, out,
                     &un);
            Py_DECREF(a);
            Py_DECREF(b);
            if (k < 0) {
                r = -1;
                break;
            }
            if (i == 0)  /* each sample counts once, as what covers its start */
                *unattributed = un;
            r = 1;
        }
    }
    Py_DECREF(at_t);
    for (i = 0; i < nparts; i++)
        Py_DECREF(parts[i]);
done:
    Py_XDECREF(uuid);
    Py_XDECREF(per_pod);
    return r;
}

static PyObject *exclusive_facts(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *t, *end, *samples, *gap, *pieces_by_device, *gpus_by_uuid, *out, *fallback, *seq, *head[5];
    long long t_ms, end_ms = 0;
    long attributed = 0, unattributed = 0;
    Py_ssize_t i;
    int overflow, r, un;
    if (utilization_fact == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_samples.setup() was not called");
        return NULL;
    }
    if (nargs != 11 && nargs != 12) {
        PyErr_Format(PyExc_TypeError, "exclusive_facts() takes 11 or 12 arguments (%zd given)", nargs);
        return NULL;
    }
    head[4] = nargs == 12 && args[11] == Py_True && utilization_body != Py_None ? Py_True : Py_False;  /* encoded */
    head[0] = args[0], head[1] = args[1], head[2] = t = args[2], end = args[3], samples = args[4], head[3] = args[5];
    gap = args[6], pieces_by_device = args[7], gpus_by_uuid = args[8], out = args[9], fallback = args[10];
    if (!PyLong_CheckExact(t) || !PyLong_CheckExact(end) || !PyUnicode_CheckExact(gap) ||
        !PyDict_CheckExact(pieces_by_device) || !PyDict_CheckExact(gpus_by_uuid) || !PyList_CheckExact(out)) {
        PyErr_SetString(PyExc_TypeError, "exclusive_facts(): t and end ints, gap_reason a str, pieces_by_device and "
                        "gpus_by_uuid dicts, out a list");
        return NULL;
    }
    t_ms = PyLong_AsLongLongAndOverflow(t, &overflow);
    if (!overflow)
        end_ms = PyLong_AsLongLongAndOverflow(end, &overflow);
    if (PyErr_Occurred())
        return NULL;
    if ((seq = PySequence_Fast(samples, "exclusive_facts(): samples must be a sequence")) == NULL)
        return NULL;
    for (i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *s = PySequence_Fast_GET_ITEM(seq, i), *res;
        r = overflow ? 0 : sample_facts(head, t_ms, end, end_ms, s, gap, pieces_by_device, gpus_by_uuid, out, &un);
        if (r < 0)
            goto error;
        if (r == 1) {
            if (un)
                unattributed++;
            else
                attributed++;
            continue;
        }
        if ((res = PyObject_CallOneArg(fallback, s)) == NULL)
            goto error;
        Py_DECREF(res);
    }
    Py_DECREF(seq);
    return Py_BuildValue("(ll)", attributed, unattributed);
error:
    Py_DECREF(seq);
    return NULL;
}

static PyMethodDef methods[] = {
    {"exclusive_facts", (PyCFunction)(void (*)(void))exclusive_facts, METH_FASTCALL,
     "exclusive_facts(cluster_id, node, t, end, samples, pos, gap_reason, pieces_by_device, gpus_by_uuid, out, "
     "fallback[, encoded]) -> (attributed, unattributed): see domain/samples.py"},
    {"setup", setup, METH_VARARGS, "setup(utilization_fact, DeviceSample, Piece[, utilization_body])"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_samples", NULL, -1, methods};

#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) \
        return NULL;

PyMODINIT_FUNC PyInit__samples(void) {
    INTERN(s_exclusive, "exclusive")
    INTERN(s_unattributed, "unattributed")
    INTERN(s_empty, "")
    INTERN(a_uuid, "gpu_uuid")
    INTERN(a_per_pod, "per_pod")
    INTERN(a_mode, "mode")
    INTERN(a_from, "valid_from_ms")
    INTERN(a_to, "valid_to_ms")
    INTERN(a_start, "start_ms")
    INTERN(a_end, "end_ms")
    INTERN(a_confidence, "confidence")
    if ((one = PyLong_FromLong(1)) == NULL || (no_pods = PyDict_New()) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
