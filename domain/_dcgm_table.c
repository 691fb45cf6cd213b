/* The lookups of the walk over a scrape (domain/_dcgm_walk.c) that need no Python object:
 *
 * - the series table: a series' info found by the bytes of its text (name and label set) in
 *   the scrape, instead of a str made of them and hashed for the cache dict. It mirrors the
 *   cache generation it is bound to (domain/dcgm.py ``_SERIES.young``): an entry is put only
 *   once that dict holds the series, and a walk handed another dict (the generation rotated,
 *   or a caller's own) empties the table first, so it never knows a series the dict would not.
 *   A series' info depends on its text alone; the table holds at most the young generation.
 * - plain decimals: "0.5", "-12", "1.5e+03" read exactly without the interpreter's strtod.
 *   A decimal of at most 15 significant digits and a power of ten within 10^22 is m * 10^e or
 *   m / 10^-e, one correctly rounded operation on two exact doubles: the double float() gives.
 *   Anything else is left to float() (``plain_decimal`` answers 0).
 * - the dicts of the devices a walk met last (``Recent``, domain/_dcgm_walk.h), a dict's inner
 *   dict, and a character in a line.
 */
#include "_dcgm_walk.h"

#include <stdint.h>
#include <string.h>

typedef struct {
    uint64_t hash;
    Py_ssize_t len;
    char *key;  /* NULL: a free slot */
    PyObject *info;
} Entry;

static Entry *slots;
static size_t capacity, used;  /* capacity a power of two, at most half used */
static PyObject *bound;        /* the cache dict the table mirrors */

uint64_t series_hash(const char *s, Py_ssize_t n) {
    uint64_t a = 0x9e3779b97f4a7c15ULL ^ (uint64_t)n, b = 0x6a09e667f3bcc909ULL, w, x;
    while (n >= 16) {  /* two lanes: the multiplies of one do not wait for the other's */
        memcpy(&w, s, 8);
        memcpy(&x, s + 8, 8);
        a = (a ^ w) * 0xff51afd7ed558ccdULL;
        b = (b ^ x) * 0xc4ceb9fe1a85ec53ULL;
        a ^= a >> 32;
        b ^= b >> 29;
        s += 16;
        n -= 16;
    }
    if (n >= 8) {
        memcpy(&w, s, 8);
        a = (a ^ w) * 0xff51afd7ed558ccdULL;
        a ^= a >> 32;
        s += 8;
        n -= 8;
    }
    w = 0;
    memcpy(&w, s, (size_t)n);
    b = (b ^ w) * 0xc4ceb9fe1a85ec53ULL;
    a = (a ^ (b >> 31) ^ b) * 0xff51afd7ed558ccdULL;
    return a ^ (a >> 33);
}

static void clear(void) {
    size_t i;
    for (i = 0; i < capacity; i++) {
        if (slots[i].key != NULL) {
            PyMem_Free(slots[i].key);
            Py_DECREF(slots[i].info);
        }
    }
    PyMem_Free(slots);
    slots = NULL;
    capacity = used = 0;
}

PyObject *series_table_find(PyObject *cache, const char *s, Py_ssize_t n, uint64_t hash) {
    size_t i;
    if (cache != bound) {  /* another generation: forget the last one's entries */
        clear();
        Py_INCREF(cache);
        Py_XSETREF(bound, cache);
        return NULL;
    }
    if (capacity == 0)
        return NULL;
    for (i = hash & (capacity - 1); slots[i].key != NULL; i = (i + 1) & (capacity - 1)) {
        if (slots[i].hash == hash && slots[i].len == n && memcmp(slots[i].key, s, (size_t)n) == 0)
            return slots[i].info;
    }
    return NULL;
}

static void place(Entry e) {
    size_t i;
    for (i = e.hash & (capacity - 1); slots[i].key != NULL; i = (i + 1) & (capacity - 1))
        ;
    slots[i] = e;
}

