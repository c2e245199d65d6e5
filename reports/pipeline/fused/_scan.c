/*
 * The fused engine's line scanner: history lines (JSON lines, DESIGN.md "History format") turned
 * into flat columns at C speed, without the GIL, one chunk of the file per call.
 *
 * Why: parsing was most of the fused engine's time. pyarrow's JSON reader spent ~29 CPU-seconds
 * on an 8M-operation history (1.8 GB), about 60 MB/s per core, building generic nested arrays the
 * loader then flattened and dictionary-encoded again. A client line has one fixed shape, so a
 * scanner for exactly that shape writes the flat columns and the dictionary codes directly.
 *
 * The scanner only takes what it is sure of. A "plain" line is a JSON object whose fields are
 * the client fields with their ordinary types (integers for index, time and process; ASCII
 * strings without escapes; a value that is null or one message object with the message fields).
 * Anything else -- nemesis lines, drains (list values), escapes, non-ASCII bytes, floats,
 * booleans where integers go, duplicate keys, missing fields, malformed JSON -- is returned as a
 * "special" line (its byte range and line number), and Python handles it with the reference rules
 * (load.py: `line_problem`, `_flat_rows`). So the scanner never has to reproduce a lenient rule:
 * its rows equal the reference rows by construction, and the tests check that they do.
 *
 * scan(buffer, start, end) -> dict, where [start, end) begins at a line start and ends after a
 * newline (or at the end of the buffer). See `scan` at the bottom for the returned columns.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *p;
    uint32_t n;
} Text;

/* ------------------------------------------------------------------ dictionary (interning) */

typedef struct {
    Text *values;      /* distinct strings in code order; they point into the scanned buffer */
    int32_t count, values_cap;
    int32_t *slots;    /* open addressing: code + 1, 0 = empty */
    uint32_t *hashes;  /* hash of each code's value */
    uint32_t mask;
} Interner;

static uint32_t hash_text(const char *p, uint32_t n) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (uint32_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 16777619u;
    }
    return h;
}

static int interner_init(Interner *d) {
    d->count = 0;
    d->values_cap = 64;
    d->mask = 127;
    d->values = malloc(sizeof(Text) * d->values_cap);
    d->hashes = malloc(sizeof(uint32_t) * d->values_cap);
    d->slots = calloc(d->mask + 1, sizeof(int32_t));
    return d->values && d->hashes && d->slots ? 0 : -1;
}

static void interner_free(Interner *d) {
    free(d->values);
    free(d->hashes);
    free(d->slots);
}

static int interner_grow(Interner *d) {
    uint32_t mask = d->mask * 2 + 1;
    int32_t *slots = calloc(mask + 1, sizeof(int32_t));
    if (!slots) return -1;
    for (int32_t code = 0; code < d->count; code++) {
        uint32_t i = d->hashes[code] & mask;
        while (slots[i]) i = (i + 1) & mask;
        slots[i] = code + 1;
    }
    free(d->slots);
    d->slots = slots;
    d->mask = mask;
    return 0;
}

/* the code of text t, added when new; -1 when out of memory */
static int32_t intern(Interner *d, Text t) {
    uint32_t h = hash_text(t.p, t.n);
    uint32_t i = h & d->mask;
    while (d->slots[i]) {
        int32_t code = d->slots[i] - 1;
        Text v = d->values[code];
        if (d->hashes[code] == h && v.n == t.n && memcmp(v.p, t.p, t.n) == 0) return code;
        i = (i + 1) & d->mask;
    }
    if (d->count == d->values_cap) {
        int32_t cap = d->values_cap * 2;
        Text *values = realloc(d->values, sizeof(Text) * cap);
        if (!values) return -1;
        d->values = values;
        uint32_t *hashes = realloc(d->hashes, sizeof(uint32_t) * cap);
        if (!hashes) return -1;
        d->hashes = hashes;
        d->values_cap = cap;
    }
    int32_t code = d->count++;
    d->values[code] = t;
    d->hashes[code] = h;
    d->slots[i] = code + 1;
    if ((uint32_t)d->count * 2 > d->mask && interner_grow(d) < 0) return -1;
    return code;
}

/* ------------------------------------------------------------------ JSON tokens */

/* Each parser takes the cursor and the line's end; it returns the cursor after the token, or
 * NULL when the token is not one the scanner takes (the line is then special). */

