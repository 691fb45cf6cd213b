/* The walk over a dcgm-exporter scrape's lines, in C: domain/dcgm_reference.py ``_walk`` does the same
 * in Python and is the reference (tests/unit/domain/test_dcgm_walk.py holds the two to the
 * same results and the same errors on real, generated and hostile scrapes). Only the line
 * loop is here: what a series means (its field, device, pod, health reading) comes from the
 * same caches and, for a series not in them, from the same Python functions, and a value
 * float() refuses is read by the same Python helpers, so every message stays theirs.
 *
 * setup(miss, value, lenient, unterminated, repeated, blank_reason, sentinel, fp64_blank,
 *       fp64_blank_end, int64_limit): the helpers and constants of domain/dcgm.py, once.
 * walk_text(text, cache, from_old, per_gpu, models, pod_values, health_out, skipped) -> (parsed,
 *       lines): domain/dcgm_reference.py ``_walk`` over text.splitlines(), without making the lines, and
 *       how many lines there were
 * walk_samples(text, cache, from_old, health_out, skipped, per_pod, cls[, template]) -> (samples,
 *       parsed, lines), or None: the same walk with the devices held in C (domain/_dcgm_devices.c),
 *       then their samples as ``samples`` builds them; None where a value is not what the
 *       devices hold (the caller walks again, into the dicts). ``template``: the node's last
 *       scrape, whose lines this one is met with (domain/_dcgm_template.c), or None
 * table_size() -> the series the walk finds by their bytes (domain/_dcgm_table.c) now
 * samples(keys, per_gpu, models, pod_values, per_pod, cls) -> the scrape's samples, as
 *       domain/dcgm_reference.py ``_samples`` builds them from what the walk gathered (or None); in
 *       domain/_dcgm_samples.c
 */
#include "_dcgm_walk.h"  /* Python.h first, as it must be */

#include <math.h>
#include <string.h>

static PyObject *miss, *unterminated, *repeated, *blank_reason;

static PyObject *setup(PyObject *self, PyObject *args) {
    PyObject *m, *v, *l, *u, *r, *b;
    double s, fb, fe, il;
    if (!PyArg_ParseTuple(args, "OOOOUUdddd", &m, &v, &l, &u, &r, &b, &s, &fb, &fe, &il))
        return NULL;
    Py_XSETREF(miss, Py_NewRef(m));
    Py_XSETREF(dcgm_value_of, Py_NewRef(v));
    Py_XSETREF(dcgm_lenient, Py_NewRef(l));
    Py_XSETREF(unterminated, Py_NewRef(u));
    Py_XSETREF(repeated, Py_NewRef(r));
    Py_XSETREF(blank_reason, Py_NewRef(b));
    dcgm_sentinel = s;
    dcgm_fp64_blank = fb;
    dcgm_fp64_blank_end = fe;
    dcgm_int64_limit = il;
    Py_RETURN_NONE;
}

static int count(PyObject *skipped, PyObject *reason) {
    PyObject *n = PyDict_GetItemWithError(skipped, reason), *m;
    long k = 0;
    int r;
    if (n == NULL && PyErr_Occurred())
        return -1;
    if (n != NULL) {
        k = PyLong_AsLong(n);
        if (k == -1 && PyErr_Occurred())
            return -1;
    }
    m = PyLong_FromLong(k + 1);
    if (m == NULL)
        return -1;
    r = PyDict_SetItem(skipped, reason, m);
    Py_DECREF(m);
    return r;
}

/* Where a walk puts what it reads: the dicts of domain/dcgm_reference.py ``_walk`` (``devs`` NULL), or the
 * devices in C (``devs``; per_gpu, models and pod_values unused), and the health readings and
 * the skip counts either way. */
typedef struct {
    PyObject *per_gpu, *models, *pod_values, *health_out, *skipped;
    Recent gpus, devices, pods;
    Devices *devs;
    Lines lines;  /* the node's last scrape, met line by line (domain/_dcgm_template.c) */
} Out;

/* One line, text[start:end] (made a str only for what the Python helpers are handed); returns 1
 * when it was parsed as an attribution value, 0 otherwise, -1 on error, -2 where the devices in
 * C cannot hold its value. */
