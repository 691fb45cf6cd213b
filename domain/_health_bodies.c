/* A scrape's health facts as a worker writes them: the half of the _health module beside
 * domain/_health.c (health_rows, the module).
 *
 * health_bodies(health, cluster_id, node, observed_at_ms, pos, quiet) -> (items, loud) or None
 *
 * The same facts as a worker writes them (streams/fact_batches.py ``encode_fact_bodies``): items
 * holds each device's Avro body, by the writer handed to set_body_writer (its capsule
 * ``body_of``), or its fact where the writer is not sure of a value (the writers then name
 * it); loud holds the facts of the devices whose health fold must see them. A device is quiet,
 * and its fact changes nothing in domain/gpu_incidents.py ``HealthFold.observe``, when none of
 * its clock-event bits in QUIET_MASK is set and ``quiet`` (the fold's ``_quiet``) holds for
 * (uuid, instance) the inputs it would fold: its QUIET_INPUTS fields (None where absent) and
 * those bits (None without the field). Each fact is what health_rows builds of the scrape's
 * row (``pos`` a SourcePos: topic, partition, offset). None where no writer is set, or where a
 * device's fields are not all the schema's: the caller builds the facts. */
#include "_health.h"  /* Python.h first, as it must be */

/* streams/_avro_c's writer of a body from values in the schema's order (its capsule) */
#define BODY_API "gpuledger.streams._avro_c.body_of"
#define MAXFIELDS 64
typedef PyObject *(*BodyOf)(const char *program, Py_ssize_t program_len, PyObject *const *values, Py_ssize_t n);
static BodyOf body_of;
static PyObject *body_program, *body_names, *name_index;  /* bytes, tuple of str, dict str -> position */
static Py_ssize_t at_fact_id, at_device[5], at_scrape[6];  /* cluster, node, time, topic, partition, offset */
static const char *const scrape_names[6] = {"cluster_id", "node", "observed_at_ms", "src_topic", "src_partition",
                                            "src_offset"};
static PyObject *a_topic, *a_partition, *a_offset;
/* HealthFold's inputs (domain/gpu_incidents.py), set by set_quiet: field names, clock-event mask */
static PyObject *quiet_inputs, *k_reasons;
static long long quiet_mask;

/* 1 when the fold would fold this device's fact, 0 when it would leave it (quiet), -1 on error. */
static int is_loud(PyObject *device, PyObject *fields, PyObject *quiet) {
    PyObject *key, *held, *reasons, *bits;
    Py_ssize_t i, n = PyTuple_GET_SIZE(quiet_inputs);
    int same = 1;
    long long r;
    reasons = PyDict_GetItemWithError(fields, k_reasons);
    if (reasons == NULL && PyErr_Occurred())
        return -1;
    if (reasons != NULL && reasons != Py_None) {
        if (!PyLong_CheckExact(reasons))
            return 1;  /* the fold reads it as it is */
        r = PyLong_AsLongLong(reasons);
        if (r == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 1;
        }
        if (r & quiet_mask)
            return 1;  /* a throttle episode depends on time: always folded */
    }
    if ((key = PyTuple_Pack(2, PyTuple_GET_ITEM(device, 0), PyTuple_GET_ITEM(device, 1))) == NULL)
        return -1;
    held = PyDict_GetItemWithError(quiet, key);
    Py_DECREF(key);
    if (held == NULL)
        return PyErr_Occurred() ? -1 : 1;
    if (!PyTuple_CheckExact(held) || PyTuple_GET_SIZE(held) != n + 1)
        return 1;
    for (i = 0; i < n && same; i++) {
        PyObject *v = PyDict_GetItemWithError(fields, PyTuple_GET_ITEM(quiet_inputs, i));
        if (v == NULL) {
            if (PyErr_Occurred())
                return -1;
            v = Py_None;
        }
        if ((same = PyObject_RichCompareBool(PyTuple_GET_ITEM(held, i), v, Py_EQ)) < 0)
            return -1;
    }
    if (!same)
        return 1;
    if ((bits = reasons == NULL || reasons == Py_None ? Py_NewRef(Py_None) : PyLong_FromLong(0)) == NULL)
        return -1;
    same = PyObject_RichCompareBool(PyTuple_GET_ITEM(held, n), bits, Py_EQ);
    Py_DECREF(bits);
    return same < 0 ? -1 : !same;
}

