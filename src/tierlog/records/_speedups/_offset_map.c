/* The log cleaner's offset map in C: the twin of tierlog.log.offset_map.DictTable (the
 * pure-Python reference, a dict), for SkimpyOffsetMap.
 *
 * A table of at most `slots` entries, open addressing with linear probing, as Kafka's
 * SkimpyOffsetMap: each entry is a key digest (the key itself when it has at most 16 bytes,
 * else its MD5, as the reference's dict keys) and the latest offset of that key. The array
 * starts small and doubles when half full, up to the power of two above slots * 9 / 8 (so a
 * log with few keys is mapped in the CPU caches); clear() is O(1): every entry carries the
 * generation it was written in.
 *
 * map_batch / filter_batch walk the records of one (already decompressed) batch as
 * tierlog.records.record_keys.read_keys does (Kafka's DefaultRecord schema; only length,
 * offsetDelta, keyLength, key and the first byte of valueLength are read; every read is
 * checked against its record's end) and raise the same errors for the same bytes:
 * tierlog.errors.CorruptRecordError / InvalidRecord.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MIN_RECORD_BODY 6
#define DIGEST 16

static PyObject *CorruptRecordError = NULL;
static PyObject *InvalidRecord = NULL;

/* ------------------------------------------------------------------------------ MD5 */
/* RFC 1321, for keys longer than 16 bytes (Kafka's digest of the offset map). */

typedef struct {
    uint32_t a, b, c, d;
} md5_state;

static const uint32_t MD5_K[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613,
    0xfd469501, 0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193,
    0xa679438e, 0x49b40821, 0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d,
    0x02441453, 0xd8a1e681, 0xe7d3fbc8, 0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed,
    0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a, 0xfffa3942, 0x8771f681, 0x6d9d6122,
    0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70, 0x289b7ec6, 0xeaa127fa,
    0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665, 0xf4292244,
    0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb,
    0xeb86d391,
};
static const uint8_t MD5_R[64] = {
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9,  14, 20, 5, 9,
    14, 20, 5, 9,  14, 20, 5, 9,  14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
    4, 11, 16, 23, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
};

static void
md5_block(md5_state *s, const uint8_t *p)
{
    uint32_t m[16];
    for (int i = 0; i < 16; i++)
        m[i] = (uint32_t)p[4 * i] | ((uint32_t)p[4 * i + 1] << 8) |
               ((uint32_t)p[4 * i + 2] << 16) | ((uint32_t)p[4 * i + 3] << 24);
    uint32_t a = s->a, b = s->b, c = s->c, d = s->d;
    for (int i = 0; i < 64; i++) {
        uint32_t f;
        int g;
        if (i < 16) {
            f = (b & c) | (~b & d);
            g = i;
        }
        else if (i < 32) {
            f = (d & b) | (~d & c);
            g = (5 * i + 1) & 15;
        }
        else if (i < 48) {
            f = b ^ c ^ d;
            g = (3 * i + 5) & 15;
        }
        else {
            f = c ^ (b | ~d);
            g = (7 * i) & 15;
        }
        uint32_t t = d;
        d = c;
        c = b;
        uint32_t x = a + f + MD5_K[i] + m[g];
        b = b + ((x << MD5_R[i]) | (x >> (32 - MD5_R[i])));
        a = t;
    }
    s->a += a;
    s->b += b;
    s->c += c;
    s->d += d;
}

static void
md5(const uint8_t *data, size_t len, uint8_t out[16])
{
    md5_state s = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476};
    size_t i = 0;
    for (; i + 64 <= len; i += 64)
        md5_block(&s, data + i);
    uint8_t tail[128];
    size_t rest = len - i;
    memcpy(tail, data + i, rest);
    tail[rest] = 0x80;
    size_t padded = rest + 1 + 8 <= 64 ? 64 : 128;
    memset(tail + rest + 1, 0, padded - rest - 1);
    uint64_t bits = (uint64_t)len * 8;
    for (int j = 0; j < 8; j++)
        tail[padded - 8 + j] = (uint8_t)(bits >> (8 * j));
    md5_block(&s, tail);
    if (padded == 128)
        md5_block(&s, tail + 64);
    uint32_t w[4] = {s.a, s.b, s.c, s.d};
    for (int j = 0; j < 16; j++)
        out[j] = (uint8_t)(w[j / 4] >> (8 * (j % 4)));
}

