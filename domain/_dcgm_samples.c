/* The scrape's samples in C, the second half of the _dcgm_walk module (domain/_dcgm_walk.c:
 * the walk, and the module): ``samples(keys, per_gpu, models, pod_values, per_pod, cls)``. */
#include "_dcgm_walk.h"  /* Python.h first, as it must be */

/* The scrape's samples from what the walk gathered (domain/dcgm.py ``_samples`` is the
 * reference): one DeviceSample per device key, in the order of ``keys``, built as
 * domain/facts.py ``built`` builds it (object.__new__, then its __dict__). NULL with no error
 * set where a value is not a float (then the reference builds them). */
static PyObject *k_sm, *k_gr, *k_util, *k_fb, *k_power, *k_energy, *k_dict, *no_args;
static PyObject *f_uuid, *f_instance, *f_ratio, *f_fb, *f_power, *f_energy, *f_model, *f_per_pod;

static int field_value(PyObject *fields, PyObject *name, double *out) {
    PyObject *v = PyDict_GetItemWithError(fields, name);
    if (v == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!PyFloat_CheckExact(v))
        return -2;
    *out = PyFloat_AS_DOUBLE(v);
    return 1;
}

static PyObject *one_sample(PyObject *key, PyObject *fields, PyObject *model, PyObject *pods, PyObject *per_pod,
                            PyObject *cls, int *not_float) {
    PyObject *d = NULL, *v, *sample = NULL, *pp = NULL;
    double ratio = 0, x;
    int has_ratio = 0, r;
    if (!PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != 2 || !PyDict_CheckExact(fields)) {
        *not_float = 1;
        return NULL;
    }
    if ((r = field_value(fields, k_sm, &ratio)) == 0)
        r = field_value(fields, k_gr, &ratio);
    if (r == 0 && (r = field_value(fields, k_util, &ratio)) == 1)
        ratio = ratio / 100.0;
    if (r < 0)
        goto fail;
    has_ratio = r == 1;
    d = _PyDict_NewPresized(8);  /* the sample's 8 fields, without a resize on the way */
    if (d == NULL || PyDict_SetItem(d, f_uuid, PyTuple_GET_ITEM(key, 0)) < 0 ||
        PyDict_SetItem(d, f_instance, PyTuple_GET_ITEM(key, 1)) < 0)
        goto fail;
    if (has_ratio) {  /* min(max(ratio, 0.0), 1.0) */
        if (ratio < 0.0)
            ratio = 0.0;
        else if (ratio > 1.0)
            ratio = 1.0;
        v = PyFloat_FromDouble(ratio);
    } else {
        v = Py_NewRef(Py_None);
    }
    if (v == NULL || PyDict_SetItem(d, f_ratio, v) < 0) {
        Py_XDECREF(v);
        goto fail;
    }
    Py_DECREF(v);
    if ((r = field_value(fields, k_fb, &x)) < 0)
        goto fail;
    v = r ? PyLong_FromDouble(x * 1024 * 1024) : Py_NewRef(Py_None);  /* int(mib * 1024 * 1024) */
    if (v == NULL || PyDict_SetItem(d, f_fb, v) < 0) {
        Py_XDECREF(v);
        goto fail;
    }
    Py_DECREF(v);
    if ((r = field_value(fields, k_power, &x)) < 0)
        goto fail;
    v = r ? PyDict_GetItemWithError(fields, k_power) : Py_None;  /* the value itself, as f.get() gives it */
    if (v == NULL || PyDict_SetItem(d, f_power, v) < 0)
        goto fail;
    if ((r = field_value(fields, k_energy, &x)) < 0)
        goto fail;
    v = r ? PyFloat_FromDouble(x / 1000.0) : Py_NewRef(Py_None);
    if (v == NULL || PyDict_SetItem(d, f_energy, v) < 0) {
        Py_XDECREF(v);
        goto fail;
    }
    Py_DECREF(v);
    if (PyDict_SetItem(d, f_model, model) < 0)
        goto fail;
    if (pods != NULL) {  /* per-pod evidence needs two pods of one field: else () without asking */
        Py_ssize_t pos = 0;
        PyObject *field, *by_pod;
        int two = 0;
        while (PyDict_Next(pods, &pos, &field, &by_pod))
            if (!PyDict_CheckExact(by_pod) || PyDict_GET_SIZE(by_pod) >= 2)
                two = 1;
        if (two)
            pp = PyObject_CallOneArg(per_pod, pods);
    }
    if (pp == NULL && PyErr_Occurred())
        goto fail;
    r = PyDict_SetItem(d, f_per_pod, pp != NULL ? pp : no_args);
    Py_XDECREF(pp);
    if (r < 0)
        goto fail;
    sample = PyBaseObject_Type.tp_new((PyTypeObject *)cls, no_args, NULL);
    if (sample == NULL || PyObject_GenericSetAttr(sample, k_dict, d) < 0) {
        Py_XDECREF(sample);
        sample = NULL;
    }
    Py_DECREF(d);
    return sample;
fail:
    if (r == -2)
        *not_float = 1;
    Py_XDECREF(d);
    return NULL;
}

PyObject *dcgm_samples(PyObject *self, PyObject *args) {
    PyObject *keys, *per_gpu, *models, *pod_values, *per_pod, *cls, *out;
    Py_ssize_t i;
    int not_float = 0;
    if (!PyArg_ParseTuple(args, "O!O!O!O!OO!", &PyList_Type, &keys, &PyDict_Type, &per_gpu, &PyDict_Type, &models,
                          &PyDict_Type, &pod_values, &per_pod, &PyType_Type, &cls))
        return NULL;
    out = PyList_New(PyList_GET_SIZE(keys));
    if (out == NULL)
        return NULL;
    for (i = 0; i < PyList_GET_SIZE(keys); i++) {
        PyObject *key = PyList_GET_ITEM(keys, i), *fields, *model, *pods, *sample;
        if ((fields = PyDict_GetItemWithError(per_gpu, key)) == NULL ||
            (model = PyDict_GetItemWithError(models, key)) == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetObject(PyExc_KeyError, key);
            goto fail;
        }
        pods = PyDict_GetItemWithError(pod_values, key);
        if (pods == NULL && PyErr_Occurred())
            goto fail;
        sample = one_sample(key, fields, model, pods, per_pod, cls, &not_float);
        if (sample == NULL)
            goto fail;
        PyList_SET_ITEM(out, i, sample);
    }
    return out;
fail:
    Py_DECREF(out);
    if (not_float) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return NULL;
}

#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) \
        return -1;

int dcgm_samples_init(void) {
    INTERN(k_sm, "sm_active")
    INTERN(k_gr, "gr_active")
    INTERN(k_util, "gpu_util_pct")
    INTERN(k_fb, "fb_used_mib")
    INTERN(k_power, "power_w")
    INTERN(k_energy, "energy_mj")
    INTERN(k_dict, "__dict__")
    INTERN(f_uuid, "gpu_uuid")
    INTERN(f_instance, "gpu_instance_id")
    INTERN(f_ratio, "sm_active_ratio")
    INTERN(f_fb, "fb_used_bytes")
    INTERN(f_power, "power_w")
    INTERN(f_energy, "energy_j")
    INTERN(f_model, "model")
    INTERN(f_per_pod, "per_pod")
    return (no_args = PyTuple_New(0)) == NULL ? -1 : 0;
}
