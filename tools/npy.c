/*
 * .npy headers: the header is a Python dict literal, e.g.
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * parsed here by a small tokenizer that accepts exactly the literal forms
 * NumPy writes (quoted strings, True/False, tuples of integers) and nothing
 * else; no sscanf, no eval.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tools/npy.h"

static const uint8_t npy_magic[TW__NPY_MAGIC_LEN] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

static int fail(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;
    if (err && cap) {
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return TW_EINVAL;
}

struct cursor {
    const char *p, *end;
};

static void skip_ws(struct cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int expect_char(struct cursor *c, char ch)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted string ('...' or "..."), no escapes (NumPy never writes any). */
static int parse_string(struct cursor *c, const char **s, size_t *n)
{
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return 0;
    char q = *c->p++;
    const char *start = c->p;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\')
            return 0;
        c->p++;
    }
    if (c->p >= c->end)
        return 0;
    *s = start;
    *n = (size_t)(c->p - start);
    c->p++;
    return 1;
}

static int parse_u64(struct cursor *c, uint64_t *v)
{
    skip_ws(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9')
        return 0;
    uint64_t x = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        unsigned d = (unsigned)(*c->p - '0');
        if (x > (UINT64_MAX - d) / 10)
            return 0;
        x = x * 10 + d;
        c->p++;
    }
    if (c->p < c->end && (*c->p == 'L' || *c->p == 'l')) /* Python 2 longs */
        c->p++;
    *v = x;
    return 1;
}

static int word_is(const char *s, size_t n, const char *w)
{
    return strlen(w) == n && memcmp(s, w, n) == 0;
}

/* Maps a descr to a dtype; void descr to void_dtype. 0 when unsupported. */
static int descr_dtype(const char *s, size_t n, int void_dtype, char *err, size_t cap, int *dt)
{
    static const struct {
        char kind;
        unsigned size;
        int dtype;
    } map[] = {
        {'f', 8, TW_F64}, {'f', 4, TW_F32}, {'f', 2, TW_F16}, {'i', 1, TW_I8},
        {'i', 2, TW_I16}, {'i', 4, TW_I32}, {'i', 8, TW_I64}, {'u', 1, TW_U8},
        {'u', 2, TW_U16}, {'u', 4, TW_U32}, {'u', 8, TW_U64}, {'b', 1, TW_BOOL},
    };
    if (n < 3 || n > 4)
        return fail(err, cap, "unsupported dtype '%.*s'", (int)n, s);
    char order = s[0], kind = s[1];
    unsigned size = 0;
    for (size_t i = 2; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return fail(err, cap, "unsupported dtype '%.*s'", (int)n, s);
        size = size * 10 + (unsigned)(s[i] - '0');
    }
    if (order != '<' && order != '|' && order != '=' && order != '>')
        return fail(err, cap, "unsupported dtype '%.*s'", (int)n, s);
    if (order == '>' && size > 1)
        return fail(err, cap,
                    "big-endian dtype '%.*s' is not supported: convert with "
                    "arr.astype(arr.dtype.newbyteorder('<'))",
                    (int)n, s);
    if (kind == 'V') {
        if (size != 1 && size != 2)
            return fail(err, cap, "void dtype '%.*s' is not a tensor dtype", (int)n, s);
        if (!void_dtype)
            return fail(err, cap,
                        "dtype '%.*s' (raw %u-byte elements) is ambiguous: pass --dtype %s", (int)n,
                        s, size, size == 2 ? "bf16" : "f8e4m3|f8e5m2");
        if (tw_dtype_size(void_dtype) != size)
            return fail(err, cap, "--dtype %s does not match '%.*s' (%u-byte elements)",
                        tw_dtype_name(void_dtype), (int)n, s, size);
        *dt = void_dtype;
        return 0;
    }
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (map[i].kind == kind && map[i].size == size) {
            *dt = map[i].dtype;
            return 0;
        }
    return fail(err, cap, "unsupported dtype '%.*s' (supported: f2 f4 f8 i1..i8 u1..u8 b1)", (int)n,
                s);
}