/* ------------------------------------------------------------------------------ the table */

typedef struct {
    uint8_t digest[DIGEST]; /* zero-padded */
    uint32_t gen;           /* 0: never used; valid when == the table's generation */
    uint8_t len;            /* digest length: the key's when <= 16, else 16 */
    int64_t offset;
} entry;

typedef struct {
    PyObject_HEAD
    entry *table;
    Py_ssize_t capacity;     /* a power of two, grown up to max_capacity */
    Py_ssize_t max_capacity; /* the power of two > slots * 9 / 8 */
    Py_ssize_t slots;        /* Kafka's slot count: the map holds at most this many */
    Py_ssize_t size;
    uint32_t gen;
} OffsetMap;

/* The first capacity: small tables stay in the CPU caches (a log with few keys). */
#define INITIAL_CAPACITY 1024

/* The digest of a key (as the reference's dict key): itself up to 16 bytes, else its MD5. */
static inline void
digest_of(const uint8_t *key, Py_ssize_t len, uint8_t out[DIGEST], uint8_t *out_len)
{
    memset(out, 0, DIGEST);
    if (len <= DIGEST) {
        memcpy(out, key, (size_t)len);
        *out_len = (uint8_t)len;
    }
    else {
        md5(key, (size_t)len, out);
        *out_len = DIGEST;
    }
}

static inline uint64_t
hash_of(const uint8_t d[DIGEST], uint8_t len)
{
    uint64_t a, b;
    memcpy(&a, d, 8);
    memcpy(&b, d + 8, 8);
    uint64_t h = (a ^ (b * 0x9E3779B97F4A7C15ULL) ^ len) * 0xC2B2AE3D27D4EB4FULL;
    return h ^ (h >> 31);
}

/* The entry of a digest, or the free entry where it goes. */
static inline entry *
find(OffsetMap *m, const uint8_t d[DIGEST], uint8_t len)
{
    Py_ssize_t mask = m->capacity - 1;
    Py_ssize_t i = (Py_ssize_t)(hash_of(d, len) & (uint64_t)mask);
    for (;;) {
        entry *e = &m->table[i];
        if (e->gen != m->gen)
            return e;
        if (e->len == len && memcmp(e->digest, d, DIGEST) == 0)
            return e;
        i = (i + 1) & mask;
    }
}

