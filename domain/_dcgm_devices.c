/* A scrape's devices held in C while the walk reads its lines (domain/_dcgm_walk.c
 * ``walk_samples``), then its samples: what domain/dcgm_reference.py ``_walk`` gathers in dicts
 * (``per_gpu``, ``models``, ``pod_values``) and ``_samples`` builds of them, without a dict or
 * a float object per value. A device is its key; a field's first value stands (the dicts'
 * setdefault); a ratio field's values per pod are kept as the dicts keep them, the last one
 * of a pod standing. Anything else than the walk's own series infos hand over (a key that is
 * not (str, None or int >= 0), a field that is not one of the six, a value that is not a
 * float) answers -2: the caller walks the scrape again into the dicts, which take anything. */
#include "_dcgm_walk.h"  /* Python.h first, as it must be */

#include <string.h>

#define names dcgm_field  /* (domain/_dcgm_samples.c) */
#define no_args dcgm_no_args

void devices_clear(Devices *ds) {
    Py_ssize_t i;
    int j;
    for (i = 0; i < ds->n; i++) {
        Device *d = &ds->d[i];
        Py_XDECREF(d->key);
        Py_XDECREF(d->model);
        for (j = 0; j < NRATIO; j++) {
            Py_XDECREF(d->pod[j]);
            Py_XDECREF(d->pods[j]);
        }
    }
    if (ds->d != ds->held)
        PyMem_Free(ds->d);
    ds->d = ds->held;
    ds->n = 0;
    ds->size = HELD_DEVICES;
}

/* A key the devices can hold: (str, None) or (str, int >= 0), exactly those types. */
static int plain_key(PyObject *key) {
    PyObject *instance;
    if (!PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != 2 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(key, 0)))
        return 0;
    instance = PyTuple_GET_ITEM(key, 1);
    if (instance == Py_None)
        return 1;
    return PyLong_CheckExact(instance) && _PyLong_Sign(instance) >= 0;
}

/* Two plain keys equal? (-1 on error) */
static int same_key(PyObject *a, PyObject *b) {
    PyObject *ia = PyTuple_GET_ITEM(a, 1), *ib = PyTuple_GET_ITEM(b, 1);
    if ((ia == Py_None) != (ib == Py_None))
        return 0;
    if (PyUnicode_Compare(PyTuple_GET_ITEM(a, 0), PyTuple_GET_ITEM(b, 0)) != 0)
        return PyErr_Occurred() ? -1 : 0;
    return ia == Py_None ? 1 : PyObject_RichCompareBool(ia, ib, Py_EQ);
}

/* The device of key, added (with model) when absent and ``add``; NULL with *err -1 on error,
 * -2 for a key the devices cannot hold, 0 when absent and not added. */
static Device *device_of(Devices *ds, PyObject *key, PyObject *model, int add, int *err) {
    Py_ssize_t i;
    Device *d;
    *err = 0;
    if (ds->last != NULL && ds->last->key == key)
        return ds->last;
    for (i = 0; i < ds->n; i++)
        if (ds->d[i].key == key)
            return ds->last = &ds->d[i];
    if (!plain_key(key)) {
        *err = -2;
        return NULL;
    }
    for (i = 0; i < ds->n; i++) {
        int r = same_key(ds->d[i].key, key);
        if (r < 0) {
            *err = -1;
            return NULL;
        }
        if (r)
            return ds->last = &ds->d[i];
    }
    if (!add)
        return NULL;
    if (ds->n == ds->size) {
        Device *grown = PyMem_Malloc(2 * (size_t)ds->size * sizeof(Device));
        if (grown == NULL) {
            PyErr_NoMemory();
            *err = -1;
            return NULL;
        }
        memcpy(grown, ds->d, (size_t)ds->n * sizeof(Device));
        if (ds->d != ds->held)
            PyMem_Free(ds->d);
        ds->d = grown;
        ds->size *= 2;
    }
    d = &ds->d[ds->n++];
    memset(d, 0, sizeof *d);
    d->key = Py_NewRef(key);
    d->model = Py_NewRef(model);
    return ds->last = d;
}

static int field_index(PyObject *field) {
    int i;
    for (i = 0; i < NFIELD; i++)
        if (field == names[i])
            return i;
    for (i = 0; PyUnicode_CheckExact(field) && i < NFIELD; i++)
        if (PyUnicode_Compare(field, names[i]) == 0)
            return i;
    return -1;
}

/* A ratio field's value of a pod: the last one of each pod stands. */
static int put_pod(Device *d, int at, PyObject *pod, double v) {
    PyObject *x;
    int r;
    if (d->pods[at] == NULL) {
        if (d->pod[at] == NULL) {
            d->pod[at] = Py_NewRef(pod);
            d->pod_value[at] = v;
            return 0;
        }
        if (d->pod[at] == pod || (r = PyObject_RichCompareBool(d->pod[at], pod, Py_EQ)) == 1) {
            d->pod_value[at] = v;
            return 0;
        }
        if (r < 0 || (d->pods[at] = PyDict_New()) == NULL || (x = PyFloat_FromDouble(d->pod_value[at])) == NULL)
            return -1;
        r = PyDict_SetItem(d->pods[at], d->pod[at], x);
        Py_DECREF(x);
        Py_CLEAR(d->pod[at]);
        if (r < 0)
            return -1;
    }
    if ((x = PyFloat_FromDouble(v)) == NULL)
        return -1;
    r = PyDict_SetItem(d->pods[at], pod, x);
    Py_DECREF(x);
    return r;
}

