/* The scrape's samples in C, the second half of the _dcgm_walk module (domain/_dcgm_walk.c:
 * the walk, and the module): ``samples(keys, per_gpu, models, pod_values, per_pod, cls)``. */
#include "_dcgm_walk.h"  /* Python.h first, as it must be */
#include "_fields.h"

/* the names of domain/_dcgm_walk.h, shared with domain/_dcgm_devices.c */
PyObject *dcgm_field[NFIELD], *sample_key[S_N], *dcgm_no_args;
static PyObject *k_dict;
#define k_sm dcgm_field[0]
#define k_gr dcgm_field[1]
#define k_util dcgm_field[2]
#define k_fb dcgm_field[3]
#define k_power dcgm_field[4]
#define k_energy dcgm_field[5]
#define no_args dcgm_no_args

/* DeviceSample's fields, in its dataclass's order: where its class keeps them in slots, a
 * sample is built by setting its slots (no dict built and adopted) */
static Fields sample_fields = FIELDS(&sample_key[S_UUID], &sample_key[S_INSTANCE], &sample_key[S_RATIO],
                                     &sample_key[S_FB], &sample_key[S_POWER], &sample_key[S_ENERGY],
                                     &sample_key[S_MODEL], &sample_key[S_PER_POD]);

PyObject *sample_new(PyObject *cls, PyObject **v) {
    PyObject *sample = NULL, *dict = NULL;
    int i;
    for (i = 0; i < S_N; i++)
        if (v[i] == NULL)
            goto done;  /* (its maker's error) */
    if ((sample = PyBaseObject_Type.tp_new((PyTypeObject *)cls, dcgm_no_args, NULL)) == NULL)
        goto done;  /* (cls: a class, as both callers' argument parsing checks) */
    if (fields_mode(&sample_fields, (PyTypeObject *)cls) == FIELDS_SLOTS) {
        for (i = 0; i < S_N; i++) {
            PyObject **at = (PyObject **)((char *)sample + sample_fields.offset[i]);
            Py_XSETREF(*at, v[i]);
            v[i] = NULL;
        }
        goto done;
    }
    if ((dict = _PyDict_NewPresized(S_N)) == NULL) {  /* its __dict__, adopted (as ``built``) */
        Py_CLEAR(sample);
        goto done;
    }
    for (i = 0; i < S_N; i++) {
        if (PyDict_SetItem(dict, sample_key[i], v[i]) < 0) {
            Py_CLEAR(sample);
            goto done;
        }
    }
    if (PyObject_GenericSetAttr(sample, k_dict, dict) < 0)
        Py_CLEAR(sample);
done:
    Py_XDECREF(dict);
    for (i = 0; i < S_N; i++)
        Py_XDECREF(v[i]);
    return sample;
}

/* The scrape's samples from what the walk gathered (domain/dcgm_reference.py ``_samples`` is the
 * reference): one DeviceSample per device key, in the order of ``keys``, each a device of its
 * fields' values built as the devices in C build theirs (domain/_dcgm_devices.c
 * ``device_sample``). NULL with no error set where a value is not a float (then the reference
 * builds them). */
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
    Device d = {.key = key, .model = model};  /* (borrowed: device_sample takes what it keeps) */
    PyObject *pp = NULL;
    int i, r;
    if (!PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != 2 || !PyDict_CheckExact(fields)) {
        *not_float = 1;
        return NULL;
    }
    for (i = 0; i < NFIELD; i++) {
        if ((r = field_value(fields, dcgm_field[i], &d.value[i])) < 0) {
            *not_float = r == -2;
            return NULL;
        }
        d.has |= (unsigned)r << i;
    }
    if (pods != NULL) {  /* per-pod evidence needs two pods of one field: else () without asking */
        Py_ssize_t pos = 0;
        PyObject *field, *by_pod;
        int two = 0;
        while (PyDict_Next(pods, &pos, &field, &by_pod))
            if (!PyDict_CheckExact(by_pod) || PyDict_GET_SIZE(by_pod) >= 2)
                two = 1;
        if (two && (pp = PyObject_CallOneArg(per_pod, pods)) == NULL)
            return NULL;
    }
    return device_sample(&d, pp != NULL ? pp : Py_NewRef(no_args), cls);
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
    static const char *fields[NFIELD] = {"sm_active", "gr_active", "gpu_util_pct", "fb_used_mib", "power_w",
                                         "energy_mj"};
    static const char *keys[S_N] = {"gpu_uuid", "gpu_instance_id", "sm_active_ratio", "fb_used_bytes", "power_w",
                                    "energy_j", "model", "per_pod"};
    int i;
    for (i = 0; i < NFIELD; i++)
        INTERN(dcgm_field[i], fields[i])
    for (i = 0; i < S_N; i++)
        INTERN(sample_key[i], keys[i])
    INTERN(k_dict, "__dict__")
    return (dcgm_no_args = PyTuple_New(0)) == NULL ? -1 : 0;
}