static const char *skip_ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\r')) p++;
    return p;
}

/* a string of printable ASCII without escapes */
static const char *plain_string(const char *p, const char *e, Text *out) {
    if (p >= e || *p != '"') return NULL;
    const char *s = ++p;
    while (p < e) {
        unsigned char c = (unsigned char)*p;
        if (c == '"') {
            out->p = s;
            out->n = (uint32_t)(p - s);
            return p + 1;
        }
        if (c == '\\' || c < 0x20 || c >= 0x80) return NULL;
        p++;
    }
    return NULL;
}

/* a JSON integer of at most 18 digits (so it cannot overflow int64): no fraction, no exponent */
static const char *plain_int(const char *p, const char *e, int64_t *out) {
    int negative = 0;
    if (p < e && *p == '-') {
        negative = 1;
        p++;
    }
    const char *digits = p;
    int64_t v = 0;
    while (p < e && *p >= '0' && *p <= '9') {
        v = v * 10 + (*p - '0');
        p++;
    }
    ptrdiff_t n = p - digits;
    if (n == 0 || n > 18 || (n > 1 && digits[0] == '0')) return NULL;
    if (p < e && (*p == '.' || *p == 'e' || *p == 'E')) return NULL;
    *out = negative ? -v : v;
    return p;
}

static const char *literal(const char *p, const char *e, const char *word, size_t n) {
    return (size_t)(e - p) >= n && memcmp(p, word, n) == 0 ? p + n : NULL;
}

/* Any JSON value (for fields the loader ignores), validated but not kept. Strings follow
 * `plain_string`'s rule, so a line passing here holds nothing Python would decode differently. */
