/* What the two halves of the _dcgm_walk module share (domain/_dcgm_walk.c: the walk and the
 * module; domain/_dcgm_samples.c: the samples). */
#ifndef GPULEDGER_DCGM_WALK_H
#define GPULEDGER_DCGM_WALK_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyObject *dcgm_samples(PyObject *self, PyObject *args);
int dcgm_samples_init(void);  /* 0, or -1 with the error set */

#endif
