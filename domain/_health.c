/* A scrape's health facts in C: what domain/gpu_health.py ``python_health_rows`` does, the
 * same facts in the same order.
 *
 * health_rows(health, base, cluster_id, observed_at_ms) -> list[GpuHealthFact]
 *
 * ``health`` maps each device (HealthDevice: uuid, GPU instance or None, profile, model, PCI
 * bus id) to its fields in the fact's units; ``base`` is the scrape's row, every field in the
 * fact's order. Devices in (uuid, instance, -1 for none) order, ties in the mapping's order;
 * each fact is a copy of ``base`` with its id (fact_id("health", cluster_id, uuid, instance,
 * observed_at_ms)), its device's five fields and its fields. Anything of a type the parse never
 * makes (a device that is not a HealthDevice of str, int-or-None, str, str, str; fields that are
 * not a dict) is the reference's to build or refuse.
 *
 * health_bodies, the same facts as a worker writes them, is in domain/_health_bodies.c. */
#include "_health.h"  /* Python.h first, as it must be */

#include <stdlib.h>
#include <string.h>

PyObject *reference, *fact_cls, *fact_id, *s_health, *k_fact_id, *k_names[5];
static PyObject *device_cls, *s_dict, *no_args;

static PyObject *setup(PyObject *self, PyObject *args) {
    PyObject *f, *cls, *dev, *ids;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO!O!O", &f, &PyType_Type, &cls, &PyType_Type, &dev, &ids))
        return NULL;
    Py_XSETREF(reference, Py_NewRef(f));
    Py_XSETREF(fact_cls, Py_NewRef(cls));
    Py_XSETREF(device_cls, Py_NewRef(dev));
    Py_XSETREF(fact_id, Py_NewRef(ids));
    Py_RETURN_NONE;
}

/* Is this a device as the parse makes them (a HealthDevice, a tuple), with its fields a dict? */
static int plain(PyObject *device, PyObject *fields) {
    PyObject *inst;
    if (Py_TYPE(device) != (PyTypeObject *)device_cls || PyTuple_GET_SIZE(device) != 5 || !PyDict_CheckExact(fields))
        return 0;
    inst = PyTuple_GET_ITEM(device, 1);
    return PyUnicode_CheckExact(PyTuple_GET_ITEM(device, 0)) && (inst == Py_None || PyLong_CheckExact(inst)) &&
           PyUnicode_CheckExact(PyTuple_GET_ITEM(device, 2)) && PyUnicode_CheckExact(PyTuple_GET_ITEM(device, 3)) &&
           PyUnicode_CheckExact(PyTuple_GET_ITEM(device, 4));
}

PyObject *fact_from(PyObject *row) {
    PyObject *f = PyBaseObject_Type.tp_new((PyTypeObject *)fact_cls, no_args, NULL);
    if (f != NULL && PyObject_GenericSetAttr(f, s_dict, row) < 0)
        Py_CLEAR(f);
    return f;
}

/* One fact: a copy of base with the device's id, identity and fields. */
static PyObject *fact(PyObject *device, PyObject *fields, PyObject *base, PyObject *cluster, PyObject *t) {
    PyObject *row, *id, *parts[5], *result = NULL;
    int i;
    if ((row = PyDict_Copy(base)) == NULL)
        return NULL;
    parts[0] = s_health, parts[1] = cluster, parts[2] = PyTuple_GET_ITEM(device, 0);
    parts[3] = PyTuple_GET_ITEM(device, 1), parts[4] = t;
    if ((id = PyObject_Vectorcall(fact_id, parts, 5, NULL)) == NULL)
        goto done;
    i = PyDict_SetItem(row, k_fact_id, id);
    Py_DECREF(id);
    if (i < 0)
        goto done;
    for (i = 0; i < 5; i++)
        if (PyDict_SetItem(row, k_names[i], PyTuple_GET_ITEM(device, i)) < 0)
            goto done;
    if (PyDict_Update(row, fields) < 0)
        goto done;
    result = fact_from(row);
done:
    Py_DECREF(row);
    return result;
}

/* A device of the mapping, as it is sorted: by uuid, then instance (-1 for none), then its
 * place in the mapping (what the reference's sort by (uuid, instance or -1, place) gives). */
typedef struct {
    PyObject *uuid, *device, *fields;  /* borrowed from the mapping while sorted */
    long long instance;
    Py_ssize_t place;
} Placed;

static int str_order(PyObject *a, PyObject *b) {  /* code point order, as str's < */
    if (PyUnicode_KIND(a) == PyUnicode_1BYTE_KIND && PyUnicode_KIND(b) == PyUnicode_1BYTE_KIND) {
        Py_ssize_t n = PyUnicode_GET_LENGTH(a), m = PyUnicode_GET_LENGTH(b);
        int c = memcmp(PyUnicode_1BYTE_DATA(a), PyUnicode_1BYTE_DATA(b), (size_t)(n < m ? n : m));
        return c ? c : (n > m) - (n < m);
    }
    return PyUnicode_Compare(a, b);  /* (two exact str: never an error) */
}