static const char *skip_value(const char *p, const char *e, int depth) {
    if (p >= e || depth > 64) return NULL;
    Text t;
    switch (*p) {
    case '"':
        return plain_string(p, e, &t);
    case '{':
        p = skip_ws(p + 1, e);
        if (p < e && *p == '}') return p + 1;
        for (;;) {
            p = plain_string(p, e, &t);
            if (!p) return NULL;
            p = skip_ws(p, e);
            if (p >= e || *p != ':') return NULL;
            p = skip_value(skip_ws(p + 1, e), e, depth + 1);
            if (!p) return NULL;
            p = skip_ws(p, e);
            if (p < e && *p == ',') {
                p = skip_ws(p + 1, e);
                continue;
            }
            return p < e && *p == '}' ? p + 1 : NULL;
        }
    case '[':
        p = skip_ws(p + 1, e);
        if (p < e && *p == ']') return p + 1;
        for (;;) {
            p = skip_value(p, e, depth + 1);
            if (!p) return NULL;
            p = skip_ws(p, e);
            if (p < e && *p == ',') {
                p = skip_ws(p + 1, e);
                continue;
            }
            return p < e && *p == ']' ? p + 1 : NULL;
        }
    case 't':
        return literal(p, e, "true", 4);
    case 'f':
        return literal(p, e, "false", 5);
    case 'n':
        return literal(p, e, "null", 4);
    default: {
        /* a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
        if (p < e && *p == '-') p++;
        if (p >= e || *p < '0' || *p > '9') return NULL;
        if (*p == '0') {
            p++;
        } else {
            while (p < e && *p >= '0' && *p <= '9') p++;
        }
        if (p < e && *p == '.') {
            const char *f = ++p;
            while (p < e && *p >= '0' && *p <= '9') p++;
            if (p == f) return NULL;
        }
        if (p < e && (*p == 'e' || *p == 'E')) {
            p++;
            if (p < e && (*p == '+' || *p == '-')) p++;
            const char *x = p;
            while (p < e && *p >= '0' && *p <= '9') p++;
            if (p == x) return NULL;
        }
        return p;
    }
    }
}

/* ------------------------------------------------------------------ one line */

enum { DICT_TYPE, DICT_F, DICT_TARGET, DICT_NODE, DICT_RUN, DICT_DESTINATION, DICT_GROUP, N_DICT };
static const char *DICT_NAMES[N_DICT] = {"type", "f", "target", "node", "run", "destination", "group"};
enum { INT_PRODUCER, INT_SEQ, INT_CONSUMER, INT_SUBSCRIBER, N_MSG_INT };
static const char *MSG_INT_NAMES[N_MSG_INT] = {"producer", "seq", "consumer", "subscriber"};

/* what one plain line holds; `has` is a bit per field, set once (a second one: special) */
typedef struct {
    uint32_t has;
    int64_t index, time, process;
    Text dict[N_DICT];
    uint32_t dict_set;   /* bit per DICT_*: a string was given (not null) */
    Text error, id;
    int error_set, id_set;
    int64_t msg_int[N_MSG_INT];
    uint32_t msg_int_set;
    int redelivered;     /* 0, 1, or -1 for none */
} Line;

enum {
    HAS_INDEX = 1 << 0, HAS_TIME = 1 << 1, HAS_PROCESS = 1 << 2, HAS_TYPE = 1 << 3, HAS_F = 1 << 4,
    HAS_TARGET = 1 << 5, HAS_NODE = 1 << 6, HAS_RUN = 1 << 7, HAS_ERROR = 1 << 8, HAS_VALUE = 1 << 9,
};

#define KEY_IS(t, word) ((t).n == sizeof(word) - 1 && memcmp((t).p, word, sizeof(word) - 1) == 0)

/* a string or null; *set says which */
static const char *string_or_null(const char *p, const char *e, Text *out, int *set) {
    if (p < e && *p == 'n') {
        *set = 0;
        return literal(p, e, "null", 4);
    }
    *set = 1;
    return plain_string(p, e, out);
}

static const char *int_or_null(const char *p, const char *e, int64_t *out, int *set) {
    if (p < e && *p == 'n') {
        *set = 0;
        return literal(p, e, "null", 4);
    }
    *set = 1;
    return plain_int(p, e, out);
}

/* the value of a client line: null, or one message object with the message fields only */
static const char *message_value(const char *p, const char *e, Line *line) {
    if (p < e && *p == 'n') return literal(p, e, "null", 4);
    if (p >= e || *p != '{') return NULL;
    p = skip_ws(p + 1, e);
    if (p < e && *p == '}') return p + 1;
    uint32_t seen = 0;
    for (;;) {
        Text key;
        p = plain_string(p, e, &key);
        if (!p) return NULL;
        p = skip_ws(p, e);
        if (p >= e || *p != ':') return NULL;
        p = skip_ws(p + 1, e);
        int set;
        uint32_t bit;
        if (KEY_IS(key, "id")) {
            bit = 1 << 0;
            p = string_or_null(p, e, &line->id, &set);
            line->id_set = set;
        } else if (KEY_IS(key, "destination") || KEY_IS(key, "group")) {
            int which = KEY_IS(key, "group") ? DICT_GROUP : DICT_DESTINATION;
            bit = which == DICT_GROUP ? 1 << 1 : 1 << 2;
            p = string_or_null(p, e, &line->dict[which], &set);
            if (set) line->dict_set |= 1u << which;
        } else if (KEY_IS(key, "redelivered")) {
            bit = 1 << 3;
            if (p < e && *p == 't') {
                p = literal(p, e, "true", 4);
                line->redelivered = 1;
            } else if (p < e && *p == 'f') {
                p = literal(p, e, "false", 5);
                line->redelivered = 0;
            } else {
                p = literal(p, e, "null", 4);
            }
        } else {
            int k = KEY_IS(key, "producer")     ? INT_PRODUCER
                    : KEY_IS(key, "seq")        ? INT_SEQ
                    : KEY_IS(key, "consumer")   ? INT_CONSUMER
                    : KEY_IS(key, "subscriber") ? INT_SUBSCRIBER
                                                : -1;
            if (k < 0) return NULL; /* phase, fault, messages, ...: Python's rules */
            bit = 1u << (4 + k);
            p = int_or_null(p, e, &line->msg_int[k], &set);
            if (set) line->msg_int_set |= 1u << k;
        }
        if (!p || (seen & bit)) return NULL;
        seen |= bit;
        p = skip_ws(p, e);
        if (p < e && *p == ',') {
            p = skip_ws(p + 1, e);
            continue;
        }
        return p < e && *p == '}' ? p + 1 : NULL;
    }
}

static int is_op_type(Text t) {
    return KEY_IS(t, "invoke") || KEY_IS(t, "ok") || KEY_IS(t, "fail") || KEY_IS(t, "info");
}

/* 1 when [p, e) is a plain line (then *line holds it), 0 when it is special */
static int parse_line(const char *p, const char *e, Line *line) {
    memset(line, 0, sizeof(*line));
    line->redelivered = -1;
    p = skip_ws(p, e);
    if (p >= e || *p != '{') return 0;
    p = skip_ws(p + 1, e);
    if (p < e && *p == '}') return 0; /* no fields: missing index, ... */
    for (;;) {
        Text key;
        p = plain_string(p, e, &key);
        if (!p) return 0;
        p = skip_ws(p, e);
        if (p >= e || *p != ':') return 0;
        p = skip_ws(p + 1, e);
        uint32_t bit = 0;
        int set;
        if (KEY_IS(key, "index")) {
            bit = HAS_INDEX;
            p = plain_int(p, e, &line->index);
        } else if (KEY_IS(key, "time")) {
            bit = HAS_TIME;
            p = plain_int(p, e, &line->time);
        } else if (KEY_IS(key, "process")) {
            bit = HAS_PROCESS;
            p = plain_int(p, e, &line->process);
        } else if (KEY_IS(key, "type")) {
            bit = HAS_TYPE;
            p = plain_string(p, e, &line->dict[DICT_TYPE]);
            if (p && !is_op_type(line->dict[DICT_TYPE])) return 0;
            line->dict_set |= 1u << DICT_TYPE;
        } else if (KEY_IS(key, "f")) {
            bit = HAS_F;
            p = plain_string(p, e, &line->dict[DICT_F]);
            line->dict_set |= 1u << DICT_F;
        } else if (KEY_IS(key, "target") || KEY_IS(key, "run")) {
            /* null or absent means the default; "" too in Python (`or`): left to Python */
            int which = KEY_IS(key, "run") ? DICT_RUN : DICT_TARGET;
            bit = which == DICT_RUN ? HAS_RUN : HAS_TARGET;
            p = string_or_null(p, e, &line->dict[which], &set);
            if (set) {
                if (p && line->dict[which].n == 0) return 0;
                line->dict_set |= 1u << which;
            }
        } else if (KEY_IS(key, "node")) {
            bit = HAS_NODE;
            p = string_or_null(p, e, &line->dict[DICT_NODE], &set);
            if (set) line->dict_set |= 1u << DICT_NODE;
        } else if (KEY_IS(key, "error")) {
            bit = HAS_ERROR;
            p = string_or_null(p, e, &line->error, &line->error_set);
        } else if (KEY_IS(key, "value")) {
            bit = HAS_VALUE;
            p = message_value(p, e, line);
        } else {
            p = skip_value(p, e, 0); /* a field the loader does not read */
        }
        if (!p || (line->has & bit)) return 0;
        line->has |= bit;
        p = skip_ws(p, e);
        if (p < e && *p == ',') {
            p = skip_ws(p + 1, e);
            continue;
        }
        if (p >= e || *p != '}') return 0;
        p = skip_ws(p + 1, e);
        break;
    }
    if (p != e) return 0; /* text after the object */
    const uint32_t required = HAS_INDEX | HAS_TIME | HAS_PROCESS | HAS_TYPE | HAS_F;
    return (line->has & required) == required;
}

/* ------------------------------------------------------------------ output columns */

typedef struct {
    Py_ssize_t line;        /* line number within the chunk, from 0 */
    Py_ssize_t start, end;  /* byte range in the buffer, without the newline */
    Py_ssize_t rows_before; /* plain rows of this chunk before it */
} Special;

typedef struct {
    int64_t *index, *time, *process, *msg_int[N_MSG_INT];
    uint8_t *msg_int_valid[N_MSG_INT], *has_message;
    int8_t *redelivered;
    int32_t *codes[N_DICT];
    int32_t *id_offsets, *error_offsets;
    char *id_data, *error_data;
    uint8_t *id_valid, *error_valid;
    Interner dict[N_DICT];
    Special *special;
    Py_ssize_t n_special, special_cap;
    Py_ssize_t rows, lines;
    int failed;             /* out of memory */
} Out;

static void add_row(Out *o, const Line *line) {
    Py_ssize_t r = o->rows++;
    o->index[r] = line->index;
    o->time[r] = line->time;
    o->process[r] = line->process;
    /* a message only when the value has a (non-null) id, as `_flat_rows` rules */
    int message = line->id_set;
    o->has_message[r] = (uint8_t)message;
    for (int k = 0; k < N_MSG_INT; k++) {
        int valid = message && (line->msg_int_set & (1u << k));
        o->msg_int_valid[k][r] = (uint8_t)valid;
        o->msg_int[k][r] = valid ? line->msg_int[k] : 0;
    }
    o->redelivered[r] = (int8_t)(message ? line->redelivered : -1);
    for (int d = 0; d < N_DICT; d++) {
        int is_message_field = d == DICT_DESTINATION || d == DICT_GROUP;
        int32_t code = -1;
        if ((line->dict_set & (1u << d)) && (message || !is_message_field)) {
            code = intern(&o->dict[d], line->dict[d]);
            if (code < 0) o->failed = 1;
        }
        o->codes[d][r] = code;
    }
    int32_t at = o->id_offsets[r];
    if (message) {
        memcpy(o->id_data + at, line->id.p, line->id.n);
        at += (int32_t)line->id.n;
    }
    o->id_valid[r] = (uint8_t)message;
    o->id_offsets[r + 1] = at;
    at = o->error_offsets[r];
    if (line->error_set) {
        memcpy(o->error_data + at, line->error.p, line->error.n);
        at += (int32_t)line->error.n;
    }
    o->error_valid[r] = (uint8_t)line->error_set;
    o->error_offsets[r + 1] = at;
}

static void add_special(Out *o, Py_ssize_t line, Py_ssize_t start, Py_ssize_t end) {
    if (o->n_special == o->special_cap) {
        Py_ssize_t cap = o->special_cap ? o->special_cap * 2 : 64;
        Special *s = realloc(o->special, sizeof(Special) * cap);
        if (!s) {
            o->failed = 1;
            return;
        }
        o->special = s;
        o->special_cap = cap;
    }
    o->special[o->n_special++] = (Special){line, start, end, o->rows};
}

static int blank(const char *p, const char *e) {
    return skip_ws(p, e) == e;
}

/* the scan proper: no Python objects touched, so it runs without the GIL */
static void scan_chunk(const char *base, Py_ssize_t start, Py_ssize_t end, Out *o) {
    const char *p = base + start, *stop = base + end;
    Line line;
    while (p < stop && !o->failed) {
        const char *nl = memchr(p, '\n', (size_t)(stop - p));
        const char *e = nl ? nl : stop;
        if (!blank(p, e)) {
            if (parse_line(p, e, &line))
                add_row(o, &line);
            else
                add_special(o, o->lines, p - base, e - base);
        }
        o->lines++;
        p = nl ? nl + 1 : stop;
    }
}

/* ------------------------------------------------------------------ Python glue */

/* a bytearray of n bytes, uninitialised; its buffer is written without the GIL */
static PyObject *new_column(Py_ssize_t n, void **data) {
    PyObject *b = PyByteArray_FromStringAndSize(NULL, n);
    if (b) *data = PyByteArray_AS_STRING(b);
    return b;
}

static int set_item(PyObject *d, const char *name, PyObject *v) {
    if (!v) return -1;
    int r = PyDict_SetItemString(d, name, v);
    Py_DECREF(v);
    return r;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, end;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &start, &end)) return NULL;
    if (start < 0 || end > view.len || start > end) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "scan: [start, end) is not inside the buffer");
        return NULL;
    }
    if (end - start > INT32_MAX) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "scan: a chunk must be under 2 GiB (string offsets are 32-bit)");
        return NULL;
    }
    const char *base = view.buf;
    /* rows <= lines: count them to size the columns */
    Py_ssize_t lines = 1;
    Py_BEGIN_ALLOW_THREADS
    for (const char *p = base + start, *stop = base + end; (p = memchr(p, '\n', (size_t)(stop - p))); p++) lines++;
    Py_END_ALLOW_THREADS

    PyObject *result = PyDict_New();
    Out o;
    memset(&o, 0, sizeof(o));
    int ok = result != NULL;
    Py_ssize_t bytes = end - start;
    PyObject *cols[64];
    int n_cols = 0;
