/* What the two halves of the _facts module share (domain/_facts.c: utilization facts and the
 * module; domain/_fact_id.c: fact ids). */
#ifndef GPULEDGER_FACTS_H
#define GPULEDGER_FACTS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyObject *hash_parts(PyObject *const *args, Py_ssize_t nargs);  /* the fact id of the parts (a new str) */
int fact_id_init(void);  /* 0, or -1 with ImportError set */

#endif
