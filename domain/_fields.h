/* A dataclass instance's fields read in C: from its __dict__, or from its slots for a class
 * with __slots__, which is what PyObject_GetAttr answers for an object whose class reads
 * attributes the generic way and defines no other data descriptor of the names read (a
 * dataclass, with or without slots), without the class's lookup of each name on each read.
 * The class is checked once per class and version of it (a class changed later, or a base of
 * it, has a new version and is checked again); any other object, a name its __dict__ lacks and
 * a slot not set are read with PyObject_GetAttr. And an exact int field as a long long
 * (``as_ll``), and a frozen object's fields read once and kept (``kept_fields``). Included by
 * the C modules under domain/ that read samples, pieces, source positions and the ownership
 * book. */
#ifndef GPULEDGER_FIELDS_H
#define GPULEDGER_FIELDS_H
#include <Python.h>
#include <structmember.h>

#include <string.h>

#define FIELDS_MAX 16
enum { FIELDS_GETATTR, FIELDS_DICT, FIELDS_SLOTS };  /* how a class's instances are read */

typedef struct {
    PyObject **const *names;  /* the (interned) names read of these objects, at most FIELDS_MAX */
    int n;
    PyTypeObject *tp;  /* the class checked last, */
    unsigned int tag;  /* at this version of it: */
    int mode;  /* the names are its instances' __dict__ entries (FIELDS_DICT), its slots (FIELDS_SLOTS), or neither */
    Py_ssize_t offset[FIELDS_MAX];  /* FIELDS_SLOTS: each name's slot, in bytes from the object's start */
} Fields;

#define FIELDS(...) {(PyObject **const[]){__VA_ARGS__}, sizeof((PyObject **[]){__VA_ARGS__}) / sizeof(PyObject **), \
                     NULL, 0, 0, {0}}

/* Does the class have a version now (tp_version_tag names it)? */
static inline int version_valid(PyTypeObject *tp) {
#if PY_VERSION_HEX >= 0x030C0000
    return tp->tp_version_tag != 0;
#else
    return (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) != 0;
#endif
}

/* A descriptor the class's __slots__ made: an object slot read as it is (no audit hook). */
static inline int slot_member(PyObject *d, Py_ssize_t *offset) {
    PyMemberDef *m;
    if (d == NULL || Py_TYPE(d) != &PyMemberDescr_Type)
        return 0;
    m = ((PyMemberDescrObject *)d)->d_member;
    if (m->type != T_OBJECT_EX || (m->flags & READ_RESTRICTED))
        return 0;
    *offset = m->offset;
    return 1;
}

static inline int fields_mode(Fields *f, PyTypeObject *tp) {
    int i, dict, slots;
    if (tp == f->tp && version_valid(tp) && tp->tp_version_tag == f->tag)
        return f->mode;
    dict = slots = tp->tp_getattro == PyObject_GenericGetAttr && f->n <= FIELDS_MAX;
    for (i = 0; (dict || slots) && i < f->n; i++) {
        PyObject *d = _PyType_Lookup(tp, *f->names[i]);  /* (which gives the class a version) */
        dict = dict && (d == NULL || Py_TYPE(d)->tp_descr_set == NULL);
        slots = slots && slot_member(d, &f->offset[i]);
    }
    f->tp = tp;
    f->tag = tp->tp_version_tag;
    f->mode = !version_valid(tp) ? FIELDS_GETATTR : dict ? FIELDS_DICT : slots ? FIELDS_SLOTS : FIELDS_GETATTR;
    return f->mode;
}

/* o.name, a new reference (NULL with an error set where it cannot be read) */
static inline PyObject *field_of(Fields *f, PyObject *o, PyObject *name) {
    int mode = fields_mode(f, Py_TYPE(o)), i;
    if (mode == FIELDS_DICT) {
        PyObject **dict = _PyObject_GetDictPtr(o);
        if (dict != NULL && *dict != NULL) {
            PyObject *v = PyDict_GetItemWithError(*dict, name);
            if (v != NULL)
                return Py_NewRef(v);
            if (PyErr_Occurred())
                return NULL;
        }
    } else if (mode == FIELDS_SLOTS) {
        for (i = 0; i < f->n; i++) {
            if (*f->names[i] == name) {
                PyObject *v = *(PyObject **)((char *)o + f->offset[i]);
                if (v != NULL)
                    return Py_NewRef(v);
                break;  /* not set: AttributeError, as Python answers */
            }
        }
    }
    return PyObject_GetAttr(o, name);
}

/* An int as a long long: 1 read, 0 not an exact int (or out of range), -1 error. */
static inline int as_ll(PyObject *v, long long *out) {
    int overflow;
    if (!PyLong_CheckExact(v))
        return 0;
    *out = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (*out == -1 && PyErr_Occurred())
        return -1;
    return !overflow;
}

/* An object's fields read once and kept for the reads after (``kept_fields``), where the object
 * is frozen: the object held while kept (so no other object takes its address), with the version
 * of its class they were read at (a class changed since, a property given to it, is read anew). */
#define KEPT_FIELDS 9
typedef struct {
    PyObject *of, *v[KEPT_FIELDS];
    unsigned int tag;  /* the class's version when read, */
    int versioned;  /* if it had one */
} Kept;

static inline void kept_forget(Kept *k, int n) {
    int i;
    Py_CLEAR(k->of);
    for (i = 0; i < n; i++)
        Py_CLEAR(k->v[i]);
}

/* o's fields names[0..n) (n <= KEPT_FIELDS) as kept in k, read and kept there when k holds
 * another object (borrowed: kept until k keeps another); NULL with the error set where one
 * cannot be read */
static inline PyObject *const *kept_fields(Kept *k, Fields *f, PyObject *o, PyObject **const *names, int n) {
    PyObject *v[KEPT_FIELDS];
    PyTypeObject *tp = Py_TYPE(o);
    int i;
    if (k->of == o && k->versioned && version_valid(tp) && tp->tp_version_tag == k->tag)
        return k->v;
    for (i = 0; i < n; i++) {
        if ((v[i] = field_of(f, o, *names[i])) == NULL) {
            while (i--)
                Py_DECREF(v[i]);
            return NULL;
        }
    }
    kept_forget(k, n);
    k->of = Py_NewRef(o);
    k->versioned = version_valid(tp);  /* (the reads gave the class a version) */
    k->tag = tp->tp_version_tag;
    memcpy(k->v, v, (size_t)n * sizeof v[0]);
    return k->v;
}

#endif