static int walk_line(PyObject *text, Py_ssize_t start, Py_ssize_t n, int plain, PyObject *cache, PyObject *from_old,
                     Out *o) {
    Py_ssize_t brace, close, rest_from = start, series_end;
    uint64_t hash = 0;
    int labeled = 0, held = 0;
    PyObject *series = NULL, *rest = NULL, *info = NULL, *value = NULL, *line = NULL;
    PyObject *field, *key, *model, *reason, *pod, *low, *high, *implausible, *ratio, *health;
    int result = -1;
#define LINE() (line != NULL ? line : (line = PyUnicode_Substring(text, start, n)))
    if (n == start || PyUnicode_READ_CHAR(text, start) == '#')
        return 0;
    brace = find_char(text, plain, start, n, '{', 1);
    if (brace == -2)
        return -1;
    if (brace >= 0) {
        close = find_char(text, plain, start, n, '}', -1);
        if (close == -2)
            return -1;
        if (close < brace) {
            PyObject *r = LINE() == NULL ? NULL : PyObject_CallOneArg(unterminated, line);
            Py_XDECREF(r);
            Py_XDECREF(line);
            return -1;
        }
        series_end = rest_from = close + 1;
        brace -= start;
        labeled = 1;
    } else {
        Py_ssize_t space = find_char(text, plain, start, n, ' ', 1);
        if (space == -2)
            return -1;
        series_end = space < 0 ? n : space;
        rest_from = space < 0 ? n : space + 1;
        brace = series_end - start;
    }
    /* the value's text; made a str only for what the Python helpers are handed */
#define REST() (rest != NULL ? rest : (rest = PyUnicode_Substring(text, rest_from, n)))
    if (plain) {  /* the series' bytes are its text: met in the last scrape, or found in the table */
        const char *key = (const char *)PyUnicode_DATA(text) + start;
        info = lines_hint(&o->lines, key, series_end - start);
        if (info == NULL) {
            hash = series_hash(key, series_end - start);
            info = series_table_find(cache, key, series_end - start, hash);
        }
        Py_XINCREF(info);
        held = info != NULL;
    }
    if (info == NULL) {
        if (labeled) {
            series = PyUnicode_Substring(text, start, series_end);
        } else {  /* a series without labels is name{} */
            PyObject *name = PyUnicode_Substring(text, start, series_end);
            series = name == NULL ? NULL : PyUnicode_FromFormat("%U{}", name);
            Py_XDECREF(name);
        }
        if (series == NULL)
            goto done;
        info = PyDict_GetItemWithError(cache, series);
        if (info != NULL) {
            Py_INCREF(info);
        } else {
            if (PyErr_Occurred())
                goto done;
            info = PyObject_CallOneArg(from_old, series);
            if (info == NULL)
                goto done;
            if (info == Py_None) {
                PyObject *b = PyLong_FromSsize_t(brace);
                Py_DECREF(info);
                if (b == NULL)
                    goto done;
                info = REST() == NULL || LINE() == NULL ? NULL
                                                        : PyObject_CallFunctionObjArgs(miss, series, b, rest, line, NULL);
                Py_DECREF(b);
                if (info == NULL)
                    goto done;
            }
        }
        if (plain && PyTuple_CheckExact(info) && PyTuple_GET_SIZE(info) == 10) {
            held = PyDict_Contains(cache, series);  /* the table knows only what the generation holds */
            if (held < 0 || (held && series_table_put(cache, (const char *)PyUnicode_DATA(text) + start,
                                                      series_end - start, hash, info) < 0))
                goto done;
        }
    }
    if (!PyTuple_CheckExact(info) || PyTuple_GET_SIZE(info) != 10) {
        PyErr_SetString(PyExc_TypeError, "a series' info is a tuple of 10");
        goto done;
    }
    if (plain && held)  /* what the next scrape of the node meets on this line */
        lines_keep(&o->lines, start, series_end - start, info);
    field = PyTuple_GET_ITEM(info, 0);
    key = PyTuple_GET_ITEM(info, 1);
    model = PyTuple_GET_ITEM(info, 2);
    reason = PyTuple_GET_ITEM(info, 3);
    pod = PyTuple_GET_ITEM(info, 4);
    low = PyTuple_GET_ITEM(info, 5);
    high = PyTuple_GET_ITEM(info, 6);
    implausible = PyTuple_GET_ITEM(info, 7);
    ratio = PyTuple_GET_ITEM(info, 8);
    health = PyTuple_GET_ITEM(info, 9);
    if (field != Py_None || health != Py_None)
        value = plain_float(text, rest_from, n);  /* None is never float()'s answer: the helpers are asked below */
    if (field != Py_None && value == NULL) {
        if (REST() == NULL || LINE() == NULL)
            goto done;
        value = read_value(rest, line, dcgm_value_of);
        if (value == NULL)
            goto done;
    }
    if (health != Py_None) {
        if (value == NULL && REST() == NULL)
            goto done;
        if (health_reading(health, value, rest, o->health_out, &o->devices) < 0)
            goto done;
    }
    if (field != Py_None && PyUnicode_GET_LENGTH(reason) == 0) {
        double v = PyFloat_AsDouble(value), lo, hi;
        if (v == -1.0 && PyErr_Occurred())
            goto done;
        lo = PyFloat_AsDouble(low);
        hi = PyFloat_AsDouble(high);
        if (PyErr_Occurred())
            goto done;
        if (v != v || fabs(v) >= dcgm_sentinel || (dcgm_fp64_blank <= v && v < dcgm_fp64_blank_end)) {
            reason = blank_reason;
        } else if (!(lo <= v && v < hi)) {
            reason = implausible;
        } else if (o->devs != NULL) {
            int r = devices_put(o->devs, key, field, model, pod, ratio, value);
            if (r != 0) {  /* new, an error, or not for the devices */
                result = r;
                goto done;
            }
            reason = repeated;
        } else {
            PyObject *fields;
            Py_ssize_t held;
            int r;
            if (pod != Py_None && PyObject_IsTrue(ratio)) {
                PyObject *by_field, *by_pod;
                if ((by_field = recent_find(&o->pods, key)) == NULL) {
                    if ((by_field = inner_dict(o->pod_values, key)) == NULL)
                        goto done;
                    recent_keep(&o->pods, key, by_field);
                }
                if ((by_pod = inner_dict(by_field, field)) == NULL || PyDict_SetItem(by_pod, pod, value) < 0)
                    goto done;
            }
            if ((fields = recent_find(&o->gpus, key)) == NULL) {
                fields = PyDict_GetItemWithError(o->per_gpu, key);
                if (fields == NULL) {
                    if (PyErr_Occurred())
                        goto done;
                    fields = PyDict_New();
                    if (fields == NULL)
                        goto done;
                    r = PyDict_SetItem(o->per_gpu, key, fields);
                    Py_DECREF(fields);
                    if (r < 0 || PyDict_SetItem(o->models, key, model) < 0)
                        goto done;
                }
                recent_keep(&o->gpus, key, fields);
            }
            held = PyDict_GET_SIZE(fields);  /* fields.setdefault(field, value): new if the dict grew */
            if (PyDict_SetDefault(fields, field, value) == NULL)
                goto done;
            if (PyDict_GET_SIZE(fields) > held) {
                result = 1;
                goto done;
            }
            reason = repeated;  /* time-slicing: the exporter repeats a GPU's series per sharing pod */
        }
    }
    result = count(o->skipped, reason) < 0 ? -1 : 0;
done:
    Py_XDECREF(series);
    Py_XDECREF(rest);
    Py_XDECREF(info);
    Py_XDECREF(value);
    Py_XDECREF(line);
    return result;
#undef LINE
}

