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
 * utilization_body(...) -> (Avro body or fact, confidence): the same fact, as the body the
 *     worker's writer (streams/_avro_c ``body_of``, handed to set_body_writer) writes of it
 *     where it is sure of every value, else as the fact.
 * setup(python_utilization_fact, UtilizationFact, Piece): the reference and the classes, once.
 * The fact ids' SHA-256 is in domain/_fact_id.c, capacity facts in domain/_capacity_fact.c, a
 * node's capacity segment in domain/_capacity_segment.c.
 */
#include "_facts.h"  /* Python.h first, as it must be */

#include "_fields.h"

#include <stdint.h>
#include <string.h>

static PyObject *fact_id(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return hash_parts(args, nargs);
}

/* -- utilization facts ------------------------------------------------------------------ */
static PyObject *py_utilization, *utilization_cls, *piece_cls;
static PyObject *s_utilization, *s_allocated, *s_unattributed, *s_unknown, *s_medium, *s_empty, *s_dict, *no_args;
static PyObject *a_ratio, *a_fb, *a_power, *a_energy, *a_uuid, *a_kind, *a_confidence, *a_reason, *a_fact_id,
    *a_tenant, *a_project, *a_namespace, *a_pod_name, *a_pod_uid, *a_topic, *a_partition, *a_offset;
static Fields sample_fields = FIELDS(&a_ratio, &a_uuid, &a_fb, &a_power, &a_energy),
              piece_fields = FIELDS(&a_kind, &a_confidence, &a_namespace, &a_pod_name, &a_pod_uid, &a_reason,
                                    &a_fact_id, &a_tenant, &a_project),
              pos_fields = FIELDS(&a_topic, &a_partition, &a_offset);
static PyObject *k_fact_id, *k_cluster, *k_gpu_uuid, *k_device_id, *k_node, *k_observed, *k_span, *k_ratio, *k_fb,
    *k_power, *k_energy, *k_capacity_fact_id, *k_kind, *k_tenant, *k_project, *k_namespace, *k_pod_name,
    *k_pod_uid, *k_confidence, *k_reason, *k_topic, *k_partition, *k_offset;

#define NFIELDS 23  /* a utilization fact's */
static PyObject **field_keys[NFIELDS] = {
    &k_fact_id, &k_cluster, &k_gpu_uuid, &k_device_id, &k_node, &k_observed, &k_span, &k_ratio, &k_fb, &k_power,
    &k_energy, &k_capacity_fact_id, &k_kind, &k_tenant, &k_project, &k_namespace, &k_pod_name, &k_pod_uid,
    &k_confidence, &k_reason, &k_topic, &k_partition, &k_offset};
/* streams/_avro_c's writer of a body from values in the schema's order (its capsule BODY_API) */
#define BODY_API "gpuledger.streams._avro_c.body_of"
typedef PyObject *(*BodyOf)(const char *program, Py_ssize_t program_len, PyObject *const *values, Py_ssize_t n);
static BodyOf body_of;
static PyObject *body_program;

static PyObject *pos_cls;

/* The fields a fact takes of a piece (frozen: a Piece is replaced, never changed), read once
 * per piece and kept for the next facts under it: the pieces met last, each held (so no other
 * object takes its address while it is kept), at a slot of its address, with the version of
 * its class they were read at (a class changed since, a property given to it, is read anew). */
enum { P_KIND, P_CONFIDENCE, P_NAMESPACE, P_POD_NAME, P_POD_UID, P_REASON, P_FACT_ID, P_TENANT, P_PROJECT, P_N };
static PyObject **const piece_names[P_N] = {&a_kind, &a_confidence, &a_namespace, &a_pod_name, &a_pod_uid,
                                            &a_reason, &a_fact_id, &a_tenant, &a_project};
#define KEPT 512  /* pieces: a power of two */
_Static_assert(P_N <= KEPT_FIELDS, "a piece's fields are kept whole");
static Kept kept_pieces[KEPT];
static Kept kept_pos;  /* the last source position (frozen too): a scrape's samples share one */

static PyObject *const *piece_values(PyObject *piece) {
    return kept_fields(&kept_pieces[((uintptr_t)piece >> 4) & (KEPT - 1)], &piece_fields, piece, piece_names, P_N);
}