int series_table_put(PyObject *cache, const char *s, Py_ssize_t n, uint64_t hash, PyObject *info) {
    Entry e;
    if (cache != bound || series_table_find(cache, s, n, hash) != NULL)  /* rebound or put meanwhile: a helper the */
        return 0;                                                       /* walk called ran another walk */
    if (2 * (used + 1) > capacity) {
        size_t old = capacity, i;
        Entry *was = slots, *grown = PyMem_Calloc(capacity ? 2 * capacity : 256, sizeof(Entry));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        slots = grown;
        capacity = old ? 2 * old : 256;
        for (i = 0; i < old; i++)
            if (was[i].key != NULL)
                place(was[i]);
        PyMem_Free(was);
    }
    if ((e.key = PyMem_Malloc(n ? (size_t)n : 1)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(e.key, s, (size_t)n);
    e.hash = hash, e.len = n, e.info = Py_NewRef(info);
    place(e);
    used++;
    return 0;
}

PyObject *dcgm_table_size(PyObject *self, PyObject *unused) {
    return PyLong_FromSsize_t((Py_ssize_t)used);
}

static const double powers[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

int plain_decimal(const char *s, const char *stop, double *out) {
    uint64_t m = 0;
    int negative = 0, digits = 0, significant = 0, scale = 0, exp = 0, exp_negative = 0, exp_digits = 0;
    double v;
    if (s < stop && (*s == '+' || *s == '-'))
        negative = *s++ == '-';
    for (; s < stop && *s >= '0' && *s <= '9'; s++, digits++) {
        if (m == 0 && *s == '0')
            continue;  /* leading zeros count for nothing */
        if (++significant > 15)
            return 0;
        m = m * 10 + (uint64_t)(*s - '0');
    }
    if (s < stop && *s == '.') {
        for (s++; s < stop && *s >= '0' && *s <= '9'; s++, digits++, scale++) {
            if (m == 0 && *s == '0')
                continue;
            if (++significant > 15)
                return 0;
            m = m * 10 + (uint64_t)(*s - '0');
        }
    }
    if (digits == 0)
        return 0;
    if (s < stop && (*s == 'e' || *s == 'E')) {
        s++;
        if (s < stop && (*s == '+' || *s == '-'))
            exp_negative = *s++ == '-';
        for (; s < stop && *s >= '0' && *s <= '9'; s++, exp_digits++) {
            if (exp > 1000)
                return 0;
            exp = exp * 10 + (*s - '0');
        }
        if (exp_digits == 0)
            return 0;
    }
    if (s != stop)
        return 0;
    exp = (exp_negative ? -exp : exp) - scale;
    if (exp < -22 || exp > 22)
        return 0;
    v = (double)m;  /* exact: at most 15 digits */
    v = exp >= 0 ? v * powers[exp] : v / powers[-exp];
    *out = negative ? -v : v;
    return 1;
}

/* float() of an ASCII " 0.5" (blanks, one number, blanks) without making a str of it: NULL
 * with no error set when the text is anything else (then float() itself is asked). */
PyObject *plain_float(PyObject *text, Py_ssize_t from, Py_ssize_t to) {
    const char *s, *end, *stop;
    char held;
    double v;
    if (!PyUnicode_IS_ASCII(text))
        return NULL;
    s = (const char *)PyUnicode_DATA(text) + from;
    stop = (const char *)PyUnicode_DATA(text) + to;
    while (s < stop && (*s == ' ' || *s == '\t'))
        s++;
    if (s == stop)
        return NULL;
    held = *stop;  /* the line's end: a line break, or the text's NUL; strtod stops at either */
    if (held != '\0' && held != '\n' && held != '\r' && held != '\v' && held != '\f' && held != 0x1c && held != 0x1d
            && held != 0x1e)
        return NULL;
    for (end = s; end < stop && *end != ' ' && *end != '\t'; end++)
        ;
    if (plain_decimal(s, end, &v)) {  /* the common value, read without the interpreter's strtod */
        while (end < stop && (*end == ' ' || *end == '\t'))
            end++;
        return end == stop ? PyFloat_FromDouble(v) : NULL;
    }
    v = PyOS_string_to_double(s, (char **)&end, NULL);
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return NULL;
    }
    if (end == s || end > stop)
        return NULL;
    while (end < stop && (*end == ' ' || *end == '\t'))
        end++;
    if (end != stop)
        return NULL;  /* a timestamp, an underscore, anything else: float() decides */
    return PyFloat_FromDouble(v);
}

PyObject *recent_find(const Recent *r, PyObject *key) {
    int i;
    for (i = 0; i < r->n; i++)
        if (r->key[i] == key)
            return r->value[i];
    return NULL;
}

void recent_keep(Recent *r, PyObject *key, PyObject *value) {
    if (r->n < RECENT)
        r->key[r->n] = key, r->value[r->n++] = value;
}

/* d.setdefault(key, {}) -- borrowed */
PyObject *inner_dict(PyObject *d, PyObject *key) {
    PyObject *inner = PyDict_GetItemWithError(d, key);
    if (inner != NULL || PyErr_Occurred())
        return inner;
    inner = PyDict_New();
    if (inner == NULL)
        return NULL;
    if (PyDict_SetItem(d, key, inner) < 0) {
        Py_DECREF(inner);
        return NULL;
    }
    Py_DECREF(inner);
    return inner;
}

/* Where c first (direction 1) or last (-1) is in text[start:end]: -1 if nowhere, -2 on error, as
 * PyUnicode_FindChar; an ASCII text's bytes are searched without its calls. */
Py_ssize_t find_char(PyObject *text, int plain, Py_ssize_t start, Py_ssize_t end, char c, int direction) {
    const char *data, *at;
    if (!plain)
        return PyUnicode_FindChar(text, c, start, end, direction);
    data = (const char *)PyUnicode_DATA(text);
    if (direction > 0) {
        at = memchr(data + start, c, (size_t)(end - start));
        return at == NULL ? -1 : at - data;
    }
    for (at = data + end; at > data + start;)
        if (*--at == c)
            return at - data;
    return -1;
}
