/*
 * The replay's longest-path walk in one pass (Kahn's topological order over
 * a CSR graph of vertices): tracehouse/core/replay.py states the model and
 * keeps the numpy version, used where this extension is not built; tests
 * check both agree.
 *
 * Why: the numpy version resolves one level of the graph per Python loop
 * step, and a replay graph is as deep as a rank's runtime calls are many
 * (about 4,700 levels at 256 ranks x 2 iterations of a simulated run), so
 * its fixed cost per step (a dozen array calls) dominated the replay
 * (~1 s); this loop visits each vertex and edge once.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

PyDoc_STRVAR(walk_doc,
"walk(src, dst, weight, add, value, frontier) -> int\n\n"
"Longest path over vertices 0..n-1 from the frontier (the vertices without an\n"
"in-edge, their value set). src, dst, weight (int64, one per edge, any order);\n"
"add (int64, n): added to a vertex once all its in-edges are resolved; value\n"
"(int64, n) is written; frontier: int64 vertex ids. Returns how many vertices\n"
"were resolved (fewer than n: a cycle). Every array is C-contiguous.");

static PyObject *walk(PyObject *self, PyObject *args) {
    Py_buffer sb, db, wb, ab, vb, rb;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*y*", &sb, &db, &wb, &ab, &vb, &rb))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = ab.len / 8, m = sb.len / 8, roots = rb.len / 8;
    if (db.len != sb.len || wb.len != sb.len || vb.len != ab.len) {
        PyErr_SetString(PyExc_ValueError, "walk: arrays of inconsistent lengths");
        goto done;
    }
    const int64_t *src = sb.buf, *dst = db.buf, *weight = wb.buf, *add = ab.buf;
    const int64_t *frontier = rb.buf;
    int64_t *value = vb.buf;
    /* first (n + 1), indegree, best, queue (n each); out_dst, out_weight (m each) */
    int64_t *space = calloc((size_t)(4 * n + 1 + 2 * m + 1), 8);
    if (!space) { PyErr_NoMemory(); goto done; }
    int64_t *first = space, *indegree = first + n + 1, *best = indegree + n;
    int64_t *queue = best + n, *out_dst = queue + n, *out_weight = out_dst + m;
    for (Py_ssize_t e = 0; e < m; e++) {
        if (src[e] < 0 || src[e] >= n || dst[e] < 0 || dst[e] >= n) {
            PyErr_SetString(PyExc_ValueError, "walk: edge vertex out of range");
            free(space);
            goto done;
        }
        first[src[e] + 1]++;
        indegree[dst[e]]++;
    }
    for (Py_ssize_t v = 0; v < n; v++) {
        first[v + 1] += first[v];
        best[v] = INT64_MIN;
        queue[v] = first[v];  /* fill cursor, reused as the queue below */
    }
    for (Py_ssize_t e = 0; e < m; e++) {
        int64_t slot = queue[src[e]]++;
        out_dst[slot] = dst[e];
        out_weight[slot] = weight[e];
    }
    Py_ssize_t head = 0, tail = 0;
    for (Py_ssize_t r = 0; r < roots; r++) {
        int64_t v = frontier[r];
        if (v < 0 || v >= n || tail >= n) {
            PyErr_SetString(PyExc_ValueError, "walk: frontier vertex out of range");
            free(space);
            goto done;
        }
        queue[tail++] = v;
    }
    while (head < tail) {
        int64_t v = queue[head++];
        for (int64_t e = first[v]; e < first[v + 1]; e++) {
            int64_t t = out_dst[e];
            int64_t reach = value[v] + out_weight[e];
            if (reach > best[t]) best[t] = reach;
            if (--indegree[t] == 0) {
                value[t] = best[t] + add[t];
                queue[tail++] = t;
            }
        }
    }
    free(space);
    result = PyLong_FromSsize_t(tail);
done:
    PyBuffer_Release(&sb); PyBuffer_Release(&db); PyBuffer_Release(&wb);
    PyBuffer_Release(&ab); PyBuffer_Release(&vb); PyBuffer_Release(&rb);
    return result;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, walk_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_replay_walk",
    "Compiled replay walk (see tracehouse/core/replay.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__replay_walk(void) { return PyModule_Create(&module); }
