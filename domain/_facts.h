/* What the parts of the _facts module share (domain/_facts.c: utilization facts and the
 * module; domain/_fact_id.c: fact ids; domain/_capacity_fact.c: capacity facts;
 * domain/_capacity_segment.c and _capacity_owner.c: a node's capacity segment). */
#ifndef GPULEDGER_FACTS_H
#define GPULEDGER_FACTS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyObject *hash_parts(PyObject *const *args, Py_ssize_t nargs);  /* the fact id of the parts (a new str) */
int fact_id_init(void);  /* 0, or -1 with ImportError set */
/* domain/_facts.c: an object of cls whose __dict__ is d, as domain/facts.py ``built`` makes it, or
 * whose slots hold d's values where cls keeps every one of d's names in a slot */
PyObject *built_object(PyObject *cls, PyObject *d);
/* domain/_capacity_fact.c: capacity facts */
PyObject *capacity_setup(PyObject *self, PyObject *args);
PyObject *capacity_fact(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
int capacity_fact_init(void);  /* 0, or -1 with an error set */
/* domain/_capacity_owner.c: the OwnershipBook's lookups for a capacity fact's owner. Each answers
 * 1 (answered), 0 (not sure: a value of a type the book never holds) or -1 (error). */
typedef struct {
    PyObject *by_name, *pods, *namespaces;  /* the book's dicts; all NULL where one is not a dict */
} Book;
void book_open(Book *book, PyObject *obj);
void book_close(Book *book);
/* o.name (new reference), or NULL: *err set on an error, not where it is missing */
PyObject *attr_of(PyObject *o, PyObject *name, int *err);
/* an int (or None, where none_ok; *none: it was None) as a long long: 1, 0 another value, -1 error */
int ll_or_none(PyObject *v, int none_ok, long long *out, int *none);
/* o.name as ll_or_none reads it (0 also where it is missing) */
int attr_ll(PyObject *o, PyObject *name, int none_ok, long long *out, int *none);
/* o.name where it is an exact str (new reference), else NULL with *err set on an error */
PyObject *attr_str(PyObject *o, PyObject *name, int *err);
/* OwnershipBook.pod_at: *life a new reference or NULL (no pod) */
int book_pod_at(Book *book, PyObject *namespace, PyObject *name, long long t, PyObject **life);
/* OwnershipBook.same_pod_at: 1 the same pod (or none) at a and b, 0 not, 2 not sure, -1 error */
int book_same_pod(Book *book, PyObject *namespace, PyObject *name, long long a, long long b);
/* a namespace version edge inside (a, b) (OwnershipBook.namespace_changes non-empty): 1 yes, 0 no,
 * 2 not sure, -1 error */
int book_namespace_changes(Book *book, PyObject *namespace, long long a, long long b);
/* capacity.py ``_owner`` for a unit of confidence "high", at t: new references */
int book_owner(Book *book, PyObject *holder, PyObject *pod, PyObject *pod_ns, long long t, PyObject **owner,
               PyObject **confidence, PyObject **reason);
int capacity_owner_init(void);  /* 0, or -1 with an error set */
/* domain/_capacity_segment.c: a node's capacity segment */
PyObject *segment_setup(PyObject *self, PyObject *args);
PyObject *segment_facts(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *segment_counts(PyObject *self, PyObject *unused);
PyObject *same_pods(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
int capacity_segment_init(void);  /* 0, or -1 with an error set */

#endif