/* Double the capacity (the table at most half full stays fast); -1 with MemoryError. */
static int
grow(OffsetMap *m)
{
    Py_ssize_t capacity = m->capacity * 2;
    entry *table = PyMem_RawCalloc((size_t)capacity, sizeof(entry));
    if (table == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    entry *old = m->table;
    Py_ssize_t old_capacity = m->capacity;
    m->table = table;
    m->capacity = capacity;
    uint32_t gen = m->gen;
    for (Py_ssize_t i = 0; i < old_capacity; i++) {
        if (old[i].gen == gen) {
            entry *e = find(m, old[i].digest, old[i].len);
            *e = old[i];
        }
    }
    PyMem_RawFree(old);
    return 0;
}

/* Put; -1 with OverflowError when a new key finds every slot taken. */
static inline int
put_digest(OffsetMap *m, const uint8_t d[DIGEST], uint8_t len, int64_t offset)
{
    entry *e = find(m, d, len);
    if (e->gen != m->gen) {
        if (m->size >= m->slots) {
            PyErr_SetString(PyExc_OverflowError, "the offset map is full");
            return -1;
        }
        if (m->capacity < m->max_capacity && (m->size + 1) * 2 > m->capacity) {
            if (grow(m) < 0)
                return -1;
            e = find(m, d, len);
        }
        memcpy(e->digest, d, DIGEST);
        e->len = len;
        e->gen = m->gen;
        m->size++;
    }
    e->offset = offset;
    return 0;
}

static inline int64_t
get_digest(OffsetMap *m, const uint8_t d[DIGEST], uint8_t len)
{
    entry *e = find(m, d, len);
    return e->gen == m->gen ? e->offset : -1;
}

static int
OffsetMap_init(OffsetMap *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"slots", NULL};
    Py_ssize_t slots;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n", kwlist, &slots))
        return -1;
    if (slots < 1) {
        PyErr_SetString(PyExc_ValueError, "an offset map needs at least one slot");
        return -1;
    }
    Py_ssize_t capacity = 16;
    while (capacity <= slots + slots / 8) {
        if (capacity > PY_SSIZE_T_MAX / 4 / (Py_ssize_t)sizeof(entry)) {
            PyErr_NoMemory();
            return -1;
        }
        capacity *= 2;
    }
    self->max_capacity = capacity;
    if (capacity > INITIAL_CAPACITY)
        capacity = INITIAL_CAPACITY;
    entry *table = PyMem_RawCalloc((size_t)capacity, sizeof(entry));
    if (table == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    PyMem_RawFree(self->table);
    self->table = table;
    self->capacity = capacity;
    self->slots = slots;
    self->size = 0;
    self->gen = 1;
    return 0;
}

static void
OffsetMap_dealloc(OffsetMap *self)
{
    PyMem_RawFree(self->table);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
key_arg(PyObject *key, uint8_t d[DIGEST], uint8_t *len)
{
    char *data;
    Py_ssize_t n;
    if (PyBytes_AsStringAndSize(key, &data, &n) < 0)
        return -1;
    digest_of((const uint8_t *)data, n, d, len);
    return 0;
}

static PyObject *
OffsetMap_put(OffsetMap *self, PyObject *args)
{
    PyObject *key;
    long long offset;
    uint8_t d[DIGEST], len;
    if (!PyArg_ParseTuple(args, "OL", &key, &offset) || key_arg(key, d, &len) < 0)
        return NULL;
    if (put_digest(self, d, len, offset) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
OffsetMap_get(OffsetMap *self, PyObject *key)
{
    uint8_t d[DIGEST], len;
    if (key_arg(key, d, &len) < 0)
        return NULL;
    return PyLong_FromLongLong(get_digest(self, d, len));
}

static PyObject *
OffsetMap_clear(OffsetMap *self, PyObject *Py_UNUSED(ignored))
{
    self->size = 0;
    if (++self->gen == 0) { /* wrapped: forget every generation */
        memset(self->table, 0, (size_t)self->capacity * sizeof(entry));
        self->gen = 1;
    }
    Py_RETURN_NONE;
}

static Py_ssize_t
OffsetMap_len(OffsetMap *self)
{
    return self->size;
}

/* ------------------------------------------------------------------------------ records */

typedef struct {
    const uint8_t *data;
    Py_ssize_t pos, end, count, position;
    int64_t base_offset;
} records;

/* ZigZag varint (int32, at most 5 bytes) at data[*pos] below limit: 0, or -1 when it runs
 * past limit or is longer than 5 bytes. */
static inline int
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

/* Record i of r: its offset, key (NULL for a null key) and key size, and whether it has a
 * value; advances r->pos to the next record. -1 with the reference's exception. */
static inline int
next_record(records *r, Py_ssize_t i, int64_t *offset, const uint8_t **key,
            Py_ssize_t *key_size, int *has_value)
{
    const uint8_t *data = r->data;
    Py_ssize_t pos = r->pos, end = r->end;
    int64_t length, offset_delta, size;
    if (pos >= end) {
        PyErr_Format(InvalidRecord,
                     "record batch at %zd declares %zd records but its data ends after %zd",
                     r->position, r->count, i);
        return -1;
    }
    if (read_varint(data, end, &pos, &length) < 0) {
        PyErr_Format(CorruptRecordError, "record %zd of batch at %zd is truncated", i,
                     r->position);
        return -1;
    }
    if (length < MIN_RECORD_BODY || length > end - pos) {
        PyErr_Format(CorruptRecordError,
                     "record %zd of batch at %zd has length %lld, %zd bytes remain", i,
                     r->position, (long long)length, end - pos);
        return -1;
    }
    Py_ssize_t record_end = pos + (Py_ssize_t)length;
    pos += 1; /* attributes */
    while (pos < record_end && (data[pos] & 0x80)) /* timestampDelta: varlong, skipped */
        pos++;
    pos++;
    if (pos >= record_end || read_varint(data, record_end, &pos, &offset_delta) < 0 ||
        read_varint(data, record_end, &pos, &size) < 0) {
        PyErr_Format(CorruptRecordError, "record %zd of batch at %zd is truncated", i,
                     r->position);
        return -1;
    }
    if (size < 0) {
        *key = NULL;
        *key_size = 0;
    }
    else {
        if (size > record_end - pos) {
            PyErr_Format(CorruptRecordError,
                         "key of %lld bytes runs past record %zd of batch at %zd",
                         (long long)size, i, r->position);
            return -1;
        }
        *key = data + pos;
        *key_size = (Py_ssize_t)size;
        pos += (Py_ssize_t)size;
    }
    if (pos >= record_end) {
        PyErr_Format(CorruptRecordError, "record %zd of batch at %zd is truncated", i,
                     r->position);
        return -1;
    }
    *offset = r->base_offset + offset_delta;
    *has_value = data[pos] != 1; /* valueLength -1 (ZigZag 0x01): a null value */
    r->pos = record_end;
    return 0;
}

static int
records_end(records *r)
{
    if (r->pos != r->end) {
        PyErr_Format(InvalidRecord, "record batch at %zd has %zd bytes after its %zd records",
                     r->position, r->end - r->pos, r->count);
        return -1;
    }
    return 0;
}

static int
parse_records(PyObject *args, Py_buffer *buf, records *r, long long *extra)
{
    long long base_offset;
    if (!PyArg_ParseTuple(args, "y*nnnLnL", buf, &r->pos, &r->end, &r->count, &base_offset,
                          &r->position, extra))
        return -1;
    if (r->end > buf->len || r->pos < 0 || r->pos > r->end || r->count < 0) {
        PyBuffer_Release(buf);
        PyErr_SetString(PyExc_ValueError, "bad bounds");
        return -1;
    }
    r->data = (const uint8_t *)buf->buf;
    r->base_offset = base_offset;
    return 0;
}

/* map_batch(data, pos, end, count, base_offset, position, start) -> records read */
static PyObject *
OffsetMap_map_batch(OffsetMap *self, PyObject *args)
{
    Py_buffer buf;
    records r;
    long long start;
    if (parse_records(args, &buf, &r, &start) < 0)
        return NULL;
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; i < r.count; i++) {
        int64_t offset;
        const uint8_t *key;
        Py_ssize_t key_size;
        int has_value;
        if (next_record(&r, i, &offset, &key, &key_size, &has_value) < 0)
            goto done;
        if (key != NULL && offset >= start) {
            uint8_t d[DIGEST], len;
            digest_of(key, key_size, d, &len);
            if (put_digest(self, d, len, offset) < 0)
                goto done;
        }
    }
    if (records_end(&r) < 0)
        goto done;
    result = PyLong_FromSsize_t(r.count);
done:
    PyBuffer_Release(&buf);
    return result;
}

static int
append_index(PyObject *list, Py_ssize_t i)
{
    PyObject *idx = PyLong_FromSsize_t(i);
    if (idx == NULL)
        return -1;
    int rc = PyList_Append(list, idx);
    Py_DECREF(idx);
    return rc;
}

/* filter_batch(data, pos, end, count, base_offset, position, latest_offset)
 *   -> (kept indexes, or None when every record stays; indexes of the kept tombstones
 *       within the map; whether a tombstone past it stays; records without a key, dropped) */
static PyObject *
OffsetMap_filter_batch(OffsetMap *self, PyObject *args)
{
    Py_buffer buf;
    records r;
    long long latest;
    if (parse_records(args, &buf, &r, &latest) < 0)
        return NULL;
    PyObject *kept = NULL, *tombstones = NULL, *result = NULL;
    Py_ssize_t invalid = 0;
    int all_so_far = 1, later_tombstone = 0;
    kept = PyList_New(0);
    tombstones = PyList_New(0);
    if (kept == NULL || tombstones == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < r.count; i++) {
        int64_t offset;
        const uint8_t *key;
        Py_ssize_t key_size;
        int has_value, stays, within = 1;
        if (next_record(&r, i, &offset, &key, &key_size, &has_value) < 0)
            goto done;
        if (offset > latest) {
            stays = 1;
            within = 0;
            later_tombstone |= !has_value;
        }
        else if (key == NULL) {
            invalid++;
            stays = 0;
        }
        else {
            uint8_t d[DIGEST], len;
            digest_of(key, key_size, d, &len);
            stays = offset >= get_digest(self, d, len);
        }
        if (!stays) {
            if (all_so_far) { /* the first record dropped: list the ones kept before it */
                for (Py_ssize_t j = 0; j < i; j++)
                    if (append_index(kept, j) < 0)
                        goto done;
                all_so_far = 0;
            }
            continue;
        }
        if (!all_so_far && append_index(kept, i) < 0)
            goto done;
        if (within && !has_value && append_index(tombstones, i) < 0)
            goto done;
    }
    if (records_end(&r) < 0)
        goto done;
    result = Py_BuildValue("(OONn)", all_so_far ? Py_None : kept, tombstones,
                           PyBool_FromLong(later_tombstone), invalid);
done:
    Py_XDECREF(kept);
    Py_XDECREF(tombstones);
    PyBuffer_Release(&buf);
    return result;
}

/* ------------------------------------------------------------------------------ runs */
/* Batch header fields (Kafka's RecordBatch v2, big-endian) at a batch's start. */
#define HEADER_SIZE 61
#define LOG_OVERHEAD 12
#define CODEC_OR_CONTROL 0x27 /* compression codec bits and the control flag */
#define CODEC_CONTROL_OR_TXN 0x37 /* and the transactional flag */

static inline int64_t
be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

static inline int32_t
be32(const uint8_t *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     (uint32_t)p[3]);
}

/* The size of the complete batch at off (0: none, or a length no batch can have). */
static inline Py_ssize_t
batch_size(const uint8_t *data, Py_ssize_t len, Py_ssize_t off)
{
    if (len - off < HEADER_SIZE)
        return 0;
    int32_t length = be32(data + off + 8);
    if (length < HEADER_SIZE - LOG_OVERHEAD || (Py_ssize_t)length + LOG_OVERHEAD > len - off)
        return 0;
    return (Py_ssize_t)length + LOG_OVERHEAD;
}

/* map_run(chunk, off, start, stop_offset, max_entries) -> (off, records read, last offset)
 *
 * The map pass over the run of uncompressed data batches of chunk from byte off: each batch
 * wholly below start is skipped, every other one mapped (map_batch), as long as the table
 * keeps fewer than max_entries after it. Stops at the first batch it leaves to the caller
 * (compressed, control, at or past stop_offset, no room) or at the chunk's last complete
 * batch; returns where, the records read and the last offset of the last batch mapped
 * (-1: none). */
static PyObject *
OffsetMap_map_run(OffsetMap *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t off, max_entries;
    long long start, stop_offset;
    if (!PyArg_ParseTuple(args, "y*nLLn", &buf, &off, &start, &stop_offset, &max_entries))
        return NULL;
    const uint8_t *data = (const uint8_t *)buf.buf;
    Py_ssize_t len = buf.len, total = 0;
    int64_t last = -1;
    PyObject *result = NULL;
    if (off < 0 || off > len) {
        PyErr_SetString(PyExc_ValueError, "bad bounds");
        goto done;
    }
    for (;;) {
        Py_ssize_t size = batch_size(data, len, off);
        if (size == 0)
            break;
        const uint8_t *h = data + off;
        int attributes = (h[21] << 8) | h[22];
        if (attributes & CODEC_OR_CONTROL)
            break;
        int64_t base = be64(h);
        int64_t last_offset = base + be32(h + 23);
        int32_t count = be32(h + 57);
        if (last_offset < start) {
            off += size;
            continue;
        }
        if (base >= stop_offset || count < 0 || self->size + count >= max_entries)
            break;
        records r = {data, off + HEADER_SIZE, off + size, count, off, base};
        for (Py_ssize_t i = 0; i < count; i++) {
            int64_t offset;
            const uint8_t *key;
            Py_ssize_t key_size;
            int has_value;
            if (next_record(&r, i, &offset, &key, &key_size, &has_value) < 0)
                goto done;
            if (key != NULL && offset >= start) {
                uint8_t d[DIGEST], dlen;
                digest_of(key, key_size, d, &dlen);
                if (put_digest(self, d, dlen, offset) < 0)
                    goto done;
            }
        }
        if (records_end(&r) < 0)
            goto done;
        total += count;
        last = last_offset;
        off += size;
    }
    result = Py_BuildValue("(nnL)", off, total, (long long)last);
done:
    PyBuffer_Release(&buf);
    return result;
}

/* filter_run(chunk, off, latest_offset, upper_bound, active_producers)
 *   -> (off, bytes, records, records without a key, position of the last batch or -1)
 *
 * The clean pass over the run of uncompressed data batches of chunk from byte off whose
 * records all go (filter_batch keeps none) and that need not stay as an empty batch (not the
 * round's last, and not the last data batch of an active producer: active_producers maps a
 * producer id to (last data offset, epoch)), nor transactional (the cleaner tracks their
 * transactions). Stops at the first other batch, which the
 * caller handles, or at the chunk's last complete batch. */
static PyObject *
OffsetMap_filter_run(OffsetMap *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t off;
    long long latest, upper_bound;
    PyObject *producers;
    if (!PyArg_ParseTuple(args, "y*nLLO!", &buf, &off, &latest, &upper_bound, &PyDict_Type,
                          &producers))
        return NULL;
    const uint8_t *data = (const uint8_t *)buf.buf;
    Py_ssize_t len = buf.len, bytes = 0, total = 0, invalid = 0, last_pos = -1;
    PyObject *result = NULL;
    if (off < 0 || off > len) {
        PyErr_SetString(PyExc_ValueError, "bad bounds");
        goto done;
    }
    for (;;) {
        Py_ssize_t size = batch_size(data, len, off);
        if (size == 0)
            break;
        const uint8_t *h = data + off;
        int attributes = (h[21] << 8) | h[22];
        if (attributes & CODEC_CONTROL_OR_TXN)
            break;
        int64_t base = be64(h);
        int64_t last_offset = base + be32(h + 23);
        int32_t count = be32(h + 57);
        int64_t producer_id = be64(h + 43);
        if (count < 0 || last_offset + 1 == upper_bound || last_offset > latest)
            break;
        if (producer_id != -1 && PyDict_GET_SIZE(producers) > 0) {
            PyObject *pid = PyLong_FromLongLong(producer_id);
            if (pid == NULL)
                goto done;
            PyObject *entry = PyDict_GetItemWithError(producers, pid); /* borrowed */
            Py_DECREF(pid);
            if (entry == NULL && PyErr_Occurred())
                goto done;
            if (entry != NULL) {
                if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) < 1)
                    break; /* let the caller make sense of it */
                long long last_data = PyLong_AsLongLong(PyTuple_GET_ITEM(entry, 0));
                if (last_data == -1 && PyErr_Occurred())
                    goto done;
                if (last_data >= 0 && last_data == last_offset)
                    break; /* kept as an empty batch: the caller writes it */
            }
        }
        records r = {data, off + HEADER_SIZE, off + size, count, off, base};
        Py_ssize_t keyless = 0;
        int stays = 0;
        for (Py_ssize_t i = 0; i < count && !stays; i++) {
            int64_t offset;
            const uint8_t *key;
            Py_ssize_t key_size;
            int has_value;
            if (next_record(&r, i, &offset, &key, &key_size, &has_value) < 0)
                goto done;
            if (key == NULL)
                keyless++;
            else {
                uint8_t d[DIGEST], dlen;
                digest_of(key, key_size, d, &dlen);
                stays = offset >= get_digest(self, d, dlen);
            }
        }
        if (stays)
            break; /* something stays: the caller copies the batch */
        if (records_end(&r) < 0)
            goto done;
        bytes += size;
        total += count;
        invalid += keyless;
        last_pos = off;
        off += size;
    }
    result = Py_BuildValue("(nnnnn)", off, bytes, total, invalid, last_pos);
done:
    PyBuffer_Release(&buf);
    return result;
}

