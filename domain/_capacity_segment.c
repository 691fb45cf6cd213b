/* A node's capacity segment in C: domain/capacity.py ``python_segment_facts``, the same
 * (device id, fact, piece) list for the same arguments (tests/unit/domain/
 * test_capacity_segment_c.py holds the two to the same results and the same errors).
 *
 * segment_facts(inv, book, cluster_id, node, start, end, holders, pos) -> list
 *
 * The node's inventory GPUs in their order. An exclusive GPU valid in [start, end) whose facts
 * do not change inside it (no maintenance window, no namespace version edge, no pod end)
 * gives its one fact here: unallocated, or allocated to the pod the holder names at ``start``
 * and to its namespace's tenant at the GPU's first instant, as ``_unit_facts`` and ``_owner``
 * decide; the fact itself is ``capacity_fact``'s (domain/_capacity_fact.c). Every other GPU
 * (MIG, time-sliced, a window or a change inside, a value of an unexpected type) is handed to
 * ``_gpu_facts`` in its turn, and the devices held outside the inventory to ``_outside_of``,
 * so the facts keep the reference's order and every error stays the reference's.
 *
 * same_pods(book, holders, a_ms, b_ms) -> bool: ``python_same_pods``, whether every holder names
 * the same pod at both instants, asked of each snapshot of a node that holds what the one
 * before held; where a holder or the book is not of the types the path makes, the reference's.
 *
 * segment_setup(python_segment_facts, Segment, _gpu_facts, _outside_of, python_same_pods): once.
 * segment_counts() -> (GPUs taken here, GPUs handed to ``_gpu_facts``) since the module loaded. */
#include "_facts.h"  /* Python.h first, as it must be */

#include "_fields.h"

static PyObject *reference, *segment_cls, *gpu_facts, *outside_of, *same_reference;
static PyObject *s_exclusive, *s_allocated, *s_unallocated, *s_empty, *s_ended, *one;
static PyObject *a_on_node, *a_unavailable, *a_windows, *a_valid_from, *a_valid_to, *a_mode, *a_uuid, *a_class,
    *a_end, *a_namespace;
static unsigned long long taken, handed;

PyObject *segment_setup(PyObject *self, PyObject *args) {
    PyObject *f, *cls, *gpu, *outside, *same;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO!OOO", &f, &PyType_Type, &cls, &gpu, &outside, &same))
        return NULL;
    Py_XSETREF(same_reference, Py_NewRef(same));
    Py_XSETREF(reference, Py_NewRef(f));
    Py_XSETREF(segment_cls, Py_NewRef(cls));
    Py_XSETREF(gpu_facts, Py_NewRef(gpu));
    Py_XSETREF(outside_of, Py_NewRef(outside));
    Py_RETURN_NONE;
}

PyObject *segment_counts(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return Py_BuildValue("(KK)", taken, handed);
}

typedef struct {
    PyObject *seg, *start_o, *end_o, *holders, *known, *out;
    long long start, end;
    int no_windows;  /* the inventory has no maintenance window at all */
    Book book;
} Segment;

/* One GPU entry: 1 done here (its fact appended, or none where it is not valid in the
 * segment), 0 for ``_gpu_facts``, -1 error. */
