/* A node's last scrape, met line by line by its next one: the third part of the _dcgm_walk
 * module (domain/_dcgm_walk.c: the walk, and the module).
 *
 * An exporter writes a node's series in the same order scrape after scrape, and only their
 * values change. So a walk handed a Template compares each line's series with the series of
 * the same line of the scrape the template holds: where the bytes are the same, the series is
 * the one found for that line then (its info), and no hash or table lookup is made for it. A
 * series is taken from the template only where it was in the cache generation the walk is
 * handed (``bound``): the same info the cache gives for it. Any other line is found as
 * before, and a template of another generation gives nothing. A walk that ends well leaves
 * its own lines in the template for the next scrape; one stopped by an error or handed back
 * (the devices in C could not hold a value) leaves the template as it was. A walk begun while
 * another holds the template (a Python helper the outer walk called, walking again) walks
 * without it.
 *
 * Template() -> an empty template (domain/dcgm.py keeps one per cluster and node, and drops
 * them all when the caches rotate: a template is never older than the generation). */
#include "_dcgm_walk.h"  /* Python.h first, as it must be */

#include <string.h>

struct TemplateObject {
    PyObject_HEAD
    PyObject *text;   /* the scrape (a plain str), or NULL */
    PyObject *bound;  /* the cache generation its lines' series were found in */
    Hint *lines;      /* its lines, in order */
    Py_ssize_t n, size;
    Py_ssize_t met;   /* the lines of the last walk handed it whose series were its own */
    int walking;      /* a walk holds it: one begun meanwhile (by a helper that walk called) walks without it */
};

static void forget(Hint *lines, Py_ssize_t n) {
    Py_ssize_t i;
    for (i = 0; i < n; i++)
        Py_XDECREF(lines[i].info);
}

static void template_dealloc(TemplateObject *t) {
    forget(t->lines, t->n);
    PyMem_Free(t->lines);
    Py_XDECREF(t->text);
    Py_XDECREF(t->bound);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static PyObject *template_lines(TemplateObject *t, PyObject *unused) {
    return PyLong_FromSsize_t(t->text == NULL ? 0 : t->n);
}

static PyObject *template_met(TemplateObject *t, PyObject *unused) {
    return PyLong_FromSsize_t(t->met);
}

static PyMethodDef template_methods[] = {
    {"lines", (PyCFunction)template_lines, METH_NOARGS, "lines() -> the lines it holds (0: none yet)"},
    {"met", (PyCFunction)template_met, METH_NOARGS,
     "met() -> the lines of the last walk handed it whose series were those of its lines"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject TemplateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "gpuledger.domain._dcgm_walk.Template",
    .tp_basicsize = sizeof(TemplateObject),
    .tp_dealloc = (destructor)template_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A node's last scrape, whose lines its next one is met with (domain/_dcgm_template.c).",
    .tp_new = PyType_GenericNew,
    .tp_methods = template_methods,
};

void lines_start(Lines *l, PyObject *template, PyObject *text, PyObject *cache) {
    TemplateObject *t = (TemplateObject *)template;
    memset(l, 0, sizeof *l);
    if (template == NULL || !PyObject_TypeCheck(template, &TemplateType) || t->walking)
        return;  /* (a walk inside another may not free the lines the outer one is meeting) */
    l->t = t;
    t->walking = 1;
    if (t->text != NULL && t->bound == cache && PyUnicode_IS_ASCII(text)) {
        l->old = (const char *)PyUnicode_DATA(t->text);
        l->hints = t->lines;
        l->nhints = t->n;
    }
}

int lines_next(Lines *l) {
    if (l->t == NULL)
        return 0;
    if (l->n == l->size) {
        Py_ssize_t size = l->size ? 2 * l->size : 64;
        Hint *grown = PyMem_Realloc(l->rec, (size_t)size * sizeof(Hint));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        l->rec = grown;
        l->size = size;
    }
    l->rec[l->n++] = (Hint){0, 0, NULL};
    return 0;
}

PyObject *lines_hint(Lines *l, const char *series, Py_ssize_t len) {
    const Hint *h;
    Py_ssize_t at = l->n - 1;
    if (l->hints == NULL || at < 0 || at >= l->nhints)
        return NULL;
    h = &l->hints[at];
    if (h->info == NULL || h->len != len || memcmp(l->old + h->start, series, (size_t)len) != 0)
        return NULL;
    l->met++;
    return h->info;
}

void lines_keep(Lines *l, Py_ssize_t start, Py_ssize_t len, PyObject *info) {
    Hint *h;
    if (l->t == NULL || l->n == 0)
        return;
    h = &l->rec[l->n - 1];
    Py_XSETREF(h->info, Py_NewRef(info));
    h->start = start;
    h->len = len;
}

void lines_end(Lines *l, PyObject *text, PyObject *cache, int kept) {
    TemplateObject *t = l->t;
    if (t != NULL)
        t->met = l->met, t->walking = 0;
    if (t != NULL && kept && PyUnicode_IS_ASCII(text)) {
        forget(t->lines, t->n);
        PyMem_Free(t->lines);
        t->lines = l->rec, t->n = l->n, t->size = l->size;
        Py_XSETREF(t->text, Py_NewRef(text));
        Py_XSETREF(t->bound, Py_NewRef(cache));
    } else {
        forget(l->rec, l->n);
        PyMem_Free(l->rec);
    }
    memset(l, 0, sizeof *l);
}
