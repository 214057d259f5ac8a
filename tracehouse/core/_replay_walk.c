/*
 * The replay's longest-path walk (Kahn's topological order over a CSR graph
 * of vertices): tracehouse/core/replay.py states the model and keeps the
 * numpy version, used where this extension is not built; tests check both
 * agree.
 *
 * Why: the numpy version resolves one level of the graph per Python loop
 * step, and a replay graph is as deep as a rank's runtime calls are many
 * (about 4,700 levels at 256 ranks x 2 iterations of a simulated run), so
 * its fixed cost per step (a dozen array calls) dominated the replay
 * (~1 s); here each vertex and edge is visited once. In two steps, because
 * the what-if model replays one graph under seven sets of weights: plan()
 * orders the vertices once, evaluate() replays weights in that order.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/*
 * A plan: the vertices in one topological order, each vertex's graph
 * in-edges laid out in that order, so that replaying the graph under many
 * weights (as measured, then each what-if scenario) is one pass over arrays
 * read in order (evaluate), and the order, which is the graph's structure
 * and the same for every scenario, is found once. Vertex 2i is node i's
 * start, 2i+1 its end; a node's own start -> end edge is implicit (its
 * weight is the node's work, passed per node, not stored per edge).
 */
PyDoc_STRVAR(plan_doc,
"plan(src, dst, order, ptr, in_src) -> int\n\n"
"src, dst (int32, one per graph edge between vertices 0..n-1, n = len(order),\n"
"even); every end vertex 2i+1 also waits for its start 2i. Writes order (int32,\n"
"n: the vertices in a topological order), ptr (int32, n + 1) and in_src (int32,\n"
"one per edge): the graph in-edges of order[k] come from in_src[ptr[k]:ptr[k+1]].\n"
"int32 throughout (the caller checks the graph fits): half the memory of int64,\n"
"which the what-if model holds beside the graph for all its replays.\n"
"Returns how many vertices were ordered: fewer than n means a cycle (or what\n"
"hangs on one), and then ptr and in_src are not written.");

static PyObject *plan(PyObject *self, PyObject *args) {
    Py_buffer sb, db, ob, pb, ib;
    if (!PyArg_ParseTuple(args, "y*y*w*w*w*", &sb, &db, &ob, &pb, &ib))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = ob.len / 4, m = sb.len / 4;
    if (db.len != sb.len || ib.len != sb.len || pb.len != (n + 1) * 4 || n % 2
        || n + 1 > INT32_MAX || m > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "plan: arrays of inconsistent lengths");
        goto done;
    }
    const int32_t *src = sb.buf, *dst = db.buf;
    int32_t *order = ob.buf, *ptr = pb.buf, *in_src = ib.buf;
    /* first (n + 1), indegree (n), cursor (n + 1); out_dst (m) */
    int32_t *space = calloc((size_t)(3 * n + 2 + m + 1), 4);
    if (!space) { PyErr_NoMemory(); goto done; }
    int32_t *first = space, *indegree = first + n + 1, *cursor = indegree + n;
    int32_t *out_dst = cursor + n + 1;
    for (Py_ssize_t e = 0; e < m; e++) {
        if (src[e] < 0 || src[e] >= n || dst[e] < 0 || dst[e] >= n) {
            PyErr_SetString(PyExc_ValueError, "plan: edge vertex out of range");
            free(space);
            goto done;
        }
        first[src[e] + 1]++;
        indegree[dst[e]]++;
    }
    for (Py_ssize_t v = 0; v < n; v++) {
        first[v + 1] += first[v];
        cursor[v] = first[v];
        indegree[v] += v & 1;  /* an end waits for its own start */
    }
    for (Py_ssize_t e = 0; e < m; e++) out_dst[cursor[src[e]]++] = dst[e];
    Py_ssize_t head = 0, tail = 0;
    for (Py_ssize_t v = 0; v < n; v++)
        if (indegree[v] == 0) order[tail++] = (int32_t)v;
    while (head < tail) {
        int32_t v = order[head++];
        for (int32_t e = first[v]; e < first[v + 1]; e++)
            if (--indegree[out_dst[e]] == 0) order[tail++] = out_dst[e];
        if (!(v & 1) && --indegree[v + 1] == 0) order[tail++] = v + 1;
    }
    if (tail == n) {
        /* cursor: each vertex's position in the order, then ptr's fill cursor */
        for (Py_ssize_t k = 0; k < n; k++) cursor[order[k]] = (int32_t)k;
        memset(ptr, 0, (size_t)(n + 1) * 4);
        for (Py_ssize_t e = 0; e < m; e++) ptr[cursor[dst[e]] + 1]++;
        for (Py_ssize_t k = 0; k < n; k++) ptr[k + 1] += ptr[k];
        for (Py_ssize_t k = 0; k < n; k++) first[k] = ptr[k];
        for (Py_ssize_t e = 0; e < m; e++) in_src[first[cursor[dst[e]]]++] = src[e];
    }
    free(space);
    result = PyLong_FromSsize_t(tail);
