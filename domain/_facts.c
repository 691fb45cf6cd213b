/* Facts in C, each beside its Python reference (tests/unit/domain/test_facts_c.py holds them
 * to the same results and the same errors):
 *
 * fact_id(*parts) -> str: domain/facts.py ``python_fact_id``, the same 32 hex digits of
 *     SHA-256 over the parts' str() joined by U+001F and encoded UTF-8. A str, an int that
 *     fits 64 bits and None are read here; any other part (a float, a bool, a subclass, a huge
 *     int) is handed to str() as the reference does. The digest is OpenSSL's, as hashlib's is.
 * utilization_fact(...) -> UtilizationFact: domain/utilization.py ``python_utilization_fact``
 *     (the same arguments), built as domain/facts.py ``built`` builds it. Where an argument is
 *     not of the type the attribution path hands over, the reference is called instead.
 * setup(python_utilization_fact, UtilizationFact, Piece): the reference and the classes, once.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <openssl/evp.h>
#include <string.h>

static EVP_MD *sha256;
static EVP_MD_CTX *ctx;

/* The digest's input, gathered before the digest starts (a part's __str__ may run Python
 * that asks for a fact id itself): 256 bytes on the stack, more on the heap. */
typedef struct {
    char stack[256];
    char *data;
    size_t used, size;
} Feed;

static int feed(Feed *f, const char *data, size_t n) {
    if (f->used + n > f->size) {
        size_t size = 2 * (f->used + n);
        char *grown = f->data == f->stack ? PyMem_Malloc(size) : PyMem_Realloc(f->data, size);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        if (f->data == f->stack)
            memcpy(grown, f->stack, f->used);
        f->data = grown;
        f->size = size;
    }
    memcpy(f->data + f->used, data, n);
    f->used += n;
    return 0;
}

/* The UTF-8 of a str object (what str.encode() gives; a lone surrogate raises as it does). */
static int feed_str(Feed *f, PyObject *s) {
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (u == NULL)
        return -1;
    return feed(f, u, (size_t)n);
}

static int feed_part(Feed *f, PyObject *part) {
    if (PyUnicode_CheckExact(part))
        return feed_str(f, part);
    if (part == Py_None)
        return feed(f, "None", 4);
    if (PyLong_CheckExact(part)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(part, &overflow);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (!overflow) {
            char digits[24], *p = digits + sizeof digits;
            unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
            do {
                *--p = (char)('0' + u % 10);
                u /= 10;
            } while (u);
            if (v < 0)
                *--p = '-';
            return feed(f, p, (size_t)(digits + sizeof digits - p));
        }
    }
    PyObject *s = PyObject_Str(part);
    int r;
    if (s == NULL)
        return -1;
    r = feed_str(f, s);
    Py_DECREF(s);
    return r;
}

static PyObject *hash_parts(PyObject *const *args, Py_ssize_t nargs) {
    static const char hex[] = "0123456789abcdef";
    Feed f;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    Py_ssize_t i;
    PyObject *out = NULL;
    int ok;
    f.data = f.stack;
    f.used = 0;
    f.size = sizeof f.stack;
    for (i = 0; i < nargs; i++)
        if ((i && feed(&f, "\x1f", 1) < 0) || feed_part(&f, args[i]) < 0)
            goto done;
    ok = EVP_DigestInit_ex2(ctx, sha256, NULL) && EVP_DigestUpdate(ctx, f.data, f.used) &&
         EVP_DigestFinal_ex(ctx, md, &md_len) && md_len >= 16;
    if (!ok) {
        PyErr_SetString(PyExc_RuntimeError, "SHA-256 failed (OpenSSL)");
        goto done;
    }
    out = PyUnicode_New(32, 127);
    if (out != NULL) {
        Py_UCS1 *o = PyUnicode_1BYTE_DATA(out);
        for (i = 0; i < 16; i++) {
            o[2 * i] = (Py_UCS1)hex[md[i] >> 4];
            o[2 * i + 1] = (Py_UCS1)hex[md[i] & 15];
        }
    }
done:
    if (f.data != f.stack)
        PyMem_Free(f.data);
    return out;
}

static PyObject *fact_id(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return hash_parts(args, nargs);
}

