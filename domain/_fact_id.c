/* Fact ids of the _facts module (domain/_facts.c): SHA-256 over the parts' str() joined by
 * U+001F and encoded UTF-8, the first 32 hex digits, as domain/facts.py ``python_fact_id``. */
#include "_facts.h"  /* Python.h first, as it must be */

#include <openssl/evp.h>
#include <string.h>

static EVP_MD *sha256;
static EVP_MD_CTX *ctx;

/* The digest's input, gathered before the digest starts (a part's __str__ may run Python
 * that asks for a fact id itself): 256 bytes on the stack, more on the heap. */
typedef struct {
    char stack[256];
    char *data;
    size_t used, size;
} Feed;

static int feed(Feed *f, const char *data, size_t n) {
    if (f->used + n > f->size) {
        size_t size = 2 * (f->used + n);
        char *grown = f->data == f->stack ? PyMem_Malloc(size) : PyMem_Realloc(f->data, size);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        if (f->data == f->stack)
            memcpy(grown, f->stack, f->used);
        f->data = grown;
        f->size = size;
    }
    memcpy(f->data + f->used, data, n);
    f->used += n;
    return 0;
}

/* The UTF-8 of a str object (what str.encode() gives; a lone surrogate raises as it does). */
static int feed_str(Feed *f, PyObject *s) {
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (u == NULL)
        return -1;
    return feed(f, u, (size_t)n);
}

static int feed_part(Feed *f, PyObject *part) {
    if (PyUnicode_CheckExact(part))
        return feed_str(f, part);
    if (part == Py_None)
        return feed(f, "None", 4);
    if (PyLong_CheckExact(part)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(part, &overflow);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (!overflow) {
            char digits[24], *p = digits + sizeof digits;
            unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
            do {
                *--p = (char)('0' + u % 10);
                u /= 10;
            } while (u);
            if (v < 0)
                *--p = '-';
            return feed(f, p, (size_t)(digits + sizeof digits - p));
        }
    }
    PyObject *s = PyObject_Str(part);
    int r;
    if (s == NULL)
        return -1;
    r = feed_str(f, s);
    Py_DECREF(s);
    return r;
}

PyObject *hash_parts(PyObject *const *args, Py_ssize_t nargs) {
    static const char hex[] = "0123456789abcdef";
    Feed f;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    Py_ssize_t i;
    PyObject *out = NULL;
    int ok;
    f.data = f.stack;
    f.used = 0;
    f.size = sizeof f.stack;
    for (i = 0; i < nargs; i++)
        if ((i && feed(&f, "\x1f", 1) < 0) || feed_part(&f, args[i]) < 0)
            goto done;
    ok = EVP_DigestInit_ex2(ctx, sha256, NULL) && EVP_DigestUpdate(ctx, f.data, f.used) &&
         EVP_DigestFinal_ex(ctx, md, &md_len) && md_len >= 16;
    if (!ok) {
        PyErr_SetString(PyExc_RuntimeError, "SHA-256 failed (OpenSSL)");
        goto done;
    }
    out = PyUnicode_New(32, 127);
    if (out != NULL) {
        Py_UCS1 *o = PyUnicode_1BYTE_DATA(out);
        for (i = 0; i < 16; i++) {
            o[2 * i] = (Py_UCS1)hex[md[i] >> 4];
            o[2 * i + 1] = (Py_UCS1)hex[md[i] & 15];
        }
    }
done:
    if (f.data != f.stack)
        PyMem_Free(f.data);
    return out;
}

int fact_id_init(void) {
    sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
    ctx = EVP_MD_CTX_new();
    if (sha256 == NULL || ctx == NULL) {
        PyErr_SetString(PyExc_ImportError, "OpenSSL has no SHA-256 here");
        return -1;
    }
    return 0;
}