int tw__npy_parse(const uint8_t *buf, size_t len, int void_dtype, struct tw__npy_info *out,
                  char *err, size_t errcap)
{
    size_t pre, hlen;
    int have_descr = 0, have_order = 0, have_shape = 0, dtype = 0;

    memset(out, 0, sizeof(*out));
    if (len < 8) {
        out->data_offset = 8;
        return -EAGAIN;
    }
    if (memcmp(buf, npy_magic, TW__NPY_MAGIC_LEN) != 0)
        return fail(err, errcap, "not a .npy file (bad magic)");
    uint8_t major = buf[6];
    if (major == 1) {
        pre = 10;
    } else if (major == 2 || major == 3) {
        pre = 12;
    } else {
        return fail(err, errcap, ".npy format version %u.%u is not supported (1.0, 2.0, 3.0 are)",
                    major, buf[7]);
    }
    if (len < pre) {
        out->data_offset = pre;
        return -EAGAIN;
    }
    hlen = major == 1 ? (size_t)buf[8] | (size_t)buf[9] << 8
                      : (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 |
                            (size_t)buf[11] << 24;
    if (hlen > TW__NPY_HEADER_MAX)
        return fail(err, errcap, ".npy header of %zu bytes is larger than we accept", hlen);
    if (len < pre + hlen) {
        out->data_offset = pre + hlen;
        return -EAGAIN;
    }

    struct cursor c = {.p = (const char *)buf + pre, .end = (const char *)buf + pre + hlen};
    if (!expect_char(&c, '{'))
        return fail(err, errcap, ".npy header is not a dict");
    for (;;) {
        const char *key;
        size_t klen;
        if (expect_char(&c, '}'))
            break;
        if (!parse_string(&c, &key, &klen) || !expect_char(&c, ':'))
            return fail(err, errcap, ".npy header: malformed dict");
        if (word_is(key, klen, "descr")) {
            const char *d;
            size_t dlen;
            if (!parse_string(&c, &d, &dlen))
                return fail(err, errcap,
                            ".npy header: 'descr' is not a simple dtype string "
                            "(structured dtypes are not supported)");
            int rc = descr_dtype(d, dlen, void_dtype, err, errcap, &dtype);
            if (rc)
                return rc;
            have_descr = 1;
        } else if (word_is(key, klen, "fortran_order")) {
            skip_ws(&c);
            if ((size_t)(c.end - c.p) >= 4 && memcmp(c.p, "True", 4) == 0)
                return fail(err, errcap,
                            "Fortran-order arrays are not supported: save a "
                            "C-order copy (np.ascontiguousarray)");
            if ((size_t)(c.end - c.p) < 5 || memcmp(c.p, "False", 5) != 0)
                return fail(err, errcap, ".npy header: bad fortran_order value");
            c.p += 5;
            have_order = 1;
        } else if (word_is(key, klen, "shape")) {
            if (!expect_char(&c, '('))
                return fail(err, errcap, ".npy header: shape is not a tuple");
            while (!expect_char(&c, ')')) {
                uint64_t v;
                if (out->ndim >= TW_TENSOR_MAX_NDIM)
                    return fail(err, errcap,
                                "arrays with more than %d dimensions are not supported",
                                TW_TENSOR_MAX_NDIM);
                if (!parse_u64(&c, &v))
                    return fail(err, errcap, ".npy header: bad shape");
                out->shape[out->ndim++] = v;
                if (!expect_char(&c, ',')) {
                    if (!expect_char(&c, ')'))
                        return fail(err, errcap, ".npy header: bad shape");
                    break;
                }
            }
            have_shape = 1;
        } else {
            return fail(err, errcap, ".npy header: unexpected key '%.*s'", (int)klen, key);
        }
        if (!expect_char(&c, ',')) {
            if (!expect_char(&c, '}'))
                return fail(err, errcap, ".npy header: malformed dict");
            break;
        }
    }
    if (!have_descr || !have_order || !have_shape)
        return fail(err, errcap, ".npy header lacks %s",
                    !have_descr   ? "descr"
                    : !have_order ? "fortran_order"
                                  : "shape");
    out->dtype = (uint8_t)dtype;
    struct tw_tensor_desc desc = {.dtype = out->dtype, .ndim = out->ndim};
    memcpy(desc.shape, out->shape, sizeof(desc.shape));
    if (tw_tensor_desc_bytes(&desc, &out->byte_length) != 0)
        return fail(err, errcap, "array byte length overflows 64 bits");
    out->data_offset = pre + hlen;
    return 0;
}

static const char *descr_of(uint8_t dtype, int *is_void)
{
    *is_void = 0;
    switch (dtype) {
    case TW_F64:
        return "<f8";
    case TW_F32:
        return "<f4";
    case TW_F16:
        return "<f2";
    case TW_I8:
        return "|i1";
    case TW_I16:
        return "<i2";
    case TW_I32:
        return "<i4";
    case TW_I64:
        return "<i8";
    case TW_U8:
        return "|u1";
    case TW_U16:
        return "<u2";
    case TW_U32:
        return "<u4";
    case TW_U64:
        return "<u8";
    case TW_BOOL:
        return "|b1";
    case TW_BF16:
        *is_void = 1;
        return "|V2";
    case TW_F8E4M3:
    case TW_F8E5M2:
        *is_void = 1;
        return "|V1";
    default:
        return NULL;
    }
}

long tw__npy_write_header(uint8_t dtype, uint8_t ndim, const uint64_t *shape, uint8_t *buf,
                          size_t cap, int *is_void)
{
    char dict[1024];
    int v, n;
    size_t pre, total, dlen;
    const char *descr = descr_of(dtype, &v);
    if (!descr || ndim > TW_TENSOR_MAX_NDIM)
        return TW_EINVAL;
    if (is_void)
        *is_void = v;
    n = snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (unsigned i = 0; i < ndim; i++)
        /* NumPy's spelling: "(5,)", "(2, 3)", "()". */
        n += snprintf(dict + n, sizeof(dict) - (size_t)n, "%llu%s", (unsigned long long)shape[i],
                      ndim == 1      ? ","
                      : i + 1 < ndim ? ", "
                                     : "");
    n += snprintf(dict + n, sizeof(dict) - (size_t)n, "), }");
    dlen = (size_t)n;
    /* Version 1.0 unless the padded header exceeds its u16 length. */
    pre = 10;
    total = (pre + dlen + 1 + 63) / 64 * 64;
    if (total - pre > 65535) {
        pre = 12;
        total = (pre + dlen + 1 + 63) / 64 * 64;
    }
    if (cap < total)
        return -ENOBUFS;
    size_t hlen = total - pre;
    memcpy(buf, npy_magic, TW__NPY_MAGIC_LEN);
    buf[6] = pre == 10 ? 1 : 2;
    buf[7] = 0;
    buf[8] = (uint8_t)hlen;
    buf[9] = (uint8_t)(hlen >> 8);
    if (pre == 12) {
        buf[10] = (uint8_t)(hlen >> 16);
        buf[11] = (uint8_t)(hlen >> 24);
    }
    memcpy(buf + pre, dict, dlen);
    memset(buf + pre + dlen, ' ', hlen - dlen - 1);
    buf[total - 1] = '\n';
    return (long)total;
}

int tw__cli_parse_shape(const char *s, uint8_t *ndim, uint64_t shape[TW_TENSOR_MAX_NDIM])
{
    unsigned n = 0;
    const char *p = s;
    if (!s)
        return TW_EINVAL;
    if (*s == '\0' || strcmp(s, "scalar") == 0) {
        *ndim = 0;
        return 0;
    }
    for (;;) {
        uint64_t v = 0;
        if (*p < '0' || *p > '9' || n >= TW_TENSOR_MAX_NDIM)
            return TW_EINVAL;
        while (*p >= '0' && *p <= '9') {
            unsigned d = (unsigned)(*p - '0');
            if (v > (UINT64_MAX - d) / 10)
                return TW_EINVAL;
            v = v * 10 + d;
            p++;
        }
        shape[n++] = v;
        if (*p == '\0')
            break;
        if (*p != ',')
            return TW_EINVAL;
        p++;
    }
    *ndim = (uint8_t)n;
    return 0;
}