/* -- utilization facts ------------------------------------------------------------------ */
static PyObject *py_utilization, *utilization_cls, *piece_cls;
static PyObject *s_utilization, *s_allocated, *s_unattributed, *s_unknown, *s_medium, *s_empty, *s_dict, *no_args;
static PyObject *a_ratio, *a_fb, *a_power, *a_energy, *a_uuid, *a_kind, *a_confidence, *a_reason, *a_fact_id,
    *a_tenant, *a_project, *a_namespace, *a_pod_name, *a_pod_uid, *a_topic, *a_partition, *a_offset;
static PyObject *k_fact_id, *k_cluster, *k_gpu_uuid, *k_device_id, *k_node, *k_observed, *k_span, *k_ratio, *k_fb,
    *k_power, *k_energy, *k_capacity_fact_id, *k_kind, *k_tenant, *k_project, *k_namespace, *k_pod_name,
    *k_pod_uid, *k_confidence, *k_reason, *k_topic, *k_partition, *k_offset;

static PyObject *setup(PyObject *self, PyObject *args) {
    PyObject *f, *cls, *piece;
    if (!PyArg_ParseTuple(args, "OO!O!", &f, &PyType_Type, &cls, &PyType_Type, &piece))
        return NULL;
    Py_XSETREF(py_utilization, Py_NewRef(f));
    Py_XSETREF(utilization_cls, Py_NewRef(cls));
    Py_XSETREF(piece_cls, Py_NewRef(piece));
    Py_RETURN_NONE;
}

/* d[key] = value, stealing the reference to value; -1 on error (value NULL included) */
static int put(PyObject *d, PyObject *key, PyObject *value) {
    int r;
    if (value == NULL)
        return -1;
    r = PyDict_SetItem(d, key, value);
    Py_DECREF(value);
    return r;
}

/* The answer is the reference's: where an argument is not of the type expected here. */
#define FALLBACK() do { result = PyObject_Vectorcall(py_utilization, args, nargs, NULL); goto done; } while (0)