/* The walk over a scrape's text: the lines str.splitlines() gives, without making them (~45 str a
 * sample). ASCII text without \r, \v, \f or \x1c-\x1e (a scrape as exporters write it) splits
 * at \n alone, found with memchr; any other text by Py_UNICODE_ISLINEBREAK, as splitlines.
 * 0, -1 on error, -2 where the devices in C cannot hold a value (the walk stops there). */
static int walk(PyObject *text, PyObject *cache, PyObject *from_old, Out *o, Py_ssize_t *parsed, Py_ssize_t *lines) {
    Py_ssize_t len = PyUnicode_GET_LENGTH(text), i = 0;
    int kind = PyUnicode_KIND(text), plain;
    const void *data = PyUnicode_DATA(text);
    if (miss == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_dcgm_walk.setup() was not called");
        return -1;
    }
    /* strcspn stops at a NUL too: a text with one takes the general loop */
    plain = PyUnicode_IS_ASCII(text) && (Py_ssize_t)strcspn((const char *)data, "\r\v\f\x1c\x1d\x1e") == len;
    *parsed = *lines = 0;
    while (i < len) {
        Py_ssize_t end;
        int r;
        if (plain) {
            const char *nl = memchr((const char *)data + i, '\n', (size_t)(len - i));
            end = nl == NULL ? len : nl - (const char *)data;
        } else {
            for (end = i; end < len && !Py_UNICODE_ISLINEBREAK(PyUnicode_READ(kind, data, end)); end++)
                ;
        }
        if (lines_next(&o->lines) < 0)
            return -1;
        r = walk_line(text, i, end, plain, cache, from_old, o);
        if (r < 0)
            return r;
        *parsed += r;
        ++*lines;
        i = end + 1;
        if (!plain && end + 1 < len && PyUnicode_READ(kind, data, end) == '\r'
                && PyUnicode_READ(kind, data, end + 1) == '\n')
            i++;
    }
    return 0;
}

