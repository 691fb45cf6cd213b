/* The OwnershipBook's lookups (domain/k8s.py) that a capacity fact's owner needs, in C, for
 * domain/_capacity_segment.c: each answers as its Python method does, or says it is not sure
 * (a value of a type the book never holds), and then the caller hands the GPU to the reference.
 * Times epoch ms. */
#include "_facts.h"  /* Python.h first, as it must be */

#include "_fields.h"

/* a_endpoint, a_tenant, a_project, a_cost: the attribute read and the owner's key it goes under */
static PyObject *s_unattributed, *s_high, *s_empty, *a_pods_by_name, *a_pods, *a_namespaces, *a_start, *a_end,
    *a_uid, *a_endpoint, *a_from, *a_to, *a_tenant, *a_project, *a_cost;
static PyObject *k_namespace, *k_pod_name, *k_container, *k_pod_uid, *k_namespace_uid;

/* An int or None as a long long: 1 read (*none set, where asked, to whether it is None; None read
 * only where none_ok), 0 anything else (the reference answers), -1 error. */
int ll_or_none(PyObject *v, int none_ok, long long *out, int *none) {
    if (none != NULL)
        *none = v == Py_None;
    return v == Py_None ? none_ok : as_ll(v, out);
}

/* o.name, a new reference; NULL where it cannot be read: *err set on an error, not where the
 * attribute is missing (the AttributeError cleared: the reference answers). */
PyObject *attr_of(PyObject *o, PyObject *name, int *err) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError))
            PyErr_Clear();
        else
            *err = 1;
    }
    return v;
}

/* An attribute read as ``ll_or_none`` reads it; an attribute missing is 0 too. */
int attr_ll(PyObject *o, PyObject *name, int none_ok, long long *out, int *none) {
    int r, err = 0;
    PyObject *v = attr_of(o, name, &err);
    if (v == NULL)
        return err ? -1 : 0;
    r = ll_or_none(v, none_ok, out, none);
    Py_DECREF(v);
    return r;
}

/* An attribute that is an exact str: a new reference, or NULL (*err set on an error). */
PyObject *attr_str(PyObject *o, PyObject *name, int *err) {
    PyObject *v = attr_of(o, name, err);
    if (v != NULL && !PyUnicode_CheckExact(v))
        Py_CLEAR(v);
    return v;
}

/* One of the lives or versions of a name, [from, to) read from its attributes: where it covers t
 * and starts after *best (the first of equals stays), it becomes *best (new reference). 1 read,
 * 0 not sure, -1 error; *best cleared on both. */
static int latest_covering(PyObject *item, PyObject *from_name, PyObject *to_name, long long t, PyObject **best,
                           long long *best_from) {
    long long from, to;
    int r, none;
    if ((r = attr_ll(item, from_name, 0, &from, NULL)) != 1 || (r = attr_ll(item, to_name, 1, &to, &none)) != 1) {
        Py_CLEAR(*best);
        return r;
    }
    if (from <= t && (none || t < to) && (*best == NULL || from > *best_from)) {
        Py_XSETREF(*best, Py_NewRef(item));
        *best_from = from;
    }
    return 1;
}

/* What ``OwnershipBook.pod_at(namespace, name, t)`` answers (the latest start covering t wins):
 * 1 answered (*life a new reference, or NULL for no pod), 0 not sure, -1 error. */
int book_pod_at(Book *book, PyObject *namespace, PyObject *name, long long t, PyObject **life) {
    PyObject *key = PyUnicode_FromFormat("%U/%U", namespace, name), *uids;
    long long best_start = 0;
    Py_ssize_t i;
    int r;
    *life = NULL;
    if (key == NULL)
        return -1;
    uids = PyDict_GetItemWithError(book->by_name, key);
    Py_DECREF(key);
    if (uids == NULL)
        return PyErr_Occurred() ? -1 : 1;
    if (!PyList_CheckExact(uids))
        return 0;
    for (i = 0; i < PyList_GET_SIZE(uids); i++) {
        PyObject *p = PyDict_GetItemWithError(book->pods, PyList_GET_ITEM(uids, i));
        if (p == NULL) {  /* the reference raises KeyError */
            Py_CLEAR(*life);
            return PyErr_Occurred() ? -1 : 0;
        }
        if ((r = latest_covering(p, a_start, a_end, t, life, &best_start)) != 1)
            return r;
    }
    return 1;
}

/* Does ``namespace/name`` name the same pod (or none) at a and at b (``OwnershipBook.same_pod_at``)?
 * 1 yes, 0 no, 2 not sure, -1 error. */