/* A device's values in the schema's order into vals (new references): the scrape's, its
 * device's and its fields, None for the rest. 1, 0 where its fields are not all the schema's,
 * -1 on error. */
static int values_of(PyObject *device, PyObject *fields, PyObject *const *scrape, Py_ssize_t n, PyObject **vals) {
    PyObject *parts[5], *k, *v;
    Py_ssize_t i, pos = 0;
    for (i = 0; i < n; i++)
        vals[i] = Py_NewRef(Py_None);
    for (i = 0; i < 6; i++)
        Py_SETREF(vals[at_scrape[i]], Py_NewRef(scrape[i]));
    parts[0] = s_health, parts[1] = scrape[0], parts[2] = PyTuple_GET_ITEM(device, 0);
    parts[3] = PyTuple_GET_ITEM(device, 1), parts[4] = scrape[2];
    Py_SETREF(vals[at_fact_id], PyObject_Vectorcall(fact_id, parts, 5, NULL));
    if (vals[at_fact_id] == NULL)
        return -1;
    for (i = 0; i < 5; i++)
        Py_SETREF(vals[at_device[i]], Py_NewRef(PyTuple_GET_ITEM(device, i)));
    while (PyDict_Next(fields, &pos, &k, &v)) {
        PyObject *at = PyDict_GetItemWithError(name_index, k);
        if (at == NULL)
            return PyErr_Occurred() ? -1 : 0;
        i = PyLong_AsSsize_t(at);
        Py_SETREF(vals[i], Py_NewRef(v));
    }
    return 1;
}

/* The fact of a device's values (as health_rows builds it: the fields in the schema's order,
 * which set_body_writer found to be the fact's). */
static PyObject *fact_of(PyObject *const *vals, Py_ssize_t n) {
    PyObject *d = _PyDict_NewPresized(n), *f = NULL;
    Py_ssize_t i;
    if (d == NULL)
        return NULL;
    for (i = 0; i < n; i++)
        if (PyDict_SetItem(d, PyTuple_GET_ITEM(body_names, i), vals[i]) < 0)
            goto done;
    f = fact_from(d);
done:
    Py_DECREF(d);
    return f;
}

PyObject *health_bodies(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *health, *pos, *quiet, *order = NULL, *all_fields = NULL, *items = NULL, *loud = NULL, *result = NULL;
    PyObject *scrape[6] = {NULL}, *vals[MAXFIELDS];
    Py_ssize_t i, j, n, nf;
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "health_bodies(health, cluster_id, node, observed_at_ms, pos, quiet)");
        return NULL;
    }
    health = args[0], pos = args[4], quiet = args[5];
    if (body_of == NULL || quiet_inputs == NULL || reference == NULL || !PyDict_CheckExact(health) ||
        !PyDict_CheckExact(quiet))
        Py_RETURN_NONE;
    nf = PyTuple_GET_SIZE(body_names);
    scrape[0] = Py_NewRef(args[1]), scrape[1] = Py_NewRef(args[2]), scrape[2] = Py_NewRef(args[3]);
    if ((scrape[3] = PyObject_GetAttr(pos, a_topic)) == NULL || (scrape[4] = PyObject_GetAttr(pos, a_partition)) == NULL
        || (scrape[5] = PyObject_GetAttr(pos, a_offset)) == NULL)
        goto done;
    if ((order = in_order(health, &all_fields)) == NULL)
        goto done;
    if (order == Py_None) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    n = PyList_GET_SIZE(order);
    if ((items = PyList_New(n)) == NULL || (loud = PyList_New(0)) == NULL)
        goto done;
    for (i = 0; i < n; i++) {
        PyObject *device = PyList_GET_ITEM(order, i), *fields = PyList_GET_ITEM(all_fields, i), *item = NULL, *f = NULL;
        int r, noisy = 0;
        r = values_of(device, fields, scrape, nf, vals);
        if (r > 0 && (item = body_of(PyBytes_AS_STRING(body_program), PyBytes_GET_SIZE(body_program), vals, nf)) != NULL
            && (noisy = is_loud(device, fields, quiet)) >= 0 && (item == Py_None || noisy))
            f = fact_of(vals, nf);  /* the fact: for the fold, or where the writer is not sure of a value */
        for (j = 0; j < nf; j++)
            Py_XDECREF(vals[j]);
        if (r == 0) {  /* a field the schema does not have: the facts are the caller's to build */
            result = Py_NewRef(Py_None);
            goto done;
        }
        if (r < 0 || item == NULL || noisy < 0 || ((item == Py_None || noisy) && f == NULL) ||
            (noisy && PyList_Append(loud, f) < 0)) {
            Py_XDECREF(item);
            Py_XDECREF(f);
            goto done;
        }
        if (item == Py_None)
            Py_SETREF(item, f);
        else
            Py_XDECREF(f);
        PyList_SET_ITEM(items, i, item);
    }
    result = PyTuple_Pack(2, items, loud);