/* ------------------------------------------------------------------------------ rebuild */

/* Unsigned LEB128 of v at out; its length. */
static inline Py_ssize_t
write_uvarint(uint8_t *out, uint64_t v)
{
    Py_ssize_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

/* ZigZag varlong at data[*pos] below limit: 0, or -1 when it runs past limit or is too long. */
static inline int
read_varlong(const uint8_t *data, Py_ssize_t limit, Py_ssize_t *pos, int64_t *out)
{
    uint64_t v = 0;
    Py_ssize_t p = *pos;
    for (unsigned i = 0; i < 10; i++) {
        if (p >= limit)
            return -1;
        uint8_t b = data[p++];
        v |= (uint64_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            *pos = p;
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            return 0;
        }
    }
    return -1;
}

/* rebuild_records(data, pos, end, count, position, kept, base_timestamp, horizon,
 *                 log_append_time) -> (records, new base timestamp, max timestamp)
 *
 * The records section of a cleaned batch keeping the records `kept` (ascending indexes) of
 * an uncompressed one, byte for byte what RecordBatchBuilder writes for them (the Python
 * path: read_records, then append each): every record's timestamp re-based on the new base
 * timestamp (horizon when >= 0, else the first kept record's), its attributes byte 0, the
 * rest of it (offsetDelta, key, value, headers) copied. With log_append_time >= 0 every
 * record's timestamp is it (the batch's maxTimestamp, as the decoder reads it). */
static PyObject *
py_rebuild_records(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer buf;
    Py_ssize_t pos, end, count, position;
    PyObject *kept;
    long long base_ts, horizon, log_append;
    if (!PyArg_ParseTuple(args, "y*nnnnO!LLL", &buf, &pos, &end, &count, &position,
                          &PyList_Type, &kept, &base_ts, &horizon, &log_append))
        return NULL;
    PyObject *result = NULL, *out = NULL;
    const uint8_t *data = (const uint8_t *)buf.buf;
    if (end > buf.len || pos < 0 || pos > end || count < 0) {
        PyErr_SetString(PyExc_ValueError, "bad bounds");
        goto done;
    }
    Py_ssize_t n_kept = PyList_GET_SIZE(kept);
    /* Each record grows by at most 18 bytes (two varints of up to 10 bytes replace ones of
     * at least 1). */
    out = PyBytes_FromStringAndSize(NULL, (end - pos) + 18 * n_kept + 1);
    if (out == NULL)
        goto done;
    uint8_t *w = (uint8_t *)PyBytes_AS_STRING(out);
    Py_ssize_t written = 0, k = 0;
    int64_t new_base = horizon, max_ts = -1;
    int first = 1;
    for (Py_ssize_t i = 0; i < count && k < n_kept; i++) {
        int64_t length;
        Py_ssize_t p = pos;
        if (read_varint(data, end, &p, &length) < 0 || length < MIN_RECORD_BODY ||
            length > end - p) {
            PyErr_Format(CorruptRecordError, "record %zd of batch at %zd is truncated", i,
                         position);
            goto done;
        }
        Py_ssize_t record_end = p + (Py_ssize_t)length;
        Py_ssize_t want = PyLong_AsSsize_t(PyList_GET_ITEM(kept, k));
        if (want == -1 && PyErr_Occurred())
            goto done;
        if (want == i) {
            Py_ssize_t q = p + 1; /* attributes */
            int64_t delta;
            if (read_varlong(data, record_end, &q, &delta) < 0) {
                PyErr_Format(CorruptRecordError, "record %zd of batch at %zd is truncated", i,
                             position);
                goto done;
            }
            int64_t ts = log_append >= 0 ? log_append : base_ts + delta;
            if (first) {
                if (new_base < 0)
                    new_base = ts;
                max_ts = ts;
                first = 0;
            }
            else if (ts > max_ts)
                max_ts = ts;
            int64_t nd = ts - new_base;
            uint8_t head[11];
            head[0] = 0; /* attributes */
            Py_ssize_t hn = 1 + write_uvarint(head + 1, ((uint64_t)nd << 1) ^ (uint64_t)(nd >> 63));
            Py_ssize_t rest = record_end - q;
            Py_ssize_t body = hn + rest;
            written += write_uvarint(w + written, (uint64_t)body << 1);
            memcpy(w + written, head, (size_t)hn);
            written += hn;
            memcpy(w + written, data + q, (size_t)rest);
            written += rest;
            k++;
        }
        pos = record_end;
    }
    if (k != n_kept) {
        PyErr_SetString(PyExc_ValueError, "kept indexes past the batch's records");
        goto done;
    }
    if (_PyBytes_Resize(&out, written) < 0)
        goto done;
    result = Py_BuildValue("(OLL)", out, (long long)new_base, (long long)max_ts);
done:
    Py_XDECREF(out);
    PyBuffer_Release(&buf);
    return result;
}

static PyObject *
py_md5(PyObject *self, PyObject *arg)
{
    (void)self;
    Py_buffer buf;
    if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE) < 0)
        return NULL;
    uint8_t out[16];
    md5((const uint8_t *)buf.buf, (size_t)buf.len, out);
    PyBuffer_Release(&buf);
    return PyBytes_FromStringAndSize((const char *)out, 16);
}

