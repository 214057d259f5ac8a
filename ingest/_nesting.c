/*
 * Slice nesting in one pass: parent, depth and the partial-overlap flag of
 * every slice (ingest/nesting.py states the rules and keeps the numpy version,
 * used where this extension is not built; tests check both agree).
 *
 * Why: the numpy version answers "nearest earlier slice on the track whose end
 * is >= mine" by binary lifting over a sparse table: ~20 array passes, ~0.05 s
 * per 150k slices. A monotonic stack answers it in one pass: walking a track's
 * slices in (start, longest first) order, a slice that ends no later than a
 * later one is never anyone's parent again, so the stack holds only candidates,
 * and the first one from the top that ends late enough is the parent. The
 * slices popped on the way are exactly those between the parent and the slice
 * (or their dominators), so their largest end says whether one is still open
 * when the slice starts (a partial overlap).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

PyDoc_STRVAR(nest_doc,
"nest(order, track, ts, dur, parent, depth, partial) -> None\n\n"
"Fill parent (int64, -1 for roots), depth (int64) and partial (bool) of n slices,\n"
"in their original order. order: the slices sorted by (track, ts, -dur, index);\n"
"track, ts, dur: int64 in the original order. Every array is C-contiguous.");

static PyObject *nest(PyObject *self, PyObject *args) {
    Py_buffer ob, tb, sb, db, pb, hb, xb;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*w*w*", &ob, &tb, &sb, &db, &pb, &hb, &xb))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = ob.len / 8;
    if (tb.len != ob.len || sb.len != ob.len || db.len != ob.len || pb.len != ob.len ||
        hb.len != ob.len || xb.len != n) {
        PyErr_SetString(PyExc_ValueError, "nest: arrays of different lengths");
        goto done;
    }
    const int64_t *order = ob.buf, *track = tb.buf, *ts = sb.buf, *dur = db.buf;
    int64_t *parent = pb.buf, *depth = hb.buf;
    unsigned char *partial = xb.buf;
    /* Stack of sorted positions; pos_depth and pos_end per sorted position. */
    int64_t *stack = malloc((size_t)(n ? n : 1) * 8 * 3);
    if (!stack) { PyErr_NoMemory(); goto done; }
    int64_t *pos_depth = stack + n, *pos_end = stack + 2 * n;
    Py_ssize_t top = 0;
    for (Py_ssize_t p = 0; p < n; p++) {
        int64_t i = order[p];
        if (i < 0 || i >= n) {
            PyErr_SetString(PyExc_ValueError, "nest: order is not a permutation");
            free(stack);
            goto done;
        }
        if (p && track[i] != track[order[p - 1]]) top = 0;
        int64_t start = ts[i];
        int64_t end = (int64_t)((uint64_t)start + (uint64_t)dur[i]);
        /* A zero-length slice exactly at another slice's end is not inside it
         * (wrapping like numpy's end + 1 does at INT64_MAX). */
        int64_t need = end == start ? (int64_t)((uint64_t)end + 1) : end;
        int64_t popped_max = INT64_MIN;
        int any = 0;
        while (top && pos_end[stack[top - 1]] < need) {
            int64_t e = pos_end[stack[--top]];
            if (!any || e > popped_max) popped_max = e;
            any = 1;
        }
        pos_end[p] = end;
        if (top) {
            int64_t q = stack[top - 1];
            parent[i] = order[q];
            pos_depth[p] = pos_depth[q] + 1;
        } else {
            parent[i] = -1;
            pos_depth[p] = 0;
        }
        depth[i] = pos_depth[p];
        partial[i] = any && popped_max > start;
        stack[top++] = p;
    }
    free(stack);
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&ob); PyBuffer_Release(&tb); PyBuffer_Release(&sb);
    PyBuffer_Release(&db); PyBuffer_Release(&pb); PyBuffer_Release(&hb);
    PyBuffer_Release(&xb);
    return result;
}

static PyMethodDef methods[] = {
    {"nest", nest, METH_VARARGS, nest_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_nesting",
    "Compiled slice nesting (see ingest/nesting.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__nesting(void) { return PyModule_Create(&module); }
