/* What the two halves of the _dcgm_walk module share (domain/_dcgm_walk.c: the walk and the
 * module; domain/_dcgm_samples.c: the samples; domain/_dcgm_table.c: its lookups). */
#ifndef GPULEDGER_DCGM_WALK_H
#define GPULEDGER_DCGM_WALK_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyObject *dcgm_samples(PyObject *self, PyObject *args);
int dcgm_samples_init(void);  /* 0, or -1 with the error set */

/* domain/_dcgm_table.c: series found by their bytes, plain decimals read exactly */
#include <stdint.h>
uint64_t series_hash(const char *s, Py_ssize_t n);
PyObject *series_table_find(PyObject *cache, const char *s, Py_ssize_t n, uint64_t hash);  /* borrowed, or NULL */
int series_table_put(const char *s, Py_ssize_t n, uint64_t hash, PyObject *info);  /* 0, or -1 with the error set */
PyObject *dcgm_table_size(PyObject *self, PyObject *unused);  /* table_size() */
int plain_decimal(const char *s, const char *stop, double *out);  /* 1 read, 0 left to float() */

#endif