static PyObject *setup(PyObject *self, PyObject *args) {
    PyObject *f, *cls, *piece, *pos = NULL;
    int i;
    if (!PyArg_ParseTuple(args, "OO!O!|O!", &f, &PyType_Type, &cls, &PyType_Type, &piece, &PyType_Type, &pos))
        return NULL;
    Py_XSETREF(py_utilization, Py_NewRef(f));
    Py_XSETREF(utilization_cls, Py_NewRef(cls));
    Py_XSETREF(piece_cls, Py_NewRef(piece));
    Py_XSETREF(pos_cls, Py_XNewRef(pos));
    for (i = 0; i < KEPT; i++)  /* of the classes set before */
        kept_forget(&kept_pieces[i], P_N);
    kept_forget(&kept_pos, 3);
    Py_RETURN_NONE;
}

PyObject *built_object(PyObject *cls, PyObject *d) {
    PyObject *o = PyBaseObject_Type.tp_new((PyTypeObject *)cls, no_args, NULL), *k, *v;
    Py_ssize_t pos = 0, offset = 0;
    int slots = PyDict_GET_SIZE(d) > 0;  /* (an empty dict is adopted: nothing to set) */
    if (o == NULL)
        return NULL;
    while (slots && PyDict_Next(d, &pos, &k, &v))  /* a class keeping them all in slots: set there */
        slots = slot_member(_PyType_Lookup((PyTypeObject *)cls, k), &offset);
    if (!slots) {
        if (PyObject_GenericSetAttr(o, s_dict, d) < 0)
            Py_CLEAR(o);
        return o;
    }
    for (pos = 0; PyDict_Next(d, &pos, &k, &v);) {
        slot_member(_PyType_Lookup((PyTypeObject *)cls, k), &offset);
        Py_XSETREF(*(PyObject **)((char *)o + offset), Py_NewRef(v));
    }
    return o;
}

/* domain/facts.py ``built`` (its reference: object.__new__, then the dict adopted as __dict__):
 * a class keeping every named field in a slot gets them set there, which the reference cannot. */
static PyObject *built(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyType_Check(args[0]) || !PyDict_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "built(cls, fields): a class and a dict");
        return NULL;
    }
    return built_object(args[0], args[1]);
}

/* The answer is the reference's: where an argument is not of the type expected here. */
#define FALLBACK() do { result = PyObject_Vectorcall(py_utilization, args, nargs, NULL); goto done; } while (0)

/* The fact of utilization_fact's arguments, or with ``encoded`` (and a body writer set) its
 * Avro body where the writer is sure of every value; *confidence_out its confidence when
 * asked for and built here (NULL when the reference built it). */
