/* The per-record loop of tierlog.spark.arrow_decode.PartitionDecoder, in C.
 *
 * Input: the records sections of the selected batches (already decompressed), all in one
 * buffer, and per batch seven int64s:
 *   section start, section end, recordsCount, baseOffset, baseTimestamp, maxTimestamp,
 *   logAppendTime (0/1).
 * Each record (Kafka's schema, DefaultRecord.java):
 *   length: varint, attributes: int8, timestampDelta: varlong, offsetDelta: varint,
 *   keyLength: varint, key: byte[], valueLength: varint, value: byte[],
 *   headerCount: varint, headers...
 * Output: Arrow buffers of the rows with start_offset <= offset < end_offset (see _decode.pyi).
 *
 * Three passes, in the order the numpy path checks things, so malformed input raises the
 * same error class: (1) follow the chain of length varints of every batch, (2) decode and
 * validate every record's fields, keeping the rows in range, (3) copy keys and values into
 * contiguous Arrow binary buffers. Every read is checked against the end of the buffer.
 * Errors: tierlog.errors.CorruptRecordError / InvalidRecord, looked up at import time.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MIN_RECORD_BODY 6 /* attributes .. headerCount, one byte each */
#define BATCH_FIELDS 7

static PyObject *CorruptRecordError = NULL;
static PyObject *InvalidRecord = NULL;

/* ZigZag varint of up to 10 bytes (varlong) at data[*pos], as the numpy path reads it: a
 * position at or past the end reads the buffer's last byte (limit > 0; the caller's
 * "fields run past the record" check rejects the result). Returns 0, or -1 when longer than
 * 10 bytes. */
static int
read_varlong(const uint8_t *data, Py_ssize_t limit, Py_ssize_t *pos, int64_t *out)
{
    uint64_t v = 0;
    unsigned shift = 0;
    Py_ssize_t p = *pos;
    for (;;) {
        uint8_t b = data[p < limit ? p : limit - 1];
        p++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80))
            break;
        shift += 7;
        if (shift > 63)
            return -1;
    }
    *pos = p;
    *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
    return 0;
}

/* ZigZag varint (int32, at most 5 bytes, no bits past 32). 0 / -1 (truncated) / -2 (bad). */
static int
read_varint32(const uint8_t *data, Py_ssize_t limit, Py_ssize_t *pos, int64_t *out)
{
    uint32_t v = 0;
    Py_ssize_t p = *pos;
    for (unsigned i = 0; i < 5; i++) {
        if (p < 0 || p >= limit)
            return -1;
        uint8_t b = data[p++];
        if (i == 4 && (b & 0xF0))
            return -2;
        v |= (uint32_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            *pos = p;
            *out = (int64_t)((int32_t)(v >> 1) ^ -(int32_t)(v & 1));
            return 0;
        }
    }
    return -2;
}

typedef struct {
    int64_t offset, ts_us;
    int32_t ts_type;
    int64_t kpos, klen, vpos, vlen, hpos, hcount, end, p;
} row_t;

