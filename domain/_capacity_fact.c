/* Capacity facts in C: domain/capacity.py ``python_make_fact``, the same (device id, fact,
 * piece) for the same arguments (tests/unit/domain/test_capacity_fact_c.py holds the two to
 * the same results and the same errors).
 *
 * capacity_fact(seg, gpu_uuid, device_id, gpu_class, mode, profile, fraction, a, b, kind,
 *               owner, confidence, reason) -> (device_id, CapacityFact, Piece)
 *
 * The owner's fields over the no-owner defaults (``_NO_OWNER``, in its order; a field of the
 * owner's own after them), the id hashed as ``_capacity_id`` hashes it (domain/_fact_id.c), the
 * fact's fields in its order and the piece's in its. Where the owner is neither None nor a
 * dict, the reference answers.
 *
 * capacity_setup(python_make_fact, CapacityFact, Piece, no_owner): the reference, the classes
 * and the defaults, once. */
#include "_facts.h"  /* Python.h first, as it must be */

static PyObject *reference, *fact_cls, *piece_cls, *no_owner;
static PyObject *s_capacity, *s_vm, *a_cluster, *a_node, *a_pos, *a_topic, *a_partition,
    *a_offset;
/* the fact's fields before the owner's, and after */
static PyObject *k_head[12], *k_tail[5];
static const char *const head_names[12] = {"fact_id", "cluster_id", "kind", "gpu_uuid", "device_id", "node",
                                           "gpu_class", "mode", "profile", "capacity_fraction", "valid_from_ms",
                                           "valid_to_ms"};
static const char *const tail_names[5] = {"confidence", "reason", "src_topic", "src_partition", "src_offset"};
/* the piece's fields: start, end, fact id, kind, then owner fields, then confidence, reason */
static PyObject *p_start, *p_end, *p_owner[5];
static const char *const owner_names[5] = {"tenant_id", "project_id", "namespace", "pod_name", "pod_uid"};
static PyObject *k_pod_uid, *k_namespace_uid, *k_tenant, *k_workload;

PyObject *capacity_setup(PyObject *self, PyObject *args) {
    PyObject *f, *cls, *piece, *owner;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO!O!O!", &f, &PyType_Type, &cls, &PyType_Type, &piece, &PyDict_Type, &owner))
        return NULL;
    Py_XSETREF(reference, Py_NewRef(f));
    Py_XSETREF(fact_cls, Py_NewRef(cls));
    Py_XSETREF(piece_cls, Py_NewRef(piece));
    Py_XSETREF(no_owner, PyDict_Copy(owner));
    if (no_owner == NULL)
        return NULL;
    Py_RETURN_NONE;
}

/* who[key], which is there: the defaults hold every key read here */
#define WHO(key) PyDict_GetItemWithError(who, key)