int devices_put(Devices *ds, PyObject *key, PyObject *field, PyObject *model, PyObject *pod, PyObject *ratio,
                PyObject *value) {
    int at = field_index(field), is_ratio, err;
    double v;
    Device *d;
    if (at < 0 || !PyFloat_CheckExact(value))
        return -2;
    v = PyFloat_AS_DOUBLE(value);
    if (pod != Py_None && (is_ratio = PyObject_IsTrue(ratio)) != 0) {  /* as _walk: the pod's value first */
        if (is_ratio < 0)
            return -1;
        if (at >= NRATIO || !PyTuple_CheckExact(pod))
            return -2;
        if ((d = device_of(ds, key, model, 1, &err)) == NULL)
            return err;
        if (put_pod(d, at, pod, v) < 0)
            return -1;
    } else if ((d = device_of(ds, key, model, 1, &err)) == NULL) {
        return err;
    }
    if (d->has & (1u << at))
        return 0;  /* repeated */
    d->has |= 1u << at;
    d->value[at] = v;
    return 1;
}

/* key a before key b (domain/dcgm.py ``_device_order``: the UUID, then the GPU before its
 * instances, the instances by number)? -1 on error */
static int before(PyObject *a, PyObject *b) {
    PyObject *ia = PyTuple_GET_ITEM(a, 1), *ib = PyTuple_GET_ITEM(b, 1);
    int c = PyUnicode_Compare(PyTuple_GET_ITEM(a, 0), PyTuple_GET_ITEM(b, 0));
    if (c == -1 && PyErr_Occurred())
        return -1;
    if (c != 0)
        return c < 0;
    if (ia == Py_None || ib == Py_None)
        return ia == Py_None && ib != Py_None;
    return PyObject_RichCompareBool(ia, ib, Py_LT);
}

/* The per_pod field of a device's sample: () unless a ratio field has two pods' values, else
 * what domain/dcgm.py ``_per_pod`` makes of every ratio field's values. */
static PyObject *per_pod_of(const Device *d, PyObject *per_pod) {
    PyObject *by_field, *out;
    int i, two = 0;
    for (i = 0; i < NRATIO; i++)
        two |= d->pods[i] != NULL;
    if (!two)
        return Py_NewRef(no_args);
    if ((by_field = PyDict_New()) == NULL)
        return NULL;
    for (i = 0; i < NRATIO; i++) {
        PyObject *by_pod = d->pods[i] != NULL ? Py_NewRef(d->pods[i]) : NULL, *x;
        if (by_pod == NULL && d->pod[i] != NULL) {
            if ((x = PyFloat_FromDouble(d->pod_value[i])) == NULL)
                goto fail;
            by_pod = PyDict_New();
            if (by_pod == NULL || PyDict_SetItem(by_pod, d->pod[i], x) < 0) {
                Py_DECREF(x);
                Py_XDECREF(by_pod);
                goto fail;
            }
            Py_DECREF(x);
        }
        if (by_pod != NULL) {
            int r = PyDict_SetItem(by_field, names[i], by_pod);
            Py_DECREF(by_pod);
            if (r < 0)
                goto fail;
        }
    }
    out = PyObject_CallOneArg(per_pod, by_field);
    Py_DECREF(by_field);
    return out;
fail:
    Py_DECREF(by_field);
    return NULL;
}

static PyObject *optional(const Device *d, int at, double scale) {
    return d->has & (1u << at) ? PyFloat_FromDouble(d->value[at] / scale) : Py_NewRef(Py_None);
}

/* sm_active, else gr_active, else gpu_util_pct / 100, within [0, 1]; None without any */
static PyObject *ratio_of(const Device *d) {
    double r;
    if (d->has & 1u)
        r = d->value[0];
    else if (d->has & 2u)
        r = d->value[1];
    else if (d->has & 4u)
        r = d->value[2] / 100.0;
    else
        return Py_NewRef(Py_None);
    return PyFloat_FromDouble(r < 0.0 ? 0.0 : r > 1.0 ? 1.0 : r);  /* min(max(r, 0.0), 1.0) */
}

PyObject *device_sample(const Device *d, PyObject *per_pod_value, PyObject *cls) {
    PyObject *v[S_N];
    v[S_UUID] = Py_NewRef(PyTuple_GET_ITEM(d->key, 0));
    v[S_INSTANCE] = Py_NewRef(PyTuple_GET_ITEM(d->key, 1));
    v[S_RATIO] = ratio_of(d);
    v[S_FB] = d->has & 8u ? PyLong_FromDouble(d->value[3] * 1024 * 1024) : Py_NewRef(Py_None);
    v[S_POWER] = optional(d, 4, 1.0);
    v[S_ENERGY] = optional(d, 5, 1000.0);
    v[S_MODEL] = Py_NewRef(d->model);
    v[S_PER_POD] = per_pod_value;
    return sample_new(cls, v);
}

PyObject *devices_samples(Devices *ds, PyObject *per_pod, PyObject *cls) {
    PyObject *out;
    Py_ssize_t i, j;
    for (i = 1; i < ds->n; i++) {  /* in device order: a scrape lists a few devices, mostly in order */
        Device held = ds->d[i];
        for (j = i; j > 0; j--) {
            int r = before(held.key, ds->d[j - 1].key);
            if (r < 0) {
                ds->d[j] = held;
                return NULL;
            }
            if (!r)
                break;
            ds->d[j] = ds->d[j - 1];
        }
        ds->d[j] = held;
    }
    ds->last = NULL;
    if ((out = PyList_New(ds->n)) == NULL)
        return NULL;
    for (i = 0; i < ds->n; i++) {
        PyObject *s = device_sample(&ds->d[i], per_pod_of(&ds->d[i], per_pod), cls);
        if (s == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, s);
    }
    return out;
}
