/* What the two halves of the _avro_c module share (streams/_avro_c.c: the sink's check and the
 * module; streams/_avro_write.c: the worker's writer). */
#ifndef GPULEDGER_AVRO_C_H
#define GPULEDGER_AVRO_C_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

enum { T_STRING = 1, T_LONG = 2, T_INT = 3, T_DOUBLE = 4 };
enum { OK = 0, BAD = -1, ERR = -2 };  /* ERR: a Python exception is set */

/* streams/_avro_c.c: a varint of at most maxlen bytes at *p (its raw value), and its zigzag value in [lo, hi] */
int read_raw(const unsigned char *b, Py_ssize_t L, Py_ssize_t *p, int maxlen, unsigned __int128 *raw);
int zigzag(unsigned __int128 raw, int64_t lo, int64_t hi, int64_t *out);
PyObject *avro_read_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *avro_write_record(PyObject *self, PyObject *args);
PyObject *avro_write_each(PyObject *self, PyObject *args);
PyObject *avro_write_bodies(PyObject *self, PyObject *args);
PyObject *avro_container(PyObject *self, PyObject *args);
PyObject *avro_batch_container(PyObject *self, PyObject *args);
PyObject *avro_body_of(const char *prog, Py_ssize_t plen, PyObject *const *values, Py_ssize_t n);
#define BODY_API "gpuledger.streams._avro_c.body_of"  /* the capsule of avro_body_of, the module's body_of */

#endif