#define COLUMN(name, n, ptr)                                                        \
    do {                                                                            \
        PyObject *c_ = ok ? new_column((n), (void **)&(ptr)) : NULL;                \
        if (!c_ || PyDict_SetItemString(result, (name), c_) < 0) ok = 0;            \
        if (c_) cols[n_cols++] = c_;                                                \
    } while (0)
    COLUMN("index", lines * 8, o.index);
    COLUMN("time", lines * 8, o.time);
    COLUMN("process", lines * 8, o.process);
    COLUMN("has_message", lines, o.has_message);
    COLUMN("redelivered", lines, o.redelivered);
    for (int k = 0; k < N_MSG_INT; k++) {
        char name[64];
        COLUMN(MSG_INT_NAMES[k], lines * 8, o.msg_int[k]);
        snprintf(name, sizeof(name), "%s_valid", MSG_INT_NAMES[k]);
        COLUMN(name, lines, o.msg_int_valid[k]);
    }
    for (int d = 0; d < N_DICT; d++) {
        COLUMN(DICT_NAMES[d], lines * 4, o.codes[d]);
        if (ok && interner_init(&o.dict[d]) < 0) ok = 0;
    }
    COLUMN("id_offsets", (lines + 1) * 4, o.id_offsets);
    COLUMN("id_data", bytes, o.id_data);
    COLUMN("id_valid", lines, o.id_valid);
    COLUMN("error_offsets", (lines + 1) * 4, o.error_offsets);
    COLUMN("error_data", bytes, o.error_data);
    COLUMN("error_valid", lines, o.error_valid);