static int exclusive_gpu(Segment *sg, PyObject *inv, PyObject *gpu) {
    PyObject *mode = NULL, *uuid = NULL, *gpu_class = NULL, *vf_o = NULL, *vt_o = NULL, *a0, *b0, *holder, *pod = NULL,
             *pod_ns = NULL, *owner = NULL, *confidence = NULL, *reason = NULL, *kind, *fact;
    long long vf, vt, pend = 0, a, b;
    int r, err = 0, vt_none, pend_none = 1;
    if ((mode = attr_str(gpu, a_mode, &err)) == NULL || PyUnicode_Compare(mode, s_exclusive) != 0 ||
        (uuid = attr_str(gpu, a_uuid, &err)) == NULL || (gpu_class = attr_str(gpu, a_class, &err)) == NULL) {
        r = err || PyErr_Occurred() ? -1 : 0;
        goto done;
    }
    if ((vf_o = attr_of(gpu, a_valid_from, &err)) == NULL || (vt_o = attr_of(gpu, a_valid_to, &err)) == NULL) {
        r = err ? -1 : 0;
        goto done;
    }
    if ((r = ll_or_none(vf_o, 0, &vf, NULL)) != 1 || (r = ll_or_none(vt_o, 1, &vt, &vt_none)) != 1)
        goto done;
    if (vf >= sg->end || (!vt_none && vt <= sg->start)) {
        r = 1;  /* not valid in the segment: no facts, no device known */
        goto done;
    }
    r = -1;
    a0 = sg->start >= vf ? sg->start_o : vf_o;  /* max(start, valid_from): the first of equals, as max's */
    b0 = vt_none || sg->end <= vt ? sg->end_o : vt_o;  /* min(end, valid_to or end) */
    a = sg->start >= vf ? sg->start : vf;
    b = vt_none || sg->end <= vt ? sg->end : vt;
    if (!sg->no_windows) {
        PyObject *w = PyObject_CallMethodObjArgs(inv, a_windows, uuid, a0, b0, NULL);
        int none;
        if (w == NULL)
            goto done;
        none = PyList_CheckExact(w) && PyList_GET_SIZE(w) == 0;
        Py_DECREF(w);
        if (!none) {
            r = 0;
            goto done;
        }
    }
    if (PySet_Add(sg->known, uuid) < 0)
        goto done;
    if ((holder = PyDict_GetItemWithError(sg->holders, uuid)) == NULL && PyErr_Occurred())
        goto done;
    r = 0;
    if (holder != NULL) {
        PyObject *ns, *name;
        if (!PyTuple_CheckExact(holder) || PyTuple_GET_SIZE(holder) < 3 || sg->book.by_name == NULL)
            goto done;
        ns = PyTuple_GET_ITEM(holder, 0), name = PyTuple_GET_ITEM(holder, 1);
        if (!PyUnicode_CheckExact(ns) || !PyUnicode_CheckExact(name))
            goto done;
        if ((r = book_pod_at(&sg->book, ns, name, sg->start, &pod)) != 1)
            goto done;
        r = 0;
    }
    if (pod != NULL) {
        if ((pod_ns = attr_str(pod, a_namespace, &err)) == NULL) {
            r = err ? -1 : 0;
            goto done;
        }
        if ((r = attr_ll(pod, a_end, 1, &pend, &pend_none)) != 1)
            goto done;
        r = book_namespace_changes(&sg->book, pod_ns, a, b);
        if (r != 0) {  /* facts cut inside, or not sure: the reference's */
            r = r < 0 ? -1 : 0;
            goto done;
        }
        if (!pend_none && a < pend && pend < b)
            goto done;
    }
    if (holder == NULL || (pod != NULL && !pend_none && pend <= a)) {
        kind = s_unallocated;
        owner = Py_NewRef(Py_None);
        confidence = Py_NewRef(s_empty);
        reason = Py_NewRef(holder == NULL ? s_empty : s_ended);
    } else {
        kind = s_allocated;
        if ((r = book_owner(&sg->book, holder, pod, pod_ns, a, &owner, &confidence, &reason)) != 1)
            goto done;
    }
    {
        PyObject *args[13] = {sg->seg, uuid, uuid, gpu_class, s_exclusive, s_empty, one, a0, b0, kind, owner,
                              confidence, reason};
        if ((fact = capacity_fact(NULL, args, 13)) == NULL) {
            r = -1;
            goto done;
        }
    }
    r = PyList_Append(sg->out, fact) < 0 ? -1 : 1;
    Py_DECREF(fact);
done:
    Py_XDECREF(mode);
    Py_XDECREF(uuid);
    Py_XDECREF(gpu_class);
    Py_XDECREF(vf_o);
    Py_XDECREF(vt_o);
    Py_XDECREF(pod);
    Py_XDECREF(pod_ns);
    Py_XDECREF(owner);
    Py_XDECREF(confidence);
    Py_XDECREF(reason);
    return r;
}

/* Two exact ints as long longs: 1 read, 0 not two exact ints of 64 bits (the reference's), -1 error. */
static int two_ll(PyObject *x, PyObject *y, long long *a, long long *b) {
    int r = as_ll(x, a);
    return r == 1 ? as_ll(y, b) : r;
}