done:
    for (j = 0; j < 6; j++)
        Py_XDECREF(scrape[j]);
    Py_XDECREF(order);
    Py_XDECREF(all_fields);
    Py_XDECREF(items);
    Py_XDECREF(loud);
    return result;
}

PyObject *set_body_writer(PyObject *self, PyObject *args) {
    PyObject *capsule, *program, *names, *fact_fields, *index;
    Py_ssize_t i, n;
    int same;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO!O!O!", &capsule, &PyBytes_Type, &program, &PyTuple_Type, &names, &PyTuple_Type,
                          &fact_fields))
        return NULL;
    n = PyTuple_GET_SIZE(names);
    if (n > MAXFIELDS || PyBytes_GET_SIZE(program) != 2 * n)
        Py_RETURN_FALSE;
    if ((same = PyObject_RichCompareBool(names, fact_fields, Py_EQ)) <= 0)  /* the fact's fields, in its order */
        return same < 0 ? NULL : Py_NewRef(Py_False);
    if ((index = PyDict_New()) == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        PyObject *at = PyLong_FromSsize_t(i);
        if (at == NULL || !PyUnicode_CheckExact(PyTuple_GET_ITEM(names, i)) ||
            PyDict_SetItem(index, PyTuple_GET_ITEM(names, i), at) < 0) {
            Py_XDECREF(at);
            Py_DECREF(index);
            if (PyErr_Occurred())
                return NULL;
            Py_RETURN_FALSE;
        }
        Py_DECREF(at);
    }
    if (PyDict_GET_SIZE(index) != n)
        goto other;  /* a name twice */
    {
        PyObject *at = PyDict_GetItemWithError(index, k_fact_id);
        if (at == NULL)
            goto other;
        at_fact_id = PyLong_AsSsize_t(at);
        for (i = 0; i < 5; i++) {
            if ((at = PyDict_GetItemWithError(index, k_names[i])) == NULL)
                goto other;
            at_device[i] = PyLong_AsSsize_t(at);
        }
        for (i = 0; i < 6; i++) {
            if ((at = PyDict_GetItemString(index, scrape_names[i])) == NULL)
                goto other;
            at_scrape[i] = PyLong_AsSsize_t(at);
        }
    }
    if ((body_of = (BodyOf)PyCapsule_GetPointer(capsule, BODY_API)) == NULL) {
        Py_DECREF(index);
        return NULL;
    }
    Py_XSETREF(body_program, Py_NewRef(program));
    Py_XSETREF(body_names, Py_NewRef(names));
    Py_XSETREF(name_index, index);
    Py_RETURN_TRUE;
other:  /* not the facts built here: they stay objects */
    Py_DECREF(index);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_FALSE;
}

PyObject *set_quiet(PyObject *self, PyObject *args) {
    PyObject *names;
    long long mask;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!L", &PyTuple_Type, &names, &mask))
        return NULL;
    Py_XSETREF(quiet_inputs, Py_NewRef(names));
    quiet_mask = mask;
    Py_RETURN_NONE;
}

int bodies_init(void) {
    if ((k_reasons = PyUnicode_InternFromString("clock_event_reasons")) == NULL ||
        (a_topic = PyUnicode_InternFromString("topic")) == NULL ||
        (a_partition = PyUnicode_InternFromString("partition")) == NULL ||
        (a_offset = PyUnicode_InternFromString("offset")) == NULL)
        return -1;
    return 0;
}
