/* What the two halves of the _health module share (domain/_health.c: health_rows and the
 * module; domain/_health_bodies.c: health_bodies and its writer). */
#ifndef GPULEDGER_HEALTH_H
#define GPULEDGER_HEALTH_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* set by setup() and the module's init: the reference, GpuHealthFact, facts.fact_id, names */
extern PyObject *reference, *fact_cls, *fact_id, *s_health, *k_fact_id, *k_names[5];
PyObject *fact_from(PyObject *row);  /* a GpuHealthFact whose __dict__ is row, as facts.built makes it */
/* the devices in the facts' order, and *fields their fields (a list, the same order); None where
 * not as the parse makes them */
PyObject *in_order(PyObject *health, PyObject **fields);

PyObject *health_bodies(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *set_body_writer(PyObject *self, PyObject *args);
PyObject *set_quiet(PyObject *self, PyObject *args);
int bodies_init(void);  /* 0, or -1 with an error set */

#endif
