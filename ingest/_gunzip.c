/* Gunzip a single-member gzip file into one buffer of its known size (ingest/runner.py).
 *
 * Why in C: Python's one-shot zlib.decompress stops after the first gzip member
 * and says nothing of the bytes after it, so ingest.kineto.read.gunzip had to recompute the
 * text's CRC-32 to tell a single-member file (what PyTorch writes) from one
 * with more members: ~1 ms per MB of JSON, 10 % of a large trace's ingest.
 * Here zlib checks the member's CRC-32 and length itself (wbits 31) and the
 * caller learns whether the member was the whole file (no input left over),
 * with the GIL released while it inflates.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <string.h>
#include <zlib.h>

PyDoc_STRVAR(single_doc,
"single_member(data, size) -> bytes | None\n\n"
"The text of ``data`` when it is exactly one gzip member that inflates to\n"
"``size`` bytes (its CRC-32 and length checked by zlib); ``None`` otherwise\n"
"(another size, more members or trailing bytes, damage, truncation): the\n"
"caller then reads it with ``gzip.decompress``, which words the error.");

/* The next at most UINT_MAX bytes of a buffer: their count, the cursor moved past them. */
static uInt next_piece(unsigned char **cursor, Py_ssize_t *left) {
    uInt n = *left > (Py_ssize_t)UINT_MAX ? UINT_MAX : (uInt)*left;
    *cursor += n;
    *left -= n;
    return n;
}

static PyObject *single_member(PyObject *self, PyObject *args) {
    Py_buffer in;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "y*n", &in, &size)) return NULL;
    if (size <= 0) {
        PyBuffer_Release(&in);
        Py_RETURN_NONE;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) {
        PyBuffer_Release(&in);
        return NULL;
    }
    z_stream stream;
    memset(&stream, 0, sizeof stream);
    int rc = inflateInit2(&stream, 31);  /* 16 + 15: gzip wrapper, 32 KiB window */
    int ok = 0;
    if (rc == Z_OK) {
        unsigned char *next_in = (unsigned char *)in.buf;
        unsigned char *next_out = (unsigned char *)PyBytes_AS_STRING(out);
        Py_ssize_t in_left = in.len, out_left = size;
        Py_BEGIN_ALLOW_THREADS
        while (rc == Z_OK) {
            /* zlib counts in uInt: feed inputs and outputs above 4 GiB in pieces. */
            if (stream.avail_in == 0 && in_left > 0) {
                stream.next_in = next_in;
                stream.avail_in = next_piece(&next_in, &in_left);
            }
            if (stream.avail_out == 0 && out_left > 0) {
                stream.next_out = next_out;
                stream.avail_out = next_piece(&next_out, &out_left);
            }
            rc = inflate(&stream, Z_NO_FLUSH);
        }
        Py_END_ALLOW_THREADS
        ok = rc == Z_STREAM_END && stream.avail_in == 0 && in_left == 0
             && stream.avail_out == 0 && out_left == 0;
        inflateEnd(&stream);
    }
    PyBuffer_Release(&in);
    if (!ok) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"single_member", single_member, METH_VARARGS, single_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_gunzip",
    "Single-member gzip into a buffer of known size (see ingest/runner.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__gunzip(void) { return PyModule_Create(&module); }
