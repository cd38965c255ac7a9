/* The record loop of tierlog.records.record_keys.read_keys, in C: the offsets, keys and
 * "has a value" flags of the records of one (already decompressed) batch, for the log cleaner.
 *
 * Each record (Kafka's schema, DefaultRecord.java):
 *   length: varint, attributes: int8, timestampDelta: varlong, offsetDelta: varint,
 *   keyLength: varint, key: byte[], valueLength: varint, value: byte[], headers...
 * Only length, offsetDelta, keyLength, key and the first byte of valueLength are read; every
 * read is checked against the end of its record. Errors: tierlog.errors.CorruptRecordError /
 * InvalidRecord, as the pure-Python reference raises them (same classes, same conditions).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define MIN_RECORD_BODY 6

static PyObject *CorruptRecordError = NULL;
static PyObject *InvalidRecord = NULL;

/* ZigZag varint (int32, at most 5 bytes) at data[*pos] below limit: 0, or -1 when it runs
 * past limit or is longer than 5 bytes. */
static int
read_varint(const uint8_t *data, Py_ssize_t limit, Py_ssize_t *pos, int64_t *out)
{
    uint32_t v = 0;
    Py_ssize_t p = *pos;
    for (unsigned i = 0; i < 5; i++) {
        if (p >= limit)
            return -1;
        uint8_t b = data[p++];
        v |= (uint32_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            *pos = p;
            *out = (int64_t)((int32_t)(v >> 1) ^ -(int32_t)(v & 1));
            return 0;
        }
    }
    return -1;
}

static PyObject *
read_keys(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer buf;
    Py_ssize_t pos, end, count, position;
    long long base_offset;
    if (!PyArg_ParseTuple(args, "y*nnnLn", &buf, &pos, &end, &count, &base_offset, &position))
        return NULL;
    PyObject *offsets = NULL, *keys = NULL, *has_values = NULL, *result = NULL;
    const uint8_t *data = (const uint8_t *)buf.buf;
    if (end > buf.len || pos < 0 || pos > end || count < 0) {
        PyErr_SetString(PyExc_ValueError, "bad bounds");
        goto done;
    }
    offsets = PyList_New(count);
    keys = PyList_New(count);
    has_values = PyList_New(count);
    if (offsets == NULL || keys == NULL || has_values == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, offset_delta, key_size;
        if (pos >= end) {
            PyErr_Format(InvalidRecord,
                         "record batch at %zd declares %zd records but its data ends after %zd",
                         position, count, i);
            goto done;
        }
        if (read_varint(data, end, &pos, &length) < 0) {
            PyErr_Format(CorruptRecordError, "record %zd of batch at %zd is truncated", i,
                         position);
            goto done;
        }
        if (length < MIN_RECORD_BODY || length > end - pos) {
            PyErr_Format(CorruptRecordError,
                         "record %zd of batch at %zd has length %lld, %zd bytes remain", i,
                         position, (long long)length, end - pos);
            goto done;
        }
        Py_ssize_t record_end = pos + (Py_ssize_t)length;
        pos += 1; /* attributes */
        /* timestampDelta: varlong, skipped */
        while (pos < record_end && (data[pos] & 0x80))
            pos++;
        pos++;
        if (pos >= record_end || read_varint(data, record_end, &pos, &offset_delta) < 0 ||
            read_varint(data, record_end, &pos, &key_size) < 0) {
            PyErr_Format(CorruptRecordError, "record %zd of batch at %zd is truncated", i,
                         position);
            goto done;
        }
        PyObject *key;
        if (key_size < 0) {
            key = Py_None;
            Py_INCREF(key);
        }
        else {
            if (key_size > record_end - pos) {
                PyErr_Format(CorruptRecordError,
                             "key of %lld bytes runs past record %zd of batch at %zd",
                             (long long)key_size, i, position);
                goto done;
            }
            key = PyBytes_FromStringAndSize((const char *)data + pos, (Py_ssize_t)key_size);
            if (key == NULL)
                goto done;
            pos += (Py_ssize_t)key_size;
        }
        PyList_SET_ITEM(keys, i, key);
        if (pos >= record_end) {
            PyErr_Format(CorruptRecordError, "record %zd of batch at %zd is truncated", i,
                         position);
            goto done;
        }
        PyObject *offset = PyLong_FromLongLong(base_offset + offset_delta);
        if (offset == NULL)
            goto done;
        PyList_SET_ITEM(offsets, i, offset);
        /* valueLength is -1 (ZigZag 0x01) for a null value */
        PyObject *flag = data[pos] != 1 ? Py_True : Py_False;
        Py_INCREF(flag);
        PyList_SET_ITEM(has_values, i, flag);
        pos = record_end;
    }
    if (pos != end) {
        PyErr_Format(InvalidRecord, "record batch at %zd has %zd bytes after its %zd records",
                     position, end - pos, count);
        goto done;
    }
    result = PyTuple_Pack(3, offsets, keys, has_values);
done:
    /* Lists with unset (NULL) items are safe to release: list_dealloc skips NULLs. */
    Py_XDECREF(offsets);
    Py_XDECREF(keys);
    Py_XDECREF(has_values);
    PyBuffer_Release(&buf);
    return result;
}

static PyMethodDef methods[] = {
    {"read_keys", read_keys, METH_VARARGS,
     "read_keys(data, pos, end, count, base_offset, position) -> (offsets, keys, has_values)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "tierlog.records._speedups._keys",
    "C twin of the record loop of tierlog.records.record_keys.read_keys.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__keys(void)
{
    PyObject *errors = PyImport_ImportModule("tierlog.errors");
    if (errors == NULL)
        return NULL;
    CorruptRecordError = PyObject_GetAttrString(errors, "CorruptRecordError");
    InvalidRecord = PyObject_GetAttrString(errors, "InvalidRecord");
    Py_DECREF(errors);
    if (CorruptRecordError == NULL || InvalidRecord == NULL)
        return NULL;
    return PyModule_Create(&module);
}