static PyObject *walk_text(PyObject *self, PyObject *args) {
    PyObject *text, *cache, *from_old;
    Py_ssize_t parsed, lines;
    Out o = {.devs = NULL};
    if (!PyArg_ParseTuple(args, "UO!OO!O!O!O!O!", &text, &PyDict_Type, &cache, &from_old, &PyDict_Type, &o.per_gpu,
                          &PyDict_Type, &o.models, &PyDict_Type, &o.pod_values, &PyDict_Type, &o.health_out,
                          &PyDict_Type, &o.skipped))
        return NULL;
    if (walk(text, cache, from_old, &o, &parsed, &lines) < 0)
        return NULL;
    return Py_BuildValue("(nn)", parsed, lines);
}

/* The walk with the devices in C, then their samples: (samples, parsed, lines), or None where
 * the devices could not hold a value (the walk stopped there: the caller walks again into
 * dicts, from health_out and skipped emptied). */
static PyObject *walk_samples(PyObject *self, PyObject *args) {
    PyObject *text, *cache, *from_old, *per_pod, *cls, *samples, *template = Py_None, *out = NULL;
    Py_ssize_t parsed, lines;
    Devices devs;
    Out o = {.devs = &devs};
    int r;
    if (!PyArg_ParseTuple(args, "UO!OO!O!OO!|O", &text, &PyDict_Type, &cache, &from_old, &PyDict_Type, &o.health_out,
                          &PyDict_Type, &o.skipped, &per_pod, &PyType_Type, &cls, &template))
        return NULL;
    if (template != Py_None && !PyObject_TypeCheck(template, &TemplateType)) {
        PyErr_SetString(PyExc_TypeError, "walk_samples(): template must be a Template or None");
        return NULL;
    }
    DEVICES_INIT(devs);
    lines_start(&o.lines, template == Py_None ? NULL : template, text, cache);
    r = walk(text, cache, from_old, &o, &parsed, &lines);
    if (r == -2) {
        out = Py_NewRef(Py_None);
    } else if (r == 0 && (samples = devices_samples(&devs, per_pod, cls)) != NULL) {
        out = Py_BuildValue("(Nnn)", samples, parsed, lines);
    }
    lines_end(&o.lines, text, cache, r == 0 && out != NULL);
    devices_clear(&devs);
    return out;
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS, "setup(miss, value, lenient, unterminated, repeated, blank_reason, sentinel, "
                                   "fp64_blank, fp64_blank_end, int64_limit)"},
    {"samples", dcgm_samples, METH_VARARGS, "samples(keys, per_gpu, models, pod_values, per_pod, cls) -> [DeviceSample] "
                                       "or None: see domain/_dcgm_samples.c"},
    {"walk_text", walk_text, METH_VARARGS, "walk_text(text, cache, from_old, per_gpu, models, pod_values, health_out, "
     "skipped) -> (parsed, lines): walk over text.splitlines()"},
    {"walk_samples", walk_samples, METH_VARARGS, "walk_samples(text, cache, from_old, health_out, skipped, per_pod, "
     "cls[, template]) -> (samples, parsed, lines), or None: the walk with the devices in C, then their samples"},
    {"table_size", dcgm_table_size, METH_NOARGS, "table_size() -> the series the walk finds by their bytes now"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_dcgm_walk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__dcgm_walk(void) {
    PyObject *m;
    if (dcgm_samples_init() < 0 || PyType_Ready(&TemplateType) < 0 || (m = PyModule_Create(&module)) == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Template", (PyObject *)&TemplateType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