static PyObject *utilization_fact(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *cluster, *node, *t, *s, *pos, *device, *a, *b, *piece, *why, *per_pod, *held, *n_targets;
    PyObject *ratio = NULL, *kind = NULL, *confidence = NULL, *reason = NULL, *d = NULL, *result = NULL;
    PyObject *pk = NULL, *pc = NULL, *ns = NULL, *pn = NULL, *uid = NULL, *parts[5];
    long long t_ms, a_ms, b_ms, span;
    int overflow, i;
    static PyObject **piece_attrs[] = {&a_fact_id, &a_tenant, &a_project, &a_namespace, &a_pod_name, &a_pod_uid};
    static PyObject **piece_keys[] = {&k_capacity_fact_id, &k_tenant, &k_project, &k_namespace, &k_pod_name,
                                      &k_pod_uid};
    if (py_utilization == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_facts.setup() was not called");
        return NULL;
    }
    if (nargs != 13)
        FALLBACK();
    cluster = args[0], node = args[1], t = args[2], s = args[3], pos = args[4], device = args[5], a = args[6];
    b = args[7], piece = args[8], why = args[9], per_pod = args[10], held = args[11], n_targets = args[12];
    if (!PyLong_CheckExact(t) || !PyLong_CheckExact(a) || !PyLong_CheckExact(b) || !PyUnicode_CheckExact(why) ||
        !PyUnicode_CheckExact(device) || !PyDict_CheckExact(per_pod) || !PyDict_CheckExact(held) ||
        (piece != Py_None && Py_TYPE(piece) != (PyTypeObject *)piece_cls))
        FALLBACK();
    t_ms = PyLong_AsLongLongAndOverflow(t, &overflow);
    if (overflow)
        FALLBACK();
    a_ms = PyLong_AsLongLongAndOverflow(a, &overflow);
    if (overflow)
        FALLBACK();
    b_ms = PyLong_AsLongLongAndOverflow(b, &overflow);
    if (overflow || __builtin_sub_overflow(b_ms, a_ms, &span))
        FALLBACK();
    if (PyErr_Occurred())
        goto done;
    if ((ratio = PyObject_GetAttr(s, a_ratio)) == NULL)
        goto done;
    if (piece == Py_None) {
        kind = Py_NewRef(s_unknown);
        confidence = Py_NewRef(s_unattributed);
        reason = PyUnicode_GET_LENGTH(why) ? Py_NewRef(why) : PyUnicode_FromFormat("no capacity fact covers %U", device);
        if (reason == NULL)
            goto done;
    } else {
        if ((pk = PyObject_GetAttr(piece, a_kind)) == NULL || (pc = PyObject_GetAttr(piece, a_confidence)) == NULL)
            goto done;
        if (!PyUnicode_CheckExact(pk) || !PyUnicode_CheckExact(pc))
            FALLBACK();
        if (PyUnicode_Compare(pk, s_allocated) == 0 && PyUnicode_Compare(pc, s_unattributed) != 0) {
            PyObject *key, *own, *h;
            kind = Py_NewRef(s_allocated);
            confidence = Py_NewRef(pc);
            reason = Py_NewRef(why);
            if ((ns = PyObject_GetAttr(piece, a_namespace)) == NULL || (pn = PyObject_GetAttr(piece, a_pod_name)) == NULL)
                goto done;
            if ((key = PyTuple_Pack(2, ns, pn)) == NULL)
                goto done;
            own = PyDict_GetItemWithError(per_pod, key);
            Py_DECREF(key);
            if (own == NULL && PyErr_Occurred())
                goto done;
            if (own != NULL) {  /* the pod's own series: relative to the share it holds */
                double x, n, hv;
                if ((uid = PyObject_GetAttr(piece, a_pod_uid)) == NULL)
                    goto done;
                h = PyDict_GetItemWithError(held, uid);
                if (h == NULL && PyErr_Occurred())
                    goto done;
                if (h != NULL) {
                    if (!PyFloat_CheckExact(own) || !PyLong_CheckExact(h) || !PyLong_CheckExact(n_targets))
                        FALLBACK();
                    n = PyLong_AsDouble(n_targets);
                    hv = PyLong_AsDouble(h);
                    if (PyErr_Occurred()) {
                        PyErr_Clear();
                        FALLBACK();
                    }
                    if (hv == 0.0)
                        FALLBACK();  /* the reference raises ZeroDivisionError */
                    x = PyFloat_AS_DOUBLE(own) * n / hv;
                    Py_SETREF(ratio, PyFloat_FromDouble(x < 1.0 ? x : 1.0));  /* min(1.0, x) */
                    if (ratio == NULL)
                        goto done;
                    Py_SETREF(confidence, Py_NewRef(s_medium));
                }
            }
        } else {
            PyObject *pr = PyObject_GetAttr(piece, a_reason);
            if (pr == NULL)
                goto done;
            if (!PyUnicode_CheckExact(pr)) {
                Py_DECREF(pr);
                FALLBACK();
            }
            kind = Py_NewRef(pk);
            confidence = Py_NewRef(s_unattributed);
            if (PyUnicode_GET_LENGTH(pr)) {
                reason = pr;
            } else {
                Py_DECREF(pr);
                if ((reason = PyUnicode_FromFormat("device %U", pk)) == NULL)
                    goto done;
            }
        }
    }
    if ((d = _PyDict_NewPresized(23)) == NULL)  /* the fact's 23 fields, without growing on the way */
        goto done;
    parts[0] = s_utilization, parts[1] = cluster, parts[2] = device, parts[3] = t, parts[4] = a;
    if (put(d, k_fact_id, hash_parts(parts, a_ms != t_ms ? 5 : 4)) < 0 || PyDict_SetItem(d, k_cluster, cluster) < 0 ||
        put(d, k_gpu_uuid, PyObject_GetAttr(s, a_uuid)) < 0 || PyDict_SetItem(d, k_device_id, device) < 0 ||
        PyDict_SetItem(d, k_node, node) < 0 || PyDict_SetItem(d, k_observed, t) < 0 ||
        put(d, k_span, PyLong_FromLongLong(span > 0 ? span : 0)) < 0 || PyDict_SetItem(d, k_ratio, ratio) < 0 ||
        put(d, k_fb, PyObject_GetAttr(s, a_fb)) < 0 || put(d, k_power, PyObject_GetAttr(s, a_power)) < 0 ||
        put(d, k_energy, PyObject_GetAttr(s, a_energy)) < 0)
        goto done;
    if (piece == Py_None) {
        if (PyDict_SetItem(d, k_capacity_fact_id, s_empty) < 0 || PyDict_SetItem(d, k_kind, kind) < 0)
            goto done;
        for (i = 1; i < 6; i++)
            if (PyDict_SetItem(d, *piece_keys[i], s_empty) < 0)
                goto done;
    } else {
        if (put(d, k_capacity_fact_id, PyObject_GetAttr(piece, a_fact_id)) < 0 || PyDict_SetItem(d, k_kind, kind) < 0)
            goto done;
        for (i = 1; i < 6; i++)
            if (put(d, *piece_keys[i], PyObject_GetAttr(piece, *piece_attrs[i])) < 0)
                goto done;
    }
    if (PyDict_SetItem(d, k_confidence, confidence) < 0 || PyDict_SetItem(d, k_reason, reason) < 0 ||
        put(d, k_topic, PyObject_GetAttr(pos, a_topic)) < 0 || put(d, k_partition, PyObject_GetAttr(pos, a_partition)) < 0 ||
        put(d, k_offset, PyObject_GetAttr(pos, a_offset)) < 0)
        goto done;
    result = PyBaseObject_Type.tp_new((PyTypeObject *)utilization_cls, no_args, NULL);
    if (result != NULL && PyObject_GenericSetAttr(result, s_dict, d) < 0)
        Py_CLEAR(result);
done:
    Py_XDECREF(ratio);
    Py_XDECREF(kind);
    Py_XDECREF(confidence);
    Py_XDECREF(reason);
    Py_XDECREF(d);
    Py_XDECREF(pk);
    Py_XDECREF(pc);
    Py_XDECREF(ns);
    Py_XDECREF(pn);
    Py_XDECREF(uid);
    return result;
}