PyObject *capacity_fact(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *seg, *owner, *who = NULL, *cluster = NULL, *node = NULL, *pos = NULL, *src[3] = {NULL}, *fid = NULL;
    PyObject *fact = NULL, *piece = NULL, *d = NULL, *result = NULL, *parts[9], *k, *v, *workload, *tail[5];
    Py_ssize_t i, at = 0, nparts = 8;
    int vm;
    (void)self;
    if (reference == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_facts.capacity_setup() was not called");
        return NULL;
    }
    if (nargs != 13)
        return PyObject_Vectorcall(reference, args, nargs, NULL);
    seg = args[0], owner = args[10];
    if (owner != Py_None && !PyDict_CheckExact(owner))
        return PyObject_Vectorcall(reference, args, nargs, NULL);
    if ((cluster = PyObject_GetAttr(seg, a_cluster)) == NULL || (node = PyObject_GetAttr(seg, a_node)) == NULL ||
        (pos = PyObject_GetAttr(seg, a_pos)) == NULL || (src[0] = PyObject_GetAttr(pos, a_topic)) == NULL ||
        (src[1] = PyObject_GetAttr(pos, a_partition)) == NULL || (src[2] = PyObject_GetAttr(pos, a_offset)) == NULL)
        goto done;
    if ((who = PyDict_Copy(no_owner)) == NULL || (owner != Py_None && PyDict_Update(who, owner) < 0))
        goto done;
    /* the id: the unit, the bounds, the kind, the pod and namespace UIDs (and a VM's tenant) */
    parts[0] = s_capacity, parts[1] = cluster, parts[2] = args[2], parts[3] = args[7], parts[4] = args[8];
    parts[5] = args[9];
    if ((parts[6] = WHO(k_pod_uid)) == NULL || (parts[7] = WHO(k_namespace_uid)) == NULL ||
        (workload = WHO(k_workload)) == NULL)
        goto done;
    if ((vm = PyObject_RichCompareBool(workload, s_vm, Py_EQ)) < 0)
        goto done;
    if (vm) {
        if ((parts[8] = WHO(k_tenant)) == NULL)
            goto done;
        nparts = 9;
    }
    if ((fid = hash_parts(parts, nparts)) == NULL)
        goto done;
    if ((d = _PyDict_NewPresized(12 + PyDict_GET_SIZE(who) + 5)) == NULL)
        goto done;
    {
        PyObject *head[12] = {fid, cluster, args[9], args[1], args[2], node, args[3], args[4], args[5], args[6],
                              args[7], args[8]};
        for (i = 0; i < 12; i++)
            if (PyDict_SetItem(d, k_head[i], head[i]) < 0)
                goto done;
    }
    at = 0;
    while (PyDict_Next(who, &at, &k, &v))
        if (PyDict_SetItem(d, k, v) < 0)
            goto done;
    tail[0] = args[11], tail[1] = args[12], tail[2] = src[0], tail[3] = src[1], tail[4] = src[2];
    for (i = 0; i < 5; i++)
        if (PyDict_SetItem(d, k_tail[i], tail[i]) < 0)
            goto done;
    if ((fact = built_object(fact_cls, d)) == NULL)
        goto done;
    Py_SETREF(d, _PyDict_NewPresized(11));
    if (d == NULL || PyDict_SetItem(d, p_start, args[7]) < 0 || PyDict_SetItem(d, p_end, args[8]) < 0 ||
        PyDict_SetItem(d, k_head[0], fid) < 0 || PyDict_SetItem(d, k_head[2], args[9]) < 0)
        goto done;
    for (i = 0; i < 5; i++) {
        PyObject *w = WHO(p_owner[i]);
        if (w == NULL || PyDict_SetItem(d, p_owner[i], w) < 0)
            goto done;
    }
    if (PyDict_SetItem(d, k_tail[0], args[11]) < 0 || PyDict_SetItem(d, k_tail[1], args[12]) < 0)
        goto done;
    if ((piece = built_object(piece_cls, d)) == NULL)
        goto done;
    result = PyTuple_Pack(3, args[2], fact, piece);
done:
    if (result == NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_KeyError, "capacity_fact(): a default owner field is missing");
    Py_XDECREF(cluster);
    Py_XDECREF(node);
    Py_XDECREF(pos);
    for (i = 0; i < 3; i++)
        Py_XDECREF(src[i]);
    Py_XDECREF(who);
    Py_XDECREF(fid);
    Py_XDECREF(d);
    Py_XDECREF(fact);
    Py_XDECREF(piece);
    return result;
}

#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) \
        return -1;

int capacity_fact_init(void) {
    int i;
    INTERN(s_capacity, "capacity")
    INTERN(s_vm, "vm")
    INTERN(a_cluster, "cluster_id")
    INTERN(a_node, "node")
    INTERN(a_pos, "pos")
    INTERN(a_topic, "topic")
    INTERN(a_partition, "partition")
    INTERN(a_offset, "offset")
    INTERN(p_start, "start_ms")
    INTERN(p_end, "end_ms")
    INTERN(k_pod_uid, "pod_uid")
    INTERN(k_namespace_uid, "namespace_uid")
    INTERN(k_tenant, "tenant_id")
    INTERN(k_workload, "workload_kind")
    for (i = 0; i < 12; i++)
        INTERN(k_head[i], head_names[i])
    for (i = 0; i < 5; i++) {
        INTERN(k_tail[i], tail_names[i])
        INTERN(p_owner[i], owner_names[i])
    }
    return 0;
}