#undef COLUMN
    if (ok) {
        o.id_offsets[0] = 0;
        o.error_offsets[0] = 0;
        Py_BEGIN_ALLOW_THREADS
        scan_chunk(base, start, end, &o);
        Py_END_ALLOW_THREADS
        if (o.failed) {
            PyErr_NoMemory();
            ok = 0;
        }
    }
    /* shrink each column to what was written, and hand over the rest */
    if (ok) {
        Py_ssize_t r = o.rows;
        /* read before any resize: shrinking a column may move it, so its pointer goes stale */
        Py_ssize_t id_end = o.id_offsets[r], error_end = o.error_offsets[r];
        for (int i = 0; i < n_cols && ok; i++) {
            PyObject *c = cols[i];
            Py_ssize_t want = PyByteArray_GET_SIZE(c);
            /* sizes were lines * width (+ one offset); scale them to rows */
            if (c == PyDict_GetItemString(result, "id_data"))
                want = id_end;
            else if (c == PyDict_GetItemString(result, "error_data"))
                want = error_end;
            else if (c == PyDict_GetItemString(result, "id_offsets") || c == PyDict_GetItemString(result, "error_offsets"))
                want = (r + 1) * 4;
            else
                want = want / lines * r;
            if (PyByteArray_Resize(c, want) < 0) ok = 0;
        }
    }
    if (ok) ok = set_item(result, "rows", PyLong_FromSsize_t(o.rows)) == 0;
    if (ok) ok = set_item(result, "lines", PyLong_FromSsize_t(o.lines)) == 0;
    for (int d = 0; d < N_DICT && ok; d++) {
        PyObject *values = PyList_New(o.dict[d].count);
        if (!values) {
            ok = 0;
            break;
        }
        for (int32_t c = 0; c < o.dict[d].count; c++) {
            Text t = o.dict[d].values[c];
            PyObject *s = PyUnicode_DecodeASCII(t.p, t.n, "strict");
            if (!s) {
                ok = 0;
                break;
            }
            PyList_SET_ITEM(values, c, s);
        }
        char name[64];
        snprintf(name, sizeof(name), "%s_values", DICT_NAMES[d]);
        if (ok) ok = set_item(result, name, values) == 0;
        else Py_DECREF(values);
    }
    if (ok) {
        PyObject *special = PyList_New(o.n_special);
        for (Py_ssize_t i = 0; special && i < o.n_special; i++) {
            Special s = o.special[i];
            PyObject *t = Py_BuildValue("(nnnn)", s.line, s.start, s.end, s.rows_before);
            if (!t) {
                Py_CLEAR(special);
                break;
            }
            PyList_SET_ITEM(special, i, t);
        }
        ok = set_item(result, "special", special) == 0;
    }
    for (int i = 0; i < n_cols; i++) Py_DECREF(cols[i]); /* the result dict holds them */
    for (int d = 0; d < N_DICT; d++) interner_free(&o.dict[d]);
    free(o.special);
    PyBuffer_Release(&view);
    if (!ok) {
        Py_XDECREF(result);
        return NULL;
    }
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(buffer, start, end) -> dict: the plain history lines of buffer[start:end] as flat "
     "columns (bytearrays), dictionary codes with their values, and the special lines left to "
     "Python as (line, start, end, rows_before)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__scan(void) {
    return PyModule_Create(&module);
}
