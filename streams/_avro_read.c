/* A source record in C: what schemas/registry.py ``Codec.decode`` gives for a value written
 * with the schema version it reads, where every field is a string, long, int or double (or a
 * [null, T] union of one), as the program of streams/avro_writer.py ``check_program`` has them.
 *
 * read(header, program, names, value) -> dict | None
 *   header   the framing the value starts with (0x00, the 4-byte version)
 *   names    the fields' names, in the schema's order
 * Returns the record as fastavro reads it (the same keys in the same order, the same values)
 * when the value is a whole record of the schema and nothing more, every string strict UTF-8
 * and every integer within its type; None otherwise, and for any value it is not sure of: the
 * caller then reads it with fastavro, which gives the record or the error
 * (streams/record_reader.py; tests/unit/streams/test_record_reader.py holds the two to the same
 * records and errors). */
#include "_avro_c.h"  /* Python.h first, as it must be */

#include <string.h>

/* One value at *p into *out (new reference): OK, BAD (not sure) or ERR. */
static int read_value(const unsigned char *b, Py_ssize_t L, Py_ssize_t *p, int type, PyObject **out) {
    unsigned __int128 raw;
    int64_t v;
    switch (type) {
    case T_STRING:
        if (read_raw(b, L, p, 10, &raw) != OK || zigzag(raw, 0, INT64_MAX, &v) != OK || v < 0 || v > L - *p)
            return BAD;
        *out = PyUnicode_DecodeUTF8((const char *)b + *p, (Py_ssize_t)v, "strict");
        if (*out == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                return ERR;
            PyErr_Clear();
            return BAD;
        }
        *p += (Py_ssize_t)v;
        return OK;
    case T_LONG:
    case T_INT:
        if (read_raw(b, L, p, 10, &raw) != OK ||
            zigzag(raw, type == T_LONG ? INT64_MIN : INT32_MIN, type == T_LONG ? INT64_MAX : INT32_MAX, &v) != OK)
            return BAD;
        return (*out = PyLong_FromLongLong(v)) == NULL ? ERR : OK;
    case T_DOUBLE: {
        double d;
        if (L - *p < 8)
            return BAD;
        memcpy(&d, b + *p, 8);  /* little-endian hosts only: checked at import */
        *p += 8;
        return (*out = PyFloat_FromDouble(d)) == NULL ? ERR : OK;
    }
    }
    return BAD;
}

PyObject *avro_read_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *header, *program, *names, *value, *d;
    const unsigned char *b, *prog;
    Py_ssize_t L, hlen, n, i, p;
    (void)self;
    if (nargs != 4 || !PyBytes_Check(args[0]) || !PyBytes_Check(args[1]) || !PyTuple_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "read(header: bytes, program: bytes, names: tuple, value)");
        return NULL;
    }
    header = args[0], program = args[1], names = args[2], value = args[3];
    n = PyTuple_GET_SIZE(names);
    if (PyBytes_GET_SIZE(program) != 2 * n) {
        PyErr_SetString(PyExc_ValueError, "read(): two program bytes per name");
        return NULL;
    }
    if (!PyBytes_CheckExact(value))
        Py_RETURN_NONE;
    b = (const unsigned char *)PyBytes_AS_STRING(value), L = PyBytes_GET_SIZE(value);
    hlen = PyBytes_GET_SIZE(header), prog = (const unsigned char *)PyBytes_AS_STRING(program);
    if (L < hlen || memcmp(b, PyBytes_AS_STRING(header), (size_t)hlen) != 0)
        Py_RETURN_NONE;
    if ((d = _PyDict_NewPresized(n)) == NULL)
        return NULL;
    for (i = 0, p = hlen; i < n; i++) {
        int type = prog[2 * i], null_at = prog[2 * i + 1], r;
        PyObject *v = NULL;
        if (null_at) {  /* 1: null is branch 0, 2: null is branch 1 (each a zigzag varint of one byte) */
            unsigned char branch = p < L ? b[p++] : 0xFF;
            if (branch == 2 * (null_at == 1 ? 0 : 1))
                v = Py_NewRef(Py_None);
            else if (branch != 2 * (null_at == 1 ? 1 : 0))
                goto not_sure;
        }
        if (v == NULL && (r = read_value(b, L, &p, type, &v)) != OK) {
            if (r == ERR) {
                Py_DECREF(d);
                return NULL;
            }
            goto not_sure;
        }
        r = PyDict_SetItem(d, PyTuple_GET_ITEM(names, i), v);
        Py_DECREF(v);
        if (r < 0) {
            Py_DECREF(d);
            return NULL;
        }
    }
    if (p == L)
        return d;
not_sure:
    Py_DECREF(d);
    Py_RETURN_NONE;
}
