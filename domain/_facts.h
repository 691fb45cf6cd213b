/* What the parts of the _facts module share (domain/_facts.c: utilization facts and the
 * module; domain/_fact_id.c: fact ids; domain/_capacity_fact.c: capacity facts). */
#ifndef GPULEDGER_FACTS_H
#define GPULEDGER_FACTS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyObject *hash_parts(PyObject *const *args, Py_ssize_t nargs);  /* the fact id of the parts (a new str) */
int fact_id_init(void);  /* 0, or -1 with ImportError set */
/* domain/_facts.c: an object of cls whose __dict__ is d, as domain/facts.py ``built`` makes it */
PyObject *built_object(PyObject *cls, PyObject *d);
/* domain/_capacity_fact.c: capacity facts */
PyObject *capacity_setup(PyObject *self, PyObject *args);
PyObject *capacity_fact(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
int capacity_fact_init(void);  /* 0, or -1 with an error set */

#endif