static PyMethodDef OffsetMap_methods[] = {
    {"put", (PyCFunction)OffsetMap_put, METH_VARARGS,
     "put(key, offset): map key (its digest) to offset."},
    {"get", (PyCFunction)OffsetMap_get, METH_O, "get(key) -> the offset mapped, or -1."},
    {"clear", (PyCFunction)OffsetMap_clear, METH_NOARGS, "Forget every entry."},
    {"map_batch", (PyCFunction)OffsetMap_map_batch, METH_VARARGS,
     "map_batch(data, pos, end, count, base_offset, position, start) -> records read"},
    {"filter_batch", (PyCFunction)OffsetMap_filter_batch, METH_VARARGS,
     "filter_batch(data, pos, end, count, base_offset, position, latest_offset) -> "
     "(kept or None, kept tombstones within the map, tombstone past it, keyless records)"},
    {"map_run", (PyCFunction)OffsetMap_map_run, METH_VARARGS,
     "map_run(chunk, off, start, stop_offset, max_entries) -> (off, records, last offset)"},
    {"filter_run", (PyCFunction)OffsetMap_filter_run, METH_VARARGS,
     "filter_run(chunk, off, latest_offset, upper_bound, active_producers) -> "
     "(off, bytes, records, keyless records, last batch position)"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods OffsetMap_as_sequence = {
    .sq_length = (lenfunc)OffsetMap_len,
};

static PyTypeObject OffsetMapType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tierlog.records._speedups._offset_map.OffsetMap",
    .tp_basicsize = sizeof(OffsetMap),
    .tp_dealloc = (destructor)OffsetMap_dealloc,
    .tp_as_sequence = &OffsetMap_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "OffsetMap(slots): the log cleaner's key digest -> offset table (C twin of "
              "tierlog.log.offset_map.DictTable).",
    .tp_methods = OffsetMap_methods,
    .tp_init = (initproc)OffsetMap_init,
    .tp_new = PyType_GenericNew,
};

static PyMethodDef module_methods[] = {
    {"md5", py_md5, METH_O, "md5(data) -> the 16-byte MD5 digest (the map's digest of long keys)"},
    {"rebuild_records", py_rebuild_records, METH_VARARGS,
     "rebuild_records(data, pos, end, count, position, kept, base_timestamp, horizon, "
     "log_append_time) -> (records, base timestamp, max timestamp)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "tierlog.records._speedups._offset_map",
    "C twin of tierlog.log.offset_map.DictTable (the log cleaner's offset map).", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__offset_map(void)
{
    PyObject *errors = PyImport_ImportModule("tierlog.errors");
    if (errors == NULL)
        return NULL;
    CorruptRecordError = PyObject_GetAttrString(errors, "CorruptRecordError");
    InvalidRecord = PyObject_GetAttrString(errors, "InvalidRecord");
    Py_DECREF(errors);
    if (CorruptRecordError == NULL || InvalidRecord == NULL)
        return NULL;
    if (PyType_Ready(&OffsetMapType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&OffsetMapType);
    if (PyModule_AddObject(m, "OffsetMap", (PyObject *)&OffsetMapType) < 0) {
        Py_DECREF(&OffsetMapType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