static PyObject *build(PyObject *const *args, Py_ssize_t nargs, int encoded, PyObject **confidence_out) {
    PyObject *cluster, *node, *t, *s, *pos, *device, *a, *b, *piece, *why, *per_pod, *held, *n_targets;
    PyObject *ratio = NULL, *kind = NULL, *confidence = NULL, *reason = NULL, *d = NULL, *result = NULL;
    PyObject *pk, *pc, *ns, *pn, *uid, *parts[5], *vals[NFIELDS] = {NULL};  /* (pk .. uid: borrowed from kept) */
    PyObject *const *pv = NULL, *const *at = NULL, *kept[P_N] = {NULL};  /* the piece's fields, the position's */
    long long t_ms, a_ms, b_ms, span;
    int overflow, i;
    static const int piece_at[] = {P_FACT_ID, P_TENANT, P_PROJECT, P_NAMESPACE, P_POD_NAME, P_POD_UID};
    static PyObject **const pos_names[] = {&a_topic, &a_partition, &a_offset};
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
    if ((ratio = field_of(&sample_fields, s, a_ratio)) == NULL)
        goto done;
    if (piece == Py_None) {
        kind = Py_NewRef(s_unknown);
        confidence = Py_NewRef(s_unattributed);
        reason = PyUnicode_GET_LENGTH(why) ? Py_NewRef(why) : PyUnicode_FromFormat("no capacity fact covers %U", device);
        if (reason == NULL)
            goto done;
    } else {
        if ((pv = piece_values(piece)) == NULL)
            goto done;
        for (i = 0; i < P_N; i++)  /* held here: Python run below (a part's str()) may replace the kept ones */
            kept[i] = Py_NewRef(pv[i]);
        pv = kept;
        pk = pv[P_KIND], pc = pv[P_CONFIDENCE];
        if (!PyUnicode_CheckExact(pk) || !PyUnicode_CheckExact(pc))
            FALLBACK();
        if (PyUnicode_Compare(pk, s_allocated) == 0 && PyUnicode_Compare(pc, s_unattributed) != 0) {
            PyObject *key, *own, *h;
            kind = Py_NewRef(s_allocated);
            confidence = Py_NewRef(pc);
            reason = Py_NewRef(why);
            own = NULL;
            ns = pv[P_NAMESPACE], pn = pv[P_POD_NAME];
            /* no pod's own series: nothing to look up (a key of two str hashes, as the reference's does) */
            if (PyDict_GET_SIZE(per_pod) > 0 || !PyUnicode_CheckExact(ns) || !PyUnicode_CheckExact(pn)) {
                if ((key = PyTuple_Pack(2, ns, pn)) == NULL)
                    goto done;
                own = PyDict_GetItemWithError(per_pod, key);
                Py_DECREF(key);
                if (own == NULL && PyErr_Occurred())
                    goto done;
            }
            if (own != NULL) {  /* the pod's own series: relative to the share it holds */
                double x, n, hv;
                uid = pv[P_POD_UID];
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
            PyObject *pr = pv[P_REASON];
            if (!PyUnicode_CheckExact(pr))
                FALLBACK();
            kind = Py_NewRef(pk);
            confidence = Py_NewRef(s_unattributed);
            if (PyUnicode_GET_LENGTH(pr))
                reason = Py_NewRef(pr);
            else if ((reason = PyUnicode_FromFormat("device %U", pk)) == NULL)
                goto done;
        }
    }
    /* the fact's 23 fields, in the order of its dataclass and its Avro schema; the first that
     * cannot be read raises, as the dict built field by field did */
#define SET(i, expr) if ((vals[i] = (expr)) == NULL) goto done
    parts[0] = s_utilization, parts[1] = cluster, parts[2] = device, parts[3] = t, parts[4] = a;
    SET(0, hash_parts(parts, a_ms != t_ms ? 5 : 4));
    SET(1, Py_NewRef(cluster));
    SET(2, field_of(&sample_fields, s, a_uuid));
    SET(3, Py_NewRef(device));
    SET(4, Py_NewRef(node));
    SET(5, Py_NewRef(t));
    SET(6, PyLong_FromLongLong(span > 0 ? span : 0));
    SET(7, Py_NewRef(ratio));
    SET(8, field_of(&sample_fields, s, a_fb));
    SET(9, field_of(&sample_fields, s, a_power));
    SET(10, field_of(&sample_fields, s, a_energy));
    SET(11, Py_NewRef(pv == NULL ? s_empty : pv[P_FACT_ID]));
    SET(12, Py_NewRef(kind));
    for (i = 1; i < 6; i++)  /* tenant_id .. pod_uid */
        SET(12 + i, Py_NewRef(pv == NULL ? s_empty : pv[piece_at[i]]));
    SET(18, Py_NewRef(confidence));
    SET(19, Py_NewRef(reason));
    if (pos_cls != NULL && Py_TYPE(pos) == (PyTypeObject *)pos_cls) {  /* kept: frozen */
        if ((at = kept_fields(&kept_pos, &pos_fields, pos, pos_names, 3)) == NULL)
            goto done;
        for (i = 0; i < 3; i++)
            SET(20 + i, Py_NewRef(at[i]));
    } else {
        SET(20, field_of(&pos_fields, pos, a_topic));
        SET(21, field_of(&pos_fields, pos, a_partition));
        SET(22, field_of(&pos_fields, pos, a_offset));
    }
#undef SET
    if (body_of != NULL && encoded) {  /* the Avro body, where the writer is sure of every value */
        if ((result = body_of(PyBytes_AS_STRING(body_program), PyBytes_GET_SIZE(body_program), vals, NFIELDS)) == NULL)
            goto done;
        if (result != Py_None) {
            if (confidence_out != NULL)
                *confidence_out = Py_NewRef(confidence);
            goto done;
        }
        Py_CLEAR(result);  /* not sure of one: the fact, which the writers name what is wrong with */
    }
    if ((d = _PyDict_NewPresized(NFIELDS)) == NULL)  /* without growing on the way */
        goto done;
    for (i = 0; i < NFIELDS; i++)
        if (PyDict_SetItem(d, *field_keys[i], vals[i]) < 0)
            goto done;
    result = built_object(utilization_cls, d);
    if (result != NULL && confidence_out != NULL)
        *confidence_out = Py_NewRef(confidence);
done:
    for (i = 0; i < NFIELDS; i++)
        Py_XDECREF(vals[i]);
    for (i = 0; i < P_N; i++)
        Py_XDECREF(kept[i]);
    Py_XDECREF(ratio);
    Py_XDECREF(kind);
    Py_XDECREF(confidence);
    Py_XDECREF(reason);
    Py_XDECREF(d);
    return result;
}

static PyObject *utilization_fact(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return build(args, nargs, 0, NULL);
}

static PyObject *utilization_body(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *confidence = NULL, *out, *got = build(args, nargs, 1, &confidence);
    if (got == NULL)
        return NULL;
    if (confidence == NULL && (confidence = PyObject_GetAttr(got, a_confidence)) == NULL) {  /* the reference's */
        Py_DECREF(got);
        return NULL;
    }
    out = PyTuple_Pack(2, got, confidence);
    Py_DECREF(got);
    Py_DECREF(confidence);
    return out;
}

static PyObject *set_body_writer(PyObject *self, PyObject *args) {
    PyObject *capsule, *program, *names;
    Py_ssize_t i;
    if (!PyArg_ParseTuple(args, "OO!O!", &capsule, &PyBytes_Type, &program, &PyTuple_Type, &names))
        return NULL;
    if (PyTuple_GET_SIZE(names) != NFIELDS || PyBytes_GET_SIZE(program) != 2 * NFIELDS)
        Py_RETURN_FALSE;
    for (i = 0; i < NFIELDS; i++) {
        int r = PyObject_RichCompareBool(PyTuple_GET_ITEM(names, i), *field_keys[i], Py_EQ);
        if (r < 0)
            return NULL;
        if (!r)
            Py_RETURN_FALSE;  /* another schema than the fields built here: facts stay objects */
    }
    if ((body_of = (BodyOf)PyCapsule_GetPointer(capsule, BODY_API)) == NULL)
        return NULL;
    Py_XSETREF(body_program, Py_NewRef(program));
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"fact_id", (PyCFunction)(void (*)(void))fact_id, METH_FASTCALL,
     "fact_id(*parts) -> the first 32 hex digits of SHA-256 over str(part)s joined by U+001F (UTF-8)"},
    {"utilization_fact", (PyCFunction)(void (*)(void))utilization_fact, METH_FASTCALL,
     "utilization_fact(cluster_id, node, t, s, pos, device, a, b, piece, why, per_pod, held, n_targets): "
     "see domain/utilization.py"},
    {"utilization_body", (PyCFunction)(void (*)(void))utilization_body, METH_FASTCALL,
     "utilization_body(<utilization_fact's arguments>) -> (Avro body or fact, confidence): see domain/utilization.py"},
    {"set_body_writer", set_body_writer, METH_VARARGS,
     "set_body_writer(capsule, program, names) -> bool: utilization_body writes bodies from now on (True), or the "
     "schema is not the fields built here (False)"},
    {"built", (PyCFunction)(void (*)(void))built, METH_FASTCALL,
     "built(cls, fields) -> an object of cls with fields as its __dict__ (or in its slots): see domain/facts.py"},
    {"setup", setup, METH_VARARGS, "setup(python_utilization_fact, UtilizationFact, Piece)"},
    {"capacity_fact", (PyCFunction)(void (*)(void))capacity_fact, METH_FASTCALL,
     "capacity_fact(seg, gpu_uuid, device_id, gpu_class, mode, profile, fraction, a, b, kind, owner, confidence, "
     "reason) -> (device_id, fact, piece): see domain/capacity.py"},
    {"capacity_setup", capacity_setup, METH_VARARGS, "capacity_setup(python_make_fact, CapacityFact, Piece, no_owner)"},
    {"segment_facts", (PyCFunction)(void (*)(void))segment_facts, METH_FASTCALL,
     "segment_facts(inv, book, cluster_id, node, start, end, holders, pos) -> [(device_id, fact, piece)]: see "
     "domain/capacity.py"},
    {"segment_setup", segment_setup, METH_VARARGS,
     "segment_setup(python_segment_facts, Segment, _gpu_facts, _outside_of, python_same_pods)"},
    {"same_pods", (PyCFunction)(void (*)(void))same_pods, METH_FASTCALL,
     "same_pods(book, holders, a_ms, b_ms) -> bool: see domain/capacity.py"},
    {"segment_counts", segment_counts, METH_NOARGS, "segment_counts() -> (GPUs taken in C, GPUs handed to _gpu_facts)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_facts", NULL, -1, methods};

#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) \
        return NULL;

PyMODINIT_FUNC PyInit__facts(void) {
    if (fact_id_init() < 0 || capacity_fact_init() < 0 || capacity_segment_init() < 0)
        return NULL;
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