static PyMethodDef methods[] = {
    {"fact_id", (PyCFunction)(void (*)(void))fact_id, METH_FASTCALL,
     "fact_id(*parts) -> the first 32 hex digits of SHA-256 over str(part)s joined by U+001F (UTF-8)"},
    {"utilization_fact", (PyCFunction)(void (*)(void))utilization_fact, METH_FASTCALL,
     "utilization_fact(cluster_id, node, t, s, pos, device, a, b, piece, why, per_pod, held, n_targets): "
     "see domain/utilization.py"},
    {"setup", setup, METH_VARARGS, "setup(python_utilization_fact, UtilizationFact, Piece)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_facts", NULL, -1, methods};

#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) \
        return NULL;

PyMODINIT_FUNC PyInit__facts(void) {
    sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
    ctx = EVP_MD_CTX_new();
    if (sha256 == NULL || ctx == NULL) {
        PyErr_SetString(PyExc_ImportError, "OpenSSL has no SHA-256 here");
        return NULL;
    }
    INTERN(s_utilization, "utilization")
    INTERN(s_allocated, "allocated")
    INTERN(s_unattributed, "unattributed")
    INTERN(s_unknown, "unknown")
    INTERN(s_medium, "medium")
    INTERN(s_empty, "")
    INTERN(s_dict, "__dict__")
    INTERN(a_ratio, "sm_active_ratio")
    INTERN(a_fb, "fb_used_bytes")
    INTERN(a_power, "power_w")
    INTERN(a_energy, "energy_j")
    INTERN(a_uuid, "gpu_uuid")
    INTERN(a_kind, "kind")
    INTERN(a_confidence, "confidence")
    INTERN(a_reason, "reason")
    INTERN(a_fact_id, "fact_id")
    INTERN(a_tenant, "tenant_id")
    INTERN(a_project, "project_id")
    INTERN(a_namespace, "namespace")
    INTERN(a_pod_name, "pod_name")
    INTERN(a_pod_uid, "pod_uid")
    INTERN(a_topic, "topic")
    INTERN(a_partition, "partition")
    INTERN(a_offset, "offset")
    k_fact_id = a_fact_id, k_gpu_uuid = a_uuid, k_ratio = a_ratio, k_fb = a_fb, k_power = a_power;
    k_energy = a_energy, k_kind = a_kind, k_tenant = a_tenant, k_project = a_project, k_namespace = a_namespace;
    k_pod_name = a_pod_name, k_pod_uid = a_pod_uid, k_confidence = a_confidence, k_reason = a_reason;
    INTERN(k_cluster, "cluster_id")
    INTERN(k_device_id, "device_id")
    INTERN(k_node, "node")
    INTERN(k_observed, "observed_at_ms")
    INTERN(k_span, "span_ms")
    INTERN(k_capacity_fact_id, "capacity_fact_id")
    INTERN(k_topic, "src_topic")
    INTERN(k_partition, "src_partition")
    INTERN(k_offset, "src_offset")
    if ((no_args = PyTuple_New(0)) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