static int placed_order(const void *x, const void *y) {
    const Placed *a = x, *b = y;
    int c = a->uuid == b->uuid ? 0 : str_order(a->uuid, b->uuid);
    if (c)
        return c;
    if (a->instance != b->instance)
        return a->instance < b->instance ? -1 : 1;
    return (a->place > b->place) - (a->place < b->place);
}

/* The devices of ``health`` in (uuid, instance, -1 for none) order, ties in the mapping's
 * order: a new list, and *fields_out the list of their fields (new, in the same order); NULL with
 * an error set, or None (new ref) where a device or its fields are not as the parse makes them
 * (or an instance is past a long long). */
PyObject *in_order(PyObject *health, PyObject **fields_out) {
    PyObject *order = NULL, *fields = NULL, *device, *f;
    Py_ssize_t pos = 0, i = 0, n = PyDict_GET_SIZE(health);
    Placed held[16], *p = n <= 16 ? held : PyMem_Malloc((size_t)n * sizeof(Placed));
    *fields_out = NULL;
    if (p == NULL)
        return PyErr_NoMemory();
    while (PyDict_Next(health, &pos, &device, &f)) {
        PyObject *inst;
        int overflow = 0;
        if (i >= n || !plain(device, f))
            goto not_plain;
        inst = PyTuple_GET_ITEM(device, 1);
        p[i].instance = inst == Py_None ? -1 : PyLong_AsLongLongAndOverflow(inst, &overflow);
        if (overflow)
            goto not_plain;
        p[i].uuid = PyTuple_GET_ITEM(device, 0), p[i].device = device, p[i].fields = f, p[i].place = i;
        i++;
    }
    if (i != n) {
        PyErr_SetString(PyExc_RuntimeError, "_health: the health mapping changed while read");
        goto done;
    }
    qsort(p, (size_t)n, sizeof(Placed), placed_order);
    if ((order = PyList_New(n)) == NULL || (fields = PyList_New(n)) == NULL) {
        Py_CLEAR(order);
        goto done;
    }
    for (i = 0; i < n; i++) {
        PyList_SET_ITEM(order, i, Py_NewRef(p[i].device));
        PyList_SET_ITEM(fields, i, Py_NewRef(p[i].fields));
    }
    *fields_out = fields;
    goto done;
not_plain:
    order = Py_NewRef(Py_None);
done:
    if (p != held)
        PyMem_Free(p);
    return order;
}

static PyObject *health_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *health, *base, *cluster, *t, *order, *out, *fields;
    Py_ssize_t i, n;
    (void)self;
    if (reference == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_health.setup() was not called");
        return NULL;
    }
    if (nargs != 4)
        return PyObject_Vectorcall(reference, args, nargs, NULL);
    health = args[0], base = args[1], cluster = args[2], t = args[3];
    if (!PyDict_CheckExact(health) || !PyDict_CheckExact(base))
        return PyObject_Vectorcall(reference, args, nargs, NULL);
    if ((order = in_order(health, &fields)) == NULL)
        return NULL;
    if (order == Py_None) {
        Py_DECREF(order);
        return PyObject_Vectorcall(reference, args, nargs, NULL);
    }
    n = PyList_GET_SIZE(order);
    if ((out = PyList_New(n)) == NULL)
        goto error;
    for (i = 0; i < n; i++) {
        PyObject *f, *device = PyList_GET_ITEM(order, i);
        if ((f = fact(device, PyList_GET_ITEM(fields, i), base, cluster, t)) == NULL)
            goto error;
        PyList_SET_ITEM(out, i, f);
    }
    Py_DECREF(order);
    Py_DECREF(fields);
    return out;
error:
    Py_DECREF(order);
    Py_XDECREF(fields);
    Py_XDECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"health_rows", (PyCFunction)(void (*)(void))health_rows, METH_FASTCALL,
     "health_rows(health, base, cluster_id, observed_at_ms) -> the scrape's health facts: see domain/gpu_health.py"},
    {"health_bodies", (PyCFunction)(void (*)(void))health_bodies, METH_FASTCALL,
     "health_bodies(health, cluster_id, node, observed_at_ms, pos, quiet) -> (bodies or facts, loud facts) or None"},
    {"set_body_writer", set_body_writer, METH_VARARGS,
     "set_body_writer(capsule, program, names, fact_fields) -> bool: health_bodies writes bodies from now on (True), or the "
     "schema is not the fields built here (False)"},
    {"set_quiet", set_quiet, METH_VARARGS, "set_quiet(input field names, clock-event mask): HealthFold's inputs"},
    {"setup", setup, METH_VARARGS, "setup(python_health_rows, GpuHealthFact, HealthDevice, fact_id)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_health", NULL, -1, methods, NULL, NULL, NULL, NULL};

#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) \
        return NULL;

PyMODINIT_FUNC PyInit__health(void) {
    INTERN(s_health, "health")
    INTERN(s_dict, "__dict__")
    INTERN(k_fact_id, "fact_id")
    INTERN(k_names[0], "gpu_uuid")
    INTERN(k_names[1], "gpu_instance_id")
    INTERN(k_names[2], "profile")
    INTERN(k_names[3], "model")
    INTERN(k_names[4], "pci_bus_id")
    if ((no_args = PyTuple_New(0)) == NULL || bodies_init() < 0)
        return NULL;
    return PyModule_Create(&module);
}