/* sg->out += facts (any iterable, as list += takes it); 0 done, -1 error */
static int extend(Segment *sg, PyObject *facts) {
    PyObject *r;
    if (facts == NULL)
        return -1;
    r = PySequence_InPlaceConcat(sg->out, facts);
    Py_DECREF(facts);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

PyObject *segment_facts(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *inv, *book, *gpus = NULL, *seq = NULL, *result = NULL, *unavailable, *k, *v;
    Segment sg = {0};
    Py_ssize_t i, at = 0;
    int r, outside = 0;
    (void)self;
    if (reference == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_facts.segment_setup() was not called");
        return NULL;
    }
    if (nargs != 8 || !PyDict_CheckExact(args[6]) || (r = two_ll(args[4], args[5], &sg.start, &sg.end)) == 0)
        return PyObject_Vectorcall(reference, args, nargs, NULL);
    if (r < 0)
        return NULL;
    inv = args[0], book = args[1], sg.start_o = args[4], sg.end_o = args[5], sg.holders = args[6];
    {
        PyObject *seg_args[5] = {args[2], args[3], args[4], args[5], args[7]};
        if ((sg.seg = PyObject_Vectorcall(segment_cls, seg_args, 5, NULL)) == NULL)
            return NULL;
    }
    if ((sg.known = PySet_New(NULL)) == NULL || (sg.out = PyList_New(0)) == NULL)
        goto done;
    if ((gpus = PyObject_CallMethodOneArg(inv, a_on_node, args[3])) == NULL ||
        (seq = PySequence_Fast(gpus, "on_node() must give a sequence")) == NULL)
        goto done;
    if ((unavailable = PyObject_GetAttr(inv, a_unavailable)) == NULL) {
        PyErr_Clear();
    } else {
        sg.no_windows = PyList_CheckExact(unavailable) && PyList_GET_SIZE(unavailable) == 0;
        Py_DECREF(unavailable);
    }
    book_open(&sg.book, book);
    for (i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *gpu = PySequence_Fast_GET_ITEM(seq, i), *facts;
        if ((r = exclusive_gpu(&sg, inv, gpu)) < 0)
            goto done;
        if (r == 1) {
            taken++;
            continue;
        }
        handed++;
        facts = PyObject_CallFunctionObjArgs(gpu_facts, inv, book, sg.seg, gpu, sg.holders, sg.known, NULL);
        if (extend(&sg, facts) < 0)
            goto done;
    }
    while (!outside && PyDict_Next(sg.holders, &at, &k, &v)) {  /* a device held that no GPU has */
        if ((r = PySet_Contains(sg.known, k)) < 0)
            goto done;
        outside = !r;
    }
    if (outside) {
        PyObject *facts = PyObject_CallFunctionObjArgs(outside_of, inv, book, sg.seg, sg.holders, sg.known, NULL);
        if (extend(&sg, facts) < 0)
            goto done;
    }
    result = Py_NewRef(sg.out);
done:
    Py_XDECREF(sg.seg);
    Py_XDECREF(sg.known);
    Py_XDECREF(sg.out);
    Py_XDECREF(gpus);
    Py_XDECREF(seq);
    book_close(&sg.book);
    return result;
}

PyObject *same_pods(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *holders, *k, *h;
    Book book = {0};
    Py_ssize_t at = 0;
    long long a = 0, b = 0;
    int r;
    (void)self;
    if (same_reference == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_facts.segment_setup() was not called");
        return NULL;
    }
    if (nargs != 4 || !PyDict_CheckExact(args[1]) || (r = two_ll(args[2], args[3], &a, &b)) == 0)
        return PyObject_Vectorcall(same_reference, args, nargs, NULL);
    if (r < 0)
        return NULL;
    r = 1;
    holders = args[1];
    book_open(&book, args[0]);
    if (book.by_name == NULL)
        r = 2;
    while (r == 1 && PyDict_Next(holders, &at, &k, &h)) {  /* in order, to the first that differs */
        if (!PyTuple_CheckExact(h) || PyTuple_GET_SIZE(h) < 2 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(h, 0)) ||
            !PyUnicode_CheckExact(PyTuple_GET_ITEM(h, 1)))
            r = 2;
        else
            r = book_same_pod(&book, PyTuple_GET_ITEM(h, 0), PyTuple_GET_ITEM(h, 1), a, b);
    }
    book_close(&book);
    if (r < 0)
        return NULL;
    if (r == 2)
        return PyObject_Vectorcall(same_reference, args, nargs, NULL);
    return PyBool_FromLong(r);
}

#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) \
        return -1;

int capacity_segment_init(void) {
    if (capacity_owner_init() < 0)
        return -1;
    INTERN(s_exclusive, "exclusive")
    INTERN(s_allocated, "allocated")
    INTERN(s_unallocated, "unallocated")
    INTERN(s_empty, "")
    INTERN(s_ended, "holding pod had ended")
    INTERN(a_on_node, "on_node")
    INTERN(a_unavailable, "unavailable")
    INTERN(a_windows, "unavailable_windows")
    INTERN(a_valid_from, "valid_from_ms")
    INTERN(a_valid_to, "valid_to_ms")
    INTERN(a_mode, "mode")
    INTERN(a_uuid, "gpu_uuid")
    INTERN(a_class, "gpu_class")
    INTERN(a_end, "end_ms")
    INTERN(a_namespace, "namespace")
    if ((one = PyFloat_FromDouble(1.0)) == NULL)
        return -1;
    return 0;
}