int book_same_pod(Book *book, PyObject *namespace, PyObject *name, long long a, long long b) {
    PyObject *key = PyUnicode_FromFormat("%U/%U", namespace, name), *uids, *at_a = NULL, *at_b = NULL;
    long long start, end;
    int r, none;
    if (key == NULL)
        return -1;
    uids = PyDict_GetItemWithError(book->by_name, key);
    Py_DECREF(key);
    if (uids == NULL)
        return PyErr_Occurred() ? -1 : 1;  /* no pod at either */
    if (!PyList_CheckExact(uids))
        return 2;
    if (PyList_GET_SIZE(uids) == 1) {  /* the one pod covers both or neither */
        PyObject *p = PyDict_GetItemWithError(book->pods, PyList_GET_ITEM(uids, 0));
        if (p == NULL)
            return PyErr_Occurred() ? -1 : 2;
        if ((r = attr_ll(p, a_start, 0, &start, NULL)) != 1 || (r = attr_ll(p, a_end, 1, &end, &none)) != 1)
            return r < 0 ? -1 : 2;
        return (start <= a && (none || a < end)) == (start <= b && (none || b < end));
    }
    if ((r = book_pod_at(book, namespace, name, a, &at_a)) != 1 ||
        (r = book_pod_at(book, namespace, name, b, &at_b)) != 1) {
        Py_XDECREF(at_a);
        return r < 0 ? -1 : 2;
    }
    if (at_a == at_b)  /* the same pod, or none at both */
        r = 1;
    else if (at_a == NULL || at_b == NULL)
        r = 0;
    else  /* two lives, equal where every field is (as the reference's ==) */
        r = PyObject_RichCompareBool(at_a, at_b, Py_EQ);
    Py_XDECREF(at_a);
    Py_XDECREF(at_b);
    return r;
}

/* The namespace's versions: 1 (*versions borrowed, NULL for none), 0 not a list, -1 error. */
static int versions_of(Book *book, PyObject *namespace, PyObject **versions) {
    *versions = PyDict_GetItemWithError(book->namespaces, namespace);
    if (*versions == NULL)
        return PyErr_Occurred() ? -1 : 1;
    return PyList_CheckExact(*versions);
}

/* Does a version of the namespace begin or end inside (a, b) (``namespace_changes``)? 1 yes,
 * 0 no, 2 not sure, -1 error. */
int book_namespace_changes(Book *book, PyObject *namespace, long long a, long long b) {
    PyObject *versions;
    long long from, to;
    Py_ssize_t i;
    int r, none;
    if ((r = versions_of(book, namespace, &versions)) != 1)
        return r < 0 ? -1 : 2;
    for (i = 0; versions != NULL && i < PyList_GET_SIZE(versions); i++) {
        PyObject *v = PyList_GET_ITEM(versions, i);
        if ((r = attr_ll(v, a_from, 0, &from, NULL)) != 1 || (r = attr_ll(v, a_to, 1, &to, &none)) != 1)
            return r < 0 ? -1 : 2;
        if ((a < from && from < b) || (!none && a < to && to < b))
            return 1;
    }
    return 0;
}

/* ``OwnershipBook.namespace_at(namespace, t)``: 1 answered (*version a new reference or NULL),
 * 0 not sure, -1 error. */
static int namespace_at(Book *book, PyObject *namespace, long long t, PyObject **version) {
    PyObject *versions;
    long long best_from = 0;
    Py_ssize_t i;
    int r;
    *version = NULL;
    if ((r = versions_of(book, namespace, &versions)) != 1)
        return r;
    for (i = 0; versions != NULL && i < PyList_GET_SIZE(versions); i++)
        if ((r = latest_covering(PyList_GET_ITEM(versions, i), a_from, a_to, t, version, &best_from)) != 1)
            return r;
    return 1;
}

/* owner[key] = o.name: 0 done, -1 error (an attribute missing raises, as the reference's read). */
static int put_attr(PyObject *owner, PyObject *key, PyObject *o, PyObject *name) {
    PyObject *v = PyObject_GetAttr(o, name);
    int r;
    if (v == NULL)
        return -1;
    r = PyDict_SetItem(owner, key, v);
    Py_DECREF(v);
    return r;
}

/* The owner and its confidence and reason (``_owner`` for a unit of confidence "high"): 1 set
 * (new references), 0 not sure, -1 error. */
