/* What a line's value reads, and a health series' reading of it: the fourth part of the
 * _dcgm_walk module (domain/_dcgm_walk.c: the walk, and the module, whose setup sets the
 * helpers and constants below from domain/dcgm.py). */
#include "_dcgm_walk.h"  /* Python.h first, as it must be */

#include <math.h>

PyObject *dcgm_value_of, *dcgm_lenient;
double dcgm_sentinel, dcgm_fp64_blank, dcgm_fp64_blank_end, dcgm_int64_limit;

/* float(rest), or what the Python helper ``fallback`` makes of it when float() refuses it
 * (``value`` raises ValueError naming the line; ``lenient`` returns None). New reference. */
PyObject *read_value(PyObject *rest, PyObject *line, PyObject *fallback) {
    PyObject *v = PyFloat_FromString(rest);
    if (v != NULL || !PyErr_ExceptionMatches(PyExc_ValueError))
        return v;
    PyErr_Clear();
    return fallback == dcgm_value_of ? PyObject_CallFunctionObjArgs(dcgm_value_of, rest, line, NULL)
                                     : PyObject_CallFunctionObjArgs(dcgm_lenient, rest, NULL);
}

/* The health reading of a line (domain/dcgm.py: a health series never fails the scrape). */
int health_reading(PyObject *health, PyObject *value, PyObject *rest, PyObject *health_out, Recent *devices) {
    PyObject *hv = value, *hfield, *scale, *integer, *device, *fields, *put;
    double h, scaled;
    int is_int, r;
    if (hv == NULL) {
        hv = read_value(rest, NULL, dcgm_lenient);
        if (hv == NULL)
            return -1;
    } else {
        Py_INCREF(hv);
    }
    if (hv == Py_None) {
        Py_DECREF(hv);
        return 0;
    }
    h = PyFloat_AsDouble(hv);
    Py_DECREF(hv);
    if (h == -1.0 && PyErr_Occurred())
        return -1;
    if (!(h >= 0 && h < dcgm_sentinel && !(dcgm_fp64_blank <= h && h < dcgm_fp64_blank_end)))
        return 0;
    hfield = PyTuple_GET_ITEM(health, 0);
    scale = PyTuple_GET_ITEM(health, 1);
    integer = PyTuple_GET_ITEM(health, 2);
    device = PyTuple_GET_ITEM(health, 3);
    scaled = h * PyFloat_AsDouble(scale);  /* hvalue * scale: an int scale is converted as Python converts it */
    if (scaled == -1.0 && PyErr_Occurred())
        return -1;
    is_int = PyObject_IsTrue(integer);
    if (is_int < 0)
        return -1;
    if (!isfinite(scaled) || (is_int && scaled >= dcgm_int64_limit))
        return 0;
    if ((fields = recent_find(devices, device)) == NULL) {
        if ((fields = inner_dict(health_out, device)) == NULL)
            return -1;
        recent_keep(devices, device, fields);
    }
    r = PyDict_Contains(fields, hfield);
    if (r != 0)
        return r < 0 ? -1 : 0;
    /* int(round(scaled)): round half to even, as nearbyint under the default rounding mode */
    put = is_int ? PyLong_FromDouble(nearbyint(scaled)) : PyFloat_FromDouble(scaled);
    if (put == NULL)
        return -1;
    r = PyDict_SetItem(fields, hfield, put);
    Py_DECREF(put);
    return r;
}