static PyObject *
decode_records(PyObject *self, PyObject *args)
{
    Py_buffer data_view, batch_view;
    long long start_offset, end_offset;
    int include_headers;
    if (!PyArg_ParseTuple(args, "y*y*LLp:decode_records", &data_view, &batch_view,
                          &start_offset, &end_offset, &include_headers))
        return NULL;

    PyObject *result = NULL;
    int64_t *starts = NULL;
    row_t *rows = NULL;
    Py_ssize_t *ends = NULL;
    PyObject *offsets = NULL, *timestamps = NULL, *ts_types = NULL, *hdrs = NULL;
    PyObject *koffs = NULL, *kdata = NULL, *kvalid = NULL;
    PyObject *voffs = NULL, *vdata = NULL, *vvalid = NULL;

    const uint8_t *data = (const uint8_t *)data_view.buf;
    const Py_ssize_t limit = data_view.len;
    if (batch_view.len % (Py_ssize_t)(BATCH_FIELDS * sizeof(int64_t)) != 0) {
        PyErr_SetString(PyExc_ValueError, "batches must hold 7 int64s per batch");
        goto done;
    }
    const Py_ssize_t nb = batch_view.len / (Py_ssize_t)(BATCH_FIELDS * sizeof(int64_t));
    int64_t *batches = PyMem_Malloc(batch_view.len ? (size_t)batch_view.len : 1);
    if (batches == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(batches, batch_view.buf, (size_t)batch_view.len); /* alignment-safe copy */

    Py_ssize_t total = 0;
    for (Py_ssize_t b = 0; b < nb; b++) {
        int64_t count = batches[b * BATCH_FIELDS + 2];
        int64_t s = batches[b * BATCH_FIELDS], e = batches[b * BATCH_FIELDS + 1];
        if (count < 0 || s < 0 || e > limit || s > e) {
            PyErr_SetString(PyExc_ValueError, "batch section out of the buffer");
            goto free_batches;
        }
        if (count > limit - total) { /* every record takes at least 7 bytes */
            PyErr_Format(CorruptRecordError, "batch at offset %lld declares more records "
                         "than its bytes can hold", (long long)batches[b * BATCH_FIELDS + 3]);
            goto free_batches;
        }
        total += (Py_ssize_t)count;
    }
    starts = PyMem_Malloc(total ? (size_t)total * sizeof(int64_t) : 1);
    rows = PyMem_Malloc(total ? (size_t)total * sizeof(row_t) : 1);
    ends = PyMem_Malloc(nb ? (size_t)nb * sizeof(Py_ssize_t) : 1);
    if (starts == NULL || rows == NULL || ends == NULL) {
        PyErr_NoMemory();
        goto free_batches;
    }

    /* Pass 1: the chain of record lengths (record i+1 starts where record i ends). */
    Py_ssize_t k = 0;
    for (Py_ssize_t b = 0; b < nb; b++) {
        const int64_t *h = batches + b * BATCH_FIELDS;
        Py_ssize_t pos = (Py_ssize_t)h[0];
        for (int64_t i = 0; i < h[2]; i++) {
            int64_t length;
            Py_ssize_t body = pos;
            int rc = read_varint32(data, limit, &body, &length);
            if (rc == -1) {
                PyErr_Format(CorruptRecordError, "batch at offset %lld is truncated",
                             (long long)h[3]);
                goto free_batches;
            }
            if (rc == -2) {
                PyErr_Format(CorruptRecordError, "record length varint of batch at offset "
                             "%lld is too long", (long long)h[3]);
                goto free_batches;
            }
            if (length < MIN_RECORD_BODY) {
                PyErr_Format(CorruptRecordError, "record of batch at offset %lld has length "
                             "%lld", (long long)h[3], (long long)length);
                goto free_batches;
            }
            starts[k++] = pos;
            if (length > limit - body) {
                /* Past the whole buffer: the next read would be truncated. */
                if (i + 1 < h[2]) {
                    PyErr_Format(CorruptRecordError, "batch at offset %lld is truncated",
                                 (long long)h[3]);
                    goto free_batches;
                }
                pos = limit + 1;
                break;
            }
            pos = body + (Py_ssize_t)length;
        }
        ends[b] = pos;
    }
    for (Py_ssize_t b = 0; b < nb; b++) {
        const int64_t *h = batches + b * BATCH_FIELDS;
        if (ends[b] != h[1]) {
            PyErr_Format(InvalidRecord, "record batch at offset %lld: its %lld records do not "
                         "end where the batch does", (long long)h[3], (long long)h[2]);
            goto free_batches;
        }
    }

    /* Pass 2a: every record's fields (the numpy path decodes one field of all records at
     * a time, so a too-long varint anywhere wins over the checks of pass 2b). Positions
     * saturate past the buffer instead of overflowing. */
    for (k = 0; k < total; k++) {
        row_t *r = &rows[k];
        Py_ssize_t p = (Py_ssize_t)starts[k];
        int64_t length, ts_delta, off_delta;
        read_varint32(data, limit, &p, &length); /* checked in pass 1 */
        r->end = p + (Py_ssize_t)length;
        p += 1; /* attributes (int8, unused) */
        if (read_varlong(data, limit, &p, &ts_delta) ||
            read_varlong(data, limit, &p, &off_delta) || read_varlong(data, limit, &p, &r->klen))
            goto too_long;
        r->kpos = p;
        if (r->klen > 0)
            p = r->klen > limit ? limit + 1 : p + (Py_ssize_t)r->klen;
        if (read_varlong(data, limit, &p, &r->vlen))
            goto too_long;
        r->vpos = p;
        if (r->vlen > 0)
            p = r->vlen > limit ? limit + 1 : p + (Py_ssize_t)r->vlen;
        r->hpos = p;
        if (read_varlong(data, limit, &p, &r->hcount))
            goto too_long;
        if (p > limit + 1)
            p = limit + 1;
        r->p = p;
        r->offset = off_delta; /* deltas for now: pass 2b adds the batch's bases */
        r->ts_us = ts_delta;
    }

    /* Pass 2b: validate in record order; keep the rows in range (in place: n <= k). */
    Py_ssize_t n = 0, klen_total = 0, vlen_total = 0, knulls = 0, vnulls = 0, nh = 0;
    k = 0;
    for (Py_ssize_t b = 0; b < nb; b++) {
        const int64_t *h = batches + b * BATCH_FIELDS;
        for (int64_t i = 0; i < h[2]; i++, k++) {
            row_t r = rows[k];
            if (r.klen < -1 || r.vlen < -1) {
                PyErr_Format(InvalidRecord, "batch at offset %lld: record with a negative "
                             "key/value length", (long long)h[3]);
                goto free_batches;
            }
            if (r.hcount < 0) {
                PyErr_Format(InvalidRecord, "batch at offset %lld: found invalid number of "
                             "record headers %lld", (long long)h[3], (long long)r.hcount);
                goto free_batches;
            }
            if (r.p > r.end) {
                PyErr_Format(CorruptRecordError, "batch at offset %lld: a record's fields run "
                             "past its length", (long long)h[3]);
                goto free_batches;
            }
            if (r.hcount == 0 && r.p != r.end) {
                PyErr_Format(InvalidRecord, "batch at offset %lld: invalid record size: %lld "
                             "bytes left over", (long long)h[3], (long long)(r.end - r.p));
                goto free_batches;
            }
            r.offset = (int64_t)((uint64_t)h[3] + (uint64_t)r.offset);
            if (r.offset < start_offset || r.offset >= end_offset)
                continue;
            int64_t ts = h[6] ? h[5] : (int64_t)((uint64_t)h[4] + (uint64_t)r.ts_us);
            r.ts_us = (int64_t)((uint64_t)ts * 1000u);
            r.ts_type = h[6] ? 1 : 0;
            if (r.klen < 0)
                knulls++;
            else
                klen_total += (Py_ssize_t)r.klen;
            if (r.vlen < 0)
                vnulls++;
            else
                vlen_total += (Py_ssize_t)r.vlen;
            if (r.hcount > 0)
                nh++;
            rows[n++] = r;
        }
    }
    if (klen_total > INT32_MAX || vlen_total > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "keys or values exceed 2 GiB in one Arrow array");
        goto free_batches;
    }

    /* Pass 3: the Arrow buffers. */
    offsets = PyBytes_FromStringAndSize(NULL, n * 8);
    timestamps = PyBytes_FromStringAndSize(NULL, n * 8);
    ts_types = PyBytes_FromStringAndSize(NULL, n * 4);
    koffs = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    voffs = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    kdata = PyBytes_FromStringAndSize(NULL, klen_total);
    vdata = PyBytes_FromStringAndSize(NULL, vlen_total);
    hdrs = PyBytes_FromStringAndSize(NULL, include_headers ? nh * 24 : 0);
    Py_ssize_t bitmap = (n + 7) / 8;
    if (knulls) {
        kvalid = PyBytes_FromStringAndSize(NULL, bitmap);
    } else {
        kvalid = Py_None;
        Py_INCREF(Py_None);
    }
    if (vnulls) {
        vvalid = PyBytes_FromStringAndSize(NULL, bitmap);
    } else {
        vvalid = Py_None;
        Py_INCREF(Py_None);
    }
    if (!offsets || !timestamps || !ts_types || !koffs || !voffs || !kdata || !vdata ||
        !hdrs || !kvalid || !vvalid)
        goto free_batches;
    {
        int64_t *o = (int64_t *)PyBytes_AS_STRING(offsets);
        int64_t *t = (int64_t *)PyBytes_AS_STRING(timestamps);
        int32_t *tt = (int32_t *)PyBytes_AS_STRING(ts_types);
        int32_t *ko = (int32_t *)PyBytes_AS_STRING(koffs);
        int32_t *vo = (int32_t *)PyBytes_AS_STRING(voffs);
        char *kd = PyBytes_AS_STRING(kdata);
        char *vd = PyBytes_AS_STRING(vdata);
        int64_t *hd = (int64_t *)PyBytes_AS_STRING(hdrs);
        uint8_t *kv = knulls ? (uint8_t *)PyBytes_AS_STRING(kvalid) : NULL;
        uint8_t *vv = vnulls ? (uint8_t *)PyBytes_AS_STRING(vvalid) : NULL;
        if (kv)
            memset(kv, 0, (size_t)bitmap);
        if (vv)
            memset(vv, 0, (size_t)bitmap);
        int32_t kat = 0, vat = 0;
        Py_ssize_t hat = 0;
        ko[0] = 0;
        vo[0] = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            const row_t *r = &rows[i];
            o[i] = r->offset;
            t[i] = r->ts_us;
            tt[i] = r->ts_type;
            if (r->klen >= 0) {
                memcpy(kd + kat, data + r->kpos, (size_t)r->klen);
                kat += (int32_t)r->klen;
                if (kv)
                    kv[i >> 3] |= (uint8_t)(1u << (i & 7));
            }
            ko[i + 1] = kat;
            if (r->vlen >= 0) {
                memcpy(vd + vat, data + r->vpos, (size_t)r->vlen);
                vat += (int32_t)r->vlen;
                if (vv)
                    vv[i >> 3] |= (uint8_t)(1u << (i & 7));
            }
            vo[i + 1] = vat;
            if (include_headers && r->hcount > 0) {
                hd[hat++] = (int64_t)i;
                hd[hat++] = r->hpos;
                hd[hat++] = r->end;
            }
        }
    }
    result = Py_BuildValue("(nOOOOOOnOOOnO)", n, offsets, timestamps, ts_types, koffs, kdata,
                           kvalid, knulls, voffs, vdata, vvalid, vnulls, hdrs);

    goto free_batches;
too_long:
    PyErr_SetString(CorruptRecordError, "varint longer than 10 bytes");
free_batches:
    PyMem_Free(batches);
done:
    PyMem_Free(starts);
    PyMem_Free(rows);
    PyMem_Free(ends);
    Py_XDECREF(offsets);
    Py_XDECREF(timestamps);
    Py_XDECREF(ts_types);
    Py_XDECREF(koffs);
    Py_XDECREF(kdata);
    Py_XDECREF(kvalid);
    Py_XDECREF(voffs);
    Py_XDECREF(vdata);
    Py_XDECREF(vvalid);
    Py_XDECREF(hdrs);
    PyBuffer_Release(&data_view);
    PyBuffer_Release(&batch_view);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_records", decode_records, METH_VARARGS,
     "decode_records(data, batches, start_offset, end_offset, include_headers, /)\n--\n\n"
     "Decode the records of the given batch sections into Arrow buffers (see _decode.pyi)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "tierlog.records._speedups._decode",
    "C twin of the per-record loop of tierlog.spark.arrow_decode.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__decode(void)
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