int book_owner(Book *book, PyObject *holder, PyObject *pod, PyObject *pod_ns, long long t, PyObject **owner,
               PyObject **confidence, PyObject **reason) {
    PyObject *h0 = PyTuple_GET_ITEM(holder, 0), *h1 = PyTuple_GET_ITEM(holder, 1), *ns = NULL, *tenant = NULL;
    int r = -1, err = 0;
    *owner = *confidence = *reason = NULL;
    if ((*owner = PyDict_New()) == NULL || PyDict_SetItem(*owner, k_namespace, h0) < 0 ||
        PyDict_SetItem(*owner, k_pod_name, h1) < 0 ||
        PyDict_SetItem(*owner, k_container, PyTuple_GET_ITEM(holder, 2)) < 0)
        goto done;
    if (pod == NULL) {
        *confidence = Py_NewRef(s_unattributed);
        *reason = PyUnicode_FromFormat("no pod %U/%U known at the snapshot time", h0, h1);
        r = *reason == NULL ? -1 : 1;
        goto done;
    }
    if (put_attr(*owner, k_pod_uid, pod, a_uid) < 0 || put_attr(*owner, a_endpoint, pod, a_endpoint) < 0)
        goto done;
    if ((r = namespace_at(book, pod_ns, t, &ns)) != 1)
        goto done;
    r = -1;
    if (ns == NULL) {
        *confidence = Py_NewRef(s_unattributed);
        *reason = PyUnicode_FromFormat("namespace %U unknown at that time", pod_ns);
        r = *reason == NULL ? -1 : 1;
        goto done;
    }
    if (put_attr(*owner, k_namespace_uid, ns, a_uid) < 0)
        goto done;
    if ((tenant = attr_str(ns, a_tenant, &err)) == NULL) {
        r = err ? -1 : 0;
        goto done;
    }
    if (PyUnicode_GET_LENGTH(tenant) == 0) {
        *confidence = Py_NewRef(s_unattributed);
        *reason = PyUnicode_FromFormat("namespace %U has no gpuledger.io/tenant label", pod_ns);
        r = *reason == NULL ? -1 : 1;
        goto done;
    }
    if (PyDict_SetItem(*owner, a_tenant, tenant) < 0 || put_attr(*owner, a_project, ns, a_project) < 0 ||
        put_attr(*owner, a_cost, ns, a_cost) < 0)
        goto done;
    *confidence = Py_NewRef(s_high);
    *reason = Py_NewRef(s_empty);
    r = 1;
done:
    Py_XDECREF(ns);
    Py_XDECREF(tenant);
    if (r != 1) {
        Py_CLEAR(*owner);
        Py_CLEAR(*confidence);
        Py_CLEAR(*reason);
    }
    return r;
}

/* A dict attribute of the book, or NULL (no error) where it is not one. New reference. */
static PyObject *book_dict(PyObject *book, PyObject *name) {
    PyObject *d = PyObject_GetAttr(book, name);
    if (d == NULL || !PyDict_CheckExact(d)) {
        Py_XDECREF(d);
        PyErr_Clear();
        return NULL;
    }
    return d;
}

void book_open(Book *book, PyObject *obj) {
    book->by_name = book_dict(obj, a_pods_by_name);
    book->pods = book_dict(obj, a_pods);
    book->namespaces = book_dict(obj, a_namespaces);
    if (book->by_name == NULL || book->pods == NULL || book->namespaces == NULL)
        book_close(book);  /* a holder's GPU goes to the reference */
}

void book_close(Book *book) {
    Py_CLEAR(book->by_name);
    Py_CLEAR(book->pods);
    Py_CLEAR(book->namespaces);
}

#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) \
        return -1;

int capacity_owner_init(void) {
    INTERN(s_unattributed, "unattributed")
    INTERN(s_high, "high")
    INTERN(s_empty, "")
    INTERN(a_pods_by_name, "pods_by_name")
    INTERN(a_pods, "pods")
    INTERN(a_namespaces, "namespaces")
    INTERN(a_start, "start_ms")
    INTERN(a_end, "end_ms")
    INTERN(a_uid, "uid")
    INTERN(a_endpoint, "endpoint_id")
    INTERN(a_from, "from_ms")
    INTERN(a_to, "to_ms")
    INTERN(a_tenant, "tenant_id")
    INTERN(a_project, "project_id")
    INTERN(a_cost, "cost_center")
    INTERN(k_namespace, "namespace")
    INTERN(k_pod_name, "pod_name")
    INTERN(k_container, "container")
    INTERN(k_pod_uid, "pod_uid")
    INTERN(k_namespace_uid, "namespace_uid")
    return 0;
}