done:
    PyBuffer_Release(&sb); PyBuffer_Release(&db); PyBuffer_Release(&ob);
    PyBuffer_Release(&pb); PyBuffer_Release(&ib);
    return result;
}

PyDoc_STRVAR(evaluate_doc,
"evaluate(order, ptr, in_src, delay, work, own, anchor, value, key, pred)\n\n"
"Replay a plan (plan(): order, ptr, in_src int32) under per-node weights (int64, n / 2 each): a start\n"
"vertex without in-edges is anchor[i]; another start, the latest of its sources\n"
"+ delay[i]; an end, max(its start + work[i], the latest of its sources) +\n"
"own[i]. Writes value (int64, n). key (int64, n / 2 or empty): when given, pred\n"
"(int64, n) is written too, each vertex's binding in-edge as\n"
"replay.binding_predecessors chooses it: -1 without in-edges; a graph edge\n"
"that reaches the maximum before the own edge; among graph edges, the source\n"
"vertex with the lowest (key[node], point).");

static PyObject *evaluate(PyObject *self, PyObject *args) {
    Py_buffer ob, pb, ib, db, wb, nb, ab, vb, kb, rb;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*w*y*w*", &ob, &pb, &ib, &db, &wb, &nb,
                          &ab, &vb, &kb, &rb))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = ob.len / 4, nodes = n / 2;
    int with_pred = kb.len > 0;
    if (pb.len != (n + 1) * 4 || db.len != nodes * 8 || wb.len != nodes * 8
        || nb.len != nodes * 8 || ab.len != nodes * 8 || vb.len != n * 8
        || (with_pred && (kb.len != nodes * 8 || rb.len != n * 8))) {
        PyErr_SetString(PyExc_ValueError, "evaluate: arrays of inconsistent lengths");
        goto done;
    }
    const int32_t *order = ob.buf, *ptr = pb.buf, *in_src = ib.buf;
    const int64_t *delay = db.buf;
    const int64_t *work = wb.buf, *own = nb.buf, *anchor = ab.buf, *key = kb.buf;
    int64_t *value = vb.buf, *pred = rb.buf;
    Py_ssize_t edges = ib.len / 4;
    if (ptr[n] != edges) {
        PyErr_SetString(PyExc_ValueError, "evaluate: ptr does not match in_src");
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t v = order[k], i = v >> 1, lo = ptr[k], hi = ptr[k + 1];  /* int32 in the plan */
        int64_t best = INT64_MIN;
        for (int64_t e = lo; e < hi; e++)
            if (value[in_src[e]] > best) best = value[in_src[e]];
        int graph_binds;
        if (!(v & 1)) {
            value[v] = lo == hi ? anchor[i] : best + delay[i];
            graph_binds = lo < hi;
        } else {
            int64_t reach = value[v - 1] + work[i];
            graph_binds = lo < hi && best >= reach;
            value[v] = (graph_binds ? best : reach) + own[i];
        }
        if (!with_pred) continue;
        if (!graph_binds) {
            pred[v] = (v & 1) ? v - 1 : -1;
            continue;
        }
        int64_t chosen = -1, chosen_key = 0;
        for (int64_t e = lo; e < hi; e++) {
            int64_t u = in_src[e];
            if (value[u] != best) continue;
            int64_t u_key = 2 * key[u >> 1] + (u & 1);
            if (chosen < 0 || u_key < chosen_key) { chosen = u; chosen_key = u_key; }
        }
        pred[v] = chosen;
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyBuffer_Release(&ob); PyBuffer_Release(&pb); PyBuffer_Release(&ib);
    PyBuffer_Release(&db); PyBuffer_Release(&wb); PyBuffer_Release(&nb);
    PyBuffer_Release(&ab); PyBuffer_Release(&vb); PyBuffer_Release(&kb);
    PyBuffer_Release(&rb);
    return result;
}

static PyMethodDef methods[] = {
    {"plan", plan, METH_VARARGS, plan_doc},
    {"evaluate", evaluate, METH_VARARGS, evaluate_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_replay_walk",
    "Compiled replay plan and walk (see tracehouse/core/replay.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__replay_walk(void) { return PyModule_Create(&module); }
