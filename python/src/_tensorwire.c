/*
 * tensorwire._tensorwire: the CPython binding of libtensorwire.
 *
 * Uses only the public C API (include/tensorwire/). The Python layer
 * (tensorwire/__init__.py) turns NumPy arrays, bytes and PyTorch tensors into
 * "targets" this module understands:
 *
 *   - any object with the buffer protocol, exported C-contiguous (NumPy
 *     arrays, bytes, bytearray, memoryview); its element format gives the
 *     dtype and its shape the shape;
 *   - a tuple (address, nbytes, dtype_code, shape, device) for memory the
 *     buffer protocol cannot describe (PyTorch tensors: bf16, fp8, CUDA);
 *     device 0 is host memory, 1 is CUDA device memory. The caller keeps the
 *     memory alive for the duration of the call (the Python layer holds the
 *     tensor).
 *
 * Zero copy: put sends from the target's own memory, get writes into it; the
 * library keeps no pointer after a call returns (client.h), so a buffer view
 * held only for the call is enough. get_alloc returns a Buffer object that
 * owns the library's allocation and exports it through the buffer protocol,
 * so np.frombuffer() wraps it without a copy.
 *
 * Threads: every call into the library runs with the GIL released. A
 * tw_client is not thread-safe, so each Client carries a lock: concurrent use
 * of one Client from several threads is serialised (one client per thread
 * runs in parallel).
 *
 * Errors: a negative library code becomes an exception of the class that
 * error_class() picks, with attributes code (int), code_name (str), detail
 * (the library's message) and, inside a batch, index and name of the item.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tensorwire/tensorwire.h"

/* Exception classes, created once at module init; owned by the module. */
static PyObject *Error, *NotFound, *CapacityExceeded, *DeviceUnavailable, *Unauthorized,
    *TimeoutErr, *ConnectionClosed, *ProtocolError, *InvalidArgument, *Busy, *ChecksumMismatch;

/* Which exception class a library code maps to. */
static PyObject *error_class(int code)
{
    switch (code) {
    case TW_ENOTFOUND:
        return NotFound;
    case TW_ECAPACITY:
        return CapacityExceeded;
    case TW_EDEVICE:
        return DeviceUnavailable;
    case TW_EUNAUTHORIZED:
        return Unauthorized;
    case TW_ETIMEDOUT:
    case -ETIMEDOUT:
        return TimeoutErr;
    case TW_ESHUTDOWN:
    case -ENOTCONN:
    case -ECONNRESET:
    case -ECONNREFUSED:
    case -ECONNABORTED:
    case -EPIPE:
        return ConnectionClosed;
    case TW_EINVAL:
    case -ENOBUFS:
        return InvalidArgument;
    case TW_EBUSY:
        return Busy;
    case TW_ECHECKSUM:
        return ChecksumMismatch;
    case TW_EPROTO:
    case TW_EVERSION:
        return ProtocolError;
    default:
        if (code <= -1100 && code > -1200)
            return ProtocolError;
        return Error;
    }
}

/* Raises the exception for code. what names the operation ("get 'w0'"),
 * detail is the library's message (may be NULL or ""); index/name are set
 * for a batch item (index < 0: not a batch). Always returns NULL. */
static PyObject *raise_code(int code, const char *what, const char *detail, Py_ssize_t index,
                            const char *item_name)
{
    PyObject *cls = error_class(code);
    PyObject *msg, *exc;

    if (!detail || !*detail)
        detail = tw_strerror(code);
    msg = PyUnicode_FromFormat("%s: %s: %s", what, tw_strerror_name(code), detail);
    if (!msg)
        return NULL;
    exc = PyObject_CallOneArg(cls, msg);
    Py_DECREF(msg);
    if (!exc)
        return NULL;
    PyObject *v = PyLong_FromLong(code);
    if (v) {
        PyObject_SetAttrString(exc, "code", v);
        Py_DECREF(v);
    }
    v = PyUnicode_FromString(tw_strerror_name(code));
    if (v) {
        PyObject_SetAttrString(exc, "code_name", v);
        Py_DECREF(v);
    }
    v = PyUnicode_DecodeUTF8(detail, (Py_ssize_t)strlen(detail), "replace");
    if (v) {
        PyObject_SetAttrString(exc, "detail", v);
        Py_DECREF(v);
    }
    if (index >= 0) {
        v = PyLong_FromSsize_t(index);
        if (v) {
            PyObject_SetAttrString(exc, "index", v);
            Py_DECREF(v);
        }
        v = PyUnicode_DecodeUTF8(item_name, (Py_ssize_t)strlen(item_name), "replace");
        if (v) {
            PyObject_SetAttrString(exc, "name", v);
            Py_DECREF(v);
        }
    }
    PyErr_Clear(); /* a failed attribute set must not mask the real error */
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

/* "get 'NAME'" into buf (names are truncated for the message only). */
static const char *op_name(char *buf, size_t cap, const char *op, const char *name)
{
    snprintf(buf, cap, "%s '%.200s'", op, name);
    return buf;
}

/* ---- Buffer: memory owned by the library (tw_get_alloc) or by us ---- */

typedef struct {
    PyObject_HEAD void *ptr;
    size_t len;
    int from_library; /* 1: tw_free; 0: free */
    Py_ssize_t exports;
} BufferObject;

static int buffer_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    BufferObject *b = (BufferObject *)self;
    int rc = PyBuffer_FillInfo(view, self, b->ptr, (Py_ssize_t)b->len, 0, flags);
    if (rc == 0)
        b->exports++;
    return rc;
}

static void buffer_releasebuffer(PyObject *self, Py_buffer *view)
{
    ((BufferObject *)self)->exports--;
}

static void buffer_dealloc(PyObject *self)
{
    BufferObject *b = (BufferObject *)self;
    if (b->from_library)
        tw_free(b->ptr);
    else
        free(b->ptr);
    Py_TYPE(self)->tp_free(self);
}

static Py_ssize_t buffer_length(PyObject *self)
{
    return (Py_ssize_t)((BufferObject *)self)->len;
}

static PyBufferProcs buffer_as_buffer = {buffer_getbuffer, buffer_releasebuffer};
static PySequenceMethods buffer_as_sequence = {.sq_length = buffer_length};

static PyTypeObject BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tensorwire._tensorwire.Buffer",
    .tp_basicsize = sizeof(BufferObject),
    .tp_dealloc = buffer_dealloc,
    .tp_as_buffer = &buffer_as_buffer,
    .tp_as_sequence = &buffer_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Bytes received by a get, owned by this object (exported through the buffer "
              "protocol; freed when the last view goes away).",
};

/* Takes ownership of ptr (freed with tw_free or free). */
static PyObject *buffer_new(void *ptr, size_t len, int from_library)
{
    BufferObject *b = PyObject_New(BufferObject, &BufferType);
    if (!b) {
        if (from_library)
            tw_free(ptr);
        else
            free(ptr);
        return NULL;
    }
    b->ptr = ptr;
    b->len = len;
    b->from_library = from_library;
    b->exports = 0;
    return (PyObject *)b;
}

/* ---- targets: where bytes come from (put) or go to (get) ---- */

struct target {
    void *ptr;
    size_t len;
    int dtype; /* enum tw_dtype_code */
    int raw;   /* bytes/bytearray/memoryview of bytes: any dtype of that size */
    int ndim;
    uint64_t shape[TW_TENSOR_MAX_NDIM];
    int device; /* 0 host, 1 CUDA */
    Py_buffer view;
    int has_view;
};

static void target_release(struct target *t)
{
    if (t->has_view) {
        PyBuffer_Release(&t->view);
        t->has_view = 0;
    }
}

/* dtype code of a struct-module format with that itemsize; 0 if unsupported. */
static int dtype_from_format(const char *fmt, Py_ssize_t itemsize)
{
    if (!fmt)
        return TW_U8;
    if (*fmt == '@' || *fmt == '=' || *fmt == '<')
        fmt++;
    else if (*fmt == '>' || *fmt == '!')
        return itemsize == 1 && fmt[1] && !fmt[2] ? dtype_from_format(fmt + 1, itemsize) : 0;
    if (!fmt[0] || fmt[1])
        return 0;
    switch (fmt[0]) {
    case 'd':
        return itemsize == 8 ? TW_F64 : 0;
    case 'f':
        return itemsize == 4 ? TW_F32 : 0;
    case 'e':
        return itemsize == 2 ? TW_F16 : 0;
    case '?':
        return itemsize == 1 ? TW_BOOL : 0;
    case 'c':
        return itemsize == 1 ? TW_U8 : 0;
    case 'b':
    case 'h':
    case 'i':
    case 'l':
    case 'q':
    case 'n':
        switch (itemsize) {
        case 1:
            return TW_I8;
        case 2:
            return TW_I16;
        case 4:
            return TW_I32;
        case 8:
            return TW_I64;
        }
        return 0;
    case 'B':
    case 'H':
    case 'I':
    case 'L':
    case 'Q':
    case 'N':
        switch (itemsize) {
        case 1:
            return TW_U8;
        case 2:
            return TW_U16;
        case 4:
            return TW_U32;
        case 8:
            return TW_U64;
        }
        return 0;
    }
    return 0;
}

static int shape_from_seq(PyObject *seq, struct target *t)
{
    PyObject *fast = PySequence_Fast(seq, "shape must be a sequence of ints");
    if (!fast)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n > TW_TENSOR_MAX_NDIM) {
        Py_DECREF(fast);
        PyErr_Format(InvalidArgument, "shape has %zd dimensions, at most %d allowed", n,
                     TW_TENSOR_MAX_NDIM);
        return -1;
    }
    t->ndim = (int)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long long d = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(fast, i));
        if (d == (unsigned long long)-1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
        t->shape[i] = d;
    }
    Py_DECREF(fast);
    return 0;
}

/*
 * Fills t from obj (see the file comment). writable: the target is a get
 * destination. On failure sets an exception and returns -1 (nothing to
 * release); on success the caller releases t with target_release.
 */
static int target_from_buffer(PyObject *obj, int writable, struct target *t);

/* Turns objects without the buffer protocol (torch tensors, CUDA arrays)
 * into target tuples: tensorwire._target, registered at import. Owned. */
static PyObject *converter;

static int target_from(PyObject *obj, int writable, struct target *t)
{
    memset(t, 0, sizeof(*t));
    if (!PyTuple_Check(obj) && !PyObject_CheckBuffer(obj) && converter) {
        /* The caller keeps obj (and so the memory) alive for the call. */
        PyObject *conv = PyObject_CallOneArg(converter, obj);
        int rc;
        if (!conv)
            return -1;
        if (PyTuple_Check(conv))
            rc = target_from(conv, writable, t);
        else
            rc = target_from_buffer(conv, writable, t);
        Py_DECREF(conv);
        return rc;
    }
    if (PyTuple_Check(obj)) {
        unsigned long long addr, nbytes;
        int dtype, device;
        PyObject *shape;
        if (!PyArg_ParseTuple(obj, "KKiOi:target", &addr, &nbytes, &dtype, &shape, &device))
            return -1;
        if (tw_dtype_size(dtype) == 0) {
            PyErr_Format(InvalidArgument, "unknown dtype code %d", dtype);
            return -1;
        }
        if (shape_from_seq(shape, t) < 0)
            return -1;
        t->ptr = (void *)(uintptr_t)addr;
        t->len = (size_t)nbytes;
        t->dtype = dtype;
        t->device = device;
        return 0;
    }
    return target_from_buffer(obj, writable, t);
}

/* The buffer-protocol half of target_from (t already zeroed). */
static int target_from_buffer(PyObject *obj, int writable, struct target *t)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &t->view, flags) < 0) {
        /* Read-only or not C-contiguous: say so as InvalidArgument (a
         * ValueError); an object without the buffer protocol stays a
         * TypeError. */
        if (!PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            PyErr_NormalizeException(&type, &value, &tb);
            PyErr_Format(InvalidArgument, "%s %.100s: %S",
                         writable ? "cannot receive into this" : "cannot send this",
                         Py_TYPE(obj)->tp_name, value ? value : Py_None);
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(tb);
        }
        return -1;
    }
    t->has_view = 1;
    t->ptr = t->view.buf;
    t->len = (size_t)t->view.len;
    t->dtype = dtype_from_format(t->view.format, t->view.itemsize);
    t->raw = PyBytes_Check(obj) || PyByteArray_Check(obj) ||
             (PyMemoryView_Check(obj) && t->dtype == TW_U8 && t->view.ndim <= 1);
    if (t->dtype == 0) {
        PyErr_Format(InvalidArgument,
                     "unsupported element format '%s' (itemsize %zd): tensorwire carries "
                     "f64/f32/f16/bf16/f8, signed and unsigned ints and bool",
                     t->view.format ? t->view.format : "B", t->view.itemsize);
        target_release(t);
        return -1;
    }
    if (t->view.ndim > TW_TENSOR_MAX_NDIM) {
        PyErr_Format(InvalidArgument, "%d dimensions, at most %d allowed", t->view.ndim,
                     TW_TENSOR_MAX_NDIM);
        target_release(t);
        return -1;
    }
    t->ndim = t->view.ndim;
    for (int i = 0; i < t->ndim; i++)
        t->shape[i] = (uint64_t)t->view.shape[i];
    if (t->view.ndim == 0 && t->view.shape == NULL && t->view.itemsize > 0 &&
        t->len != (size_t)t->view.itemsize) {
        /* A 1-D export without shape (PyBUF_SIMPLE-like): one dimension. */
        t->ndim = 1;
        t->shape[0] = t->len / (size_t)t->view.itemsize;
    }
    return 0;
}

/* Applies put's dtype/shape overrides (dtype 0 / shape None: keep). */
static int target_override(struct target *t, int dtype, PyObject *shape)
{
    if (dtype != 0) {
        size_t size = tw_dtype_size(dtype);
        if (size == 0) {
            PyErr_Format(InvalidArgument, "unknown dtype code %d", dtype);
            return -1;
        }
        if (shape == Py_None && size != tw_dtype_size(t->dtype)) {
            /* Reinterpret the bytes as a 1-D tensor of the new dtype. */
            if (t->len % size) {
                PyErr_Format(InvalidArgument, "%zu bytes are not a whole number of %s elements",
                             t->len, tw_dtype_name(dtype));
                return -1;
            }
            t->ndim = 1;
            t->shape[0] = t->len / size;
        }
        t->dtype = dtype;
    }
    if (shape != Py_None && shape_from_seq(shape, t) < 0)
        return -1;
    return 0;
}

static void target_desc(const struct target *t, struct tw_tensor_desc *d)
{
    memset(d, 0, sizeof(*d));
    d->dtype = (uint8_t)t->dtype;
    d->ndim = (uint8_t)t->ndim;
    memcpy(d->shape, t->shape, sizeof(uint64_t) * (size_t)t->ndim);
}

/* Device memory goes to the library only when it accepts device pointers
 * (issue #11 defines TW_CLIENT_DEVICE_MEMORY in client.h). Until then a host
 * copy would be the only way, which this binding refuses to hide. */
static int target_check_device(const struct target *t, const char *what)
{
#ifndef TW_CLIENT_DEVICE_MEMORY
    if (t->device != 0) {
        raise_code(TW_EDEVICE, what,
                   "this libtensorwire takes host memory only (CUDA device pointers need "
                   "issue #11); copy the tensor to the CPU first",
                   -1, "");
        return -1;
    }
#endif
    return 0;
}

static void shape_text(char *buf, size_t cap, int dtype, int ndim, const uint64_t *shape)
{
    size_t off = (size_t)snprintf(buf, cap, "%s (", tw_dtype_name(dtype));
    for (int i = 0; i < ndim && off < cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%llu", i ? ", " : "",
                                (unsigned long long)shape[i]);
    if (off < cap)
        snprintf(buf + off, cap - off, "%s)", ndim == 1 ? "," : "");
}

/* 0 when a destination t holds exactly what desc describes. The bits of bf16
 * fit u16 and of f8 fit u8 (NumPy has no such types). */
static int target_matches(const struct target *t, const struct tw_tensor_desc *d)
{
    if (d->byte_length != t->len)
        return -1;
    if (t->raw)
        return 0;
    int same = t->dtype == d->dtype || (t->dtype == TW_U16 && d->dtype == TW_BF16) ||
               (t->dtype == TW_U8 && (d->dtype == TW_F8E4M3 || d->dtype == TW_F8E5M2));
    if (!same || t->ndim != d->ndim)
        return -1;
    return memcmp(t->shape, d->shape, sizeof(uint64_t) * d->ndim) ? -1 : 0;
}

static PyObject *raise_mismatch(const char *what, const struct target *t,
                                const struct tw_tensor_desc *d, Py_ssize_t index, const char *name)
{
    char have[256], want[256], msg[600];
    shape_text(have, sizeof(have), t->dtype, t->ndim, t->shape);
    shape_text(want, sizeof(want), d->dtype, d->ndim, d->shape);
    snprintf(msg, sizeof(msg), "out is %s%s, %zu bytes, but the tensor is %s, %llu bytes", have,
             t->raw ? " (raw bytes)" : "", t->len, want, (unsigned long long)d->byte_length);
    return raise_code(TW_EINVAL, what, msg, index, name);
}

/* ---- descriptions to Python ---- */

static PyObject *shape_tuple(const struct tw_tensor_desc *d)
{
    PyObject *s = PyTuple_New(d->ndim);
    if (!s)
        return NULL;
    for (int i = 0; i < d->ndim; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(d->shape[i]);
        if (!v) {
            Py_DECREF(s);
            return NULL;
        }
        PyTuple_SET_ITEM(s, i, v);
    }
    return s;
}

/* (name, dtype_code, shape, nbytes, device_tag) */
static PyObject *desc_tuple(const char *name, const struct tw_tensor_desc *d)
{
    PyObject *shape = shape_tuple(d);
    if (!shape)
        return NULL;
    return Py_BuildValue("(siNKs)", name, (int)d->dtype, shape, (unsigned long long)d->byte_length,
                         d->device_tag[0] ? d->device_tag : "cpu");
}

/* ---- Client ---- */

typedef struct {
    PyObject_HEAD tw_client *c;
    PyThread_type_lock lock;
} ClientObject;

/* Takes the client's lock; waits with the GIL released when another thread
 * holds it. Returns -1 with an exception when the client is closed. */
static int client_enter(ClientObject *self)
{
    if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
        PyThreadState *ts = PyEval_SaveThread();
        PyThread_acquire_lock(self->lock, WAIT_LOCK);
        PyEval_RestoreThread(ts);
    }
    if (!self->c) {
        PyThread_release_lock(self->lock);
        PyErr_SetString(ConnectionClosed, "the client is closed");
        return -1;
    }
    return 0;
}

static void client_leave(ClientObject *self)
{
    PyThread_release_lock(self->lock);
}

static int client_init(PyObject *op, PyObject *args, PyObject *kw)
{
    ClientObject *self = (ClientObject *)op;
    static char *kwlist[] = {"addr",       "token",    "token_file", "fabric",       "push",
                             "timeout_ms", "checksum", "agent",      "max_inflight", NULL};
    const char *addr, *token = NULL, *token_file = NULL, *fabric = NULL, *agent = NULL;
    int push = TW_PUSH_AUTO, timeout_ms = -1, checksum = 0;
    unsigned int max_inflight = 0;
    struct tw_client_options o;
    char err[512] = "";
    tw_client *c = NULL;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|zzziipzI:Client", kwlist, &addr, &token,
                                     &token_file, &fabric, &push, &timeout_ms, &checksum, &agent,
                                     &max_inflight))
        return -1;
    if (self->c) {
        PyErr_SetString(PyExc_RuntimeError, "Client is already connected");
        return -1;
    }
    tw_client_options_init(&o);
    o.token = token;
    o.token_file = token_file;
    o.fabric = fabric;
    o.push = push;
    o.checksum = checksum;
    if (agent)
        o.agent = agent;
    if (max_inflight)
        o.max_inflight = max_inflight;
    if (timeout_ms >= 0) {
        o.request_timeout_ms = timeout_ms;
        if (timeout_ms > 0)
            o.connect_timeout_ms = timeout_ms;
    }
    PyThreadState *ts = PyEval_SaveThread();
    rc = tw_client_connect_error(addr, &o, &c, err, sizeof(err));
    PyEval_RestoreThread(ts);
    if (rc < 0) {
        char what[300];
        snprintf(what, sizeof(what), "connect %.200s", addr);
        raise_code(rc, what, err, -1, "");
        return -1;
    }
    if (!self->lock)
        self->lock = PyThread_allocate_lock();
    if (!self->lock) {
        tw_close(c);
        PyErr_NoMemory();
        return -1;
    }
    self->c = c;
    return 0;
}

static void client_dealloc(PyObject *op)
{
    ClientObject *self = (ClientObject *)op;
    if (self->c) {
        tw_client *c = self->c;
        self->c = NULL;
        PyThreadState *ts = PyEval_SaveThread();
        tw_close(c);
        PyEval_RestoreThread(ts);
    }
    if (self->lock)
        PyThread_free_lock(self->lock);
    Py_TYPE(op)->tp_free(op);
}

static PyObject *client_close(PyObject *op, PyObject *unused)
{
    ClientObject *self = (ClientObject *)op;
    if (!self->lock || !self->c)
        Py_RETURN_NONE;
    if (client_enter(self) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    tw_client *c = self->c;
    self->c = NULL;
    PyThreadState *ts = PyEval_SaveThread();
    tw_close(c);
    PyEval_RestoreThread(ts);
    client_leave(self);
    Py_RETURN_NONE;
}

/* Raises for a failed call on c; must run while the lock is held (the
 * message belongs to c until its next call). */
static PyObject *raise_call(ClientObject *self, int rc, const char *what)
{
    return raise_code(rc, what, tw_client_last_error_message(self->c), -1, "");
}

static PyObject *client_put(PyObject *op, PyObject *args, PyObject *kw)
{
    ClientObject *self = (ClientObject *)op;
    static char *kwlist[] = {"name", "data", "dtype", "shape", NULL};
    const char *name;
    PyObject *data, *shape = Py_None;
    int dtype = 0, rc;
    struct target t;
    struct tw_tensor_desc d;
    char what[256];

    if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|iO:put", kwlist, &name, &data, &dtype, &shape))
        return NULL;
    op_name(what, sizeof(what), "put", name);
    if (target_from(data, 0, &t) < 0)
        return NULL;
    if (target_override(&t, dtype, shape) < 0 || target_check_device(&t, what) < 0)
        goto out_release;
    target_desc(&t, &d);
    if (client_enter(self) < 0)
        goto out_release;
    PyThreadState *ts = PyEval_SaveThread();
    rc = tw_put(self->c, name, &d, t.ptr, t.len);
    PyEval_RestoreThread(ts);
    if (rc < 0) {
        raise_call(self, rc, what);
        client_leave(self);
        goto out_release;
    }
    client_leave(self);
    target_release(&t);
    Py_RETURN_NONE;

out_release:
    target_release(&t);
    return NULL;
}

/* get_into(name, out) -> out: fills out in place (shape and dtype checked
 * after the transfer: on a mismatch out's bytes are unspecified). */
static PyObject *client_get_into(PyObject *op, PyObject *args)
{
    ClientObject *self = (ClientObject *)op;
    const char *name;
    PyObject *out;
    struct target t;
    struct tw_tensor_desc d;
    char what[256];
    int rc;

    if (!PyArg_ParseTuple(args, "sO:get_into", &name, &out))
        return NULL;
    if (target_from(out, 1, &t) < 0)
        return NULL;
    if (target_check_device(&t, op_name(what, sizeof(what), "get", name)) < 0)
        goto out_release;
    if (client_enter(self) < 0)
        goto out_release;
    PyThreadState *ts = PyEval_SaveThread();
    rc = tw_get(self->c, name, t.ptr, t.len, &d);
    PyEval_RestoreThread(ts);
    if (rc < 0 && rc != -ENOBUFS) {
        raise_call(self, rc, op_name(what, sizeof(what), "get", name));
        client_leave(self);
        goto out_release;
    }
    client_leave(self);
    if (rc == -ENOBUFS || target_matches(&t, &d) < 0) {
        raise_mismatch(op_name(what, sizeof(what), "get", name), &t, &d, -1, "");
        goto out_release;
    }
    target_release(&t);
    Py_INCREF(out);
    return out;

out_release:
    target_release(&t);
    return NULL;
}

/* get_alloc(name) -> (Buffer, dtype_code, shape) */
static PyObject *client_get_alloc(PyObject *op, PyObject *args)
{
    ClientObject *self = (ClientObject *)op;
    const char *name;
    void *buf = NULL;
    size_t len = 0;
    struct tw_tensor_desc d;
    char what[256];
    int rc;

    if (!PyArg_ParseTuple(args, "s:get_alloc", &name))
        return NULL;
    if (client_enter(self) < 0)
        return NULL;
    PyThreadState *ts = PyEval_SaveThread();
    rc = tw_get_alloc(self->c, name, &buf, &len, &d);
    PyEval_RestoreThread(ts);
    if (rc < 0) {
        raise_call(self, rc, op_name(what, sizeof(what), "get", name));
        client_leave(self);
        return NULL;
    }
    client_leave(self);
    PyObject *b = buffer_new(buf, len, 1);
    if (!b)
        return NULL;
    return Py_BuildValue("(NiN)", b, (int)d.dtype, shape_tuple(&d));
}

static PyObject *client_stat(PyObject *op, PyObject *args)
{
    ClientObject *self = (ClientObject *)op;
    const char *name;
    struct tw_tensor_desc d;
    char what[256];
    int rc;

    if (!PyArg_ParseTuple(args, "s:stat", &name))
        return NULL;
    if (client_enter(self) < 0)
        return NULL;
    PyThreadState *ts = PyEval_SaveThread();
    rc = tw_stat(self->c, name, &d);
    PyEval_RestoreThread(ts);
    if (rc < 0) {
        raise_call(self, rc, op_name(what, sizeof(what), "stat", name));
        client_leave(self);
        return NULL;
    }
    client_leave(self);
    return desc_tuple(name, &d);
}

static PyObject *client_delete(PyObject *op, PyObject *args)
{
    ClientObject *self = (ClientObject *)op;
    const char *name;
    char what[256];
    int rc;

    if (!PyArg_ParseTuple(args, "s:delete", &name))
        return NULL;
    if (client_enter(self) < 0)
        return NULL;
    PyThreadState *ts = PyEval_SaveThread();
    rc = tw_delete(self->c, name);
    PyEval_RestoreThread(ts);
    if (rc < 0) {
        raise_call(self, rc, op_name(what, sizeof(what), "rm", name));
        client_leave(self);
        return NULL;
    }
    client_leave(self);
    Py_RETURN_NONE;
}

/* list(prefix) -> [(name, dtype_code, shape, nbytes, device_tag)] */
static PyObject *client_list(PyObject *op, PyObject *args)
{
    ClientObject *self = (ClientObject *)op;
    const char *prefix = "";
    struct tw_tensor_info *list = NULL;
    size_t n = 0;
    char what[256];
    int rc;

    if (!PyArg_ParseTuple(args, "|s:list", &prefix))
        return NULL;
    if (client_enter(self) < 0)
        return NULL;
    PyThreadState *ts = PyEval_SaveThread();
    rc = tw_list(self->c, prefix, &list, &n);
    PyEval_RestoreThread(ts);
    if (rc < 0) {
        raise_call(self, rc, op_name(what, sizeof(what), "ls", prefix));
        client_leave(self);
        return NULL;
    }
    client_leave(self);
    PyObject *out = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; out && i < n; i++) {
        PyObject *e = desc_tuple(list[i].name, &list[i].desc);
        if (!e) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, e);
    }
    tw_list_free(list);
    return out;
}

static PyObject *client_ping(PyObject *op, PyObject *unused)
{
    ClientObject *self = (ClientObject *)op;
    uint64_t rtt = 0;
    int rc;

    if (client_enter(self) < 0)
        return NULL;
    PyThreadState *ts = PyEval_SaveThread();
    rc = tw_ping(self->c, &rtt);
    PyEval_RestoreThread(ts);
    if (rc < 0) {
        raise_call(self, rc, "ping");
        client_leave(self);
        return NULL;
    }
    client_leave(self);
    return PyFloat_FromDouble((double)rtt / 1e9);
}

static PyObject *client_stats(PyObject *op, PyObject *unused)
{
    ClientObject *self = (ClientObject *)op;
    struct tw_stat_entry *st = NULL;
    size_t n = 0;
    int rc;

    if (client_enter(self) < 0)
        return NULL;
    PyThreadState *ts = PyEval_SaveThread();
    rc = tw_stats(self->c, &st, &n);
    PyEval_RestoreThread(ts);
    if (rc < 0) {
        raise_call(self, rc, "stats");
        client_leave(self);
        return NULL;
    }
    client_leave(self);
    PyObject *out = PyDict_New();
    for (size_t i = 0; out && i < n; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(st[i].value);
        if (!v || PyDict_SetItemString(out, st[i].key, v) < 0) {
            Py_XDECREF(v);
            Py_CLEAR(out);
            break;
        }
        Py_DECREF(v);
    }
    tw_stats_free(st);
    return out;
}

/* Batch state shared by put_many and get_many. */
struct batch {
    PyObject *names; /* tuple of str, owned */
    Py_ssize_t n;
    struct tw_batch_item *items;
    struct target *targets;
    Py_ssize_t ntargets; /* how many targets hold a view */
};

static void batch_release(struct batch *b)
{
    for (Py_ssize_t i = 0; i < b->ntargets; i++)
        target_release(&b->targets[i]);
    PyMem_Free(b->targets);
    PyMem_Free(b->items);
    Py_XDECREF(b->names);
}

/* Names and (optionally) targets into b. objs may be NULL (get_many with
 * library-sized buffers, or the stacked form: the caller fills items; no
 * per-item target is allocated then). */
static int batch_prepare(struct batch *b, PyObject *names, PyObject *objs, int writable,
                         const char *op)
{
    memset(b, 0, sizeof(*b));
    b->names = PySequence_Tuple(names);
    if (!b->names)
        return -1;
    b->n = PyTuple_GET_SIZE(b->names);
    b->items = PyMem_Calloc((size_t)b->n ? (size_t)b->n : 1, sizeof(*b->items));
    if (objs)
        b->targets = PyMem_Calloc((size_t)b->n ? (size_t)b->n : 1, sizeof(*b->targets));
    if (!b->items || (objs && !b->targets)) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < b->n; i++) {
        PyObject *s = PyTuple_GET_ITEM(b->names, i);
        if (!PyUnicode_Check(s)) {
            PyErr_Format(PyExc_TypeError, "%s: item %zd: name must be str, not %.100s", op, i,
                         Py_TYPE(s)->tp_name);
            return -1;
        }
        b->items[i].name = PyUnicode_AsUTF8(s);
        if (!b->items[i].name)
            return -1;
    }
    if (!objs)
        return 0;
    PyObject *fast = PySequence_Fast(objs, "tensors must be a sequence");
    if (!fast)
        return -1;
    if (PySequence_Fast_GET_SIZE(fast) != b->n) {
        PyErr_Format(InvalidArgument, "%s: %zd names but %zd tensors", op, b->n,
                     PySequence_Fast_GET_SIZE(fast));
        Py_DECREF(fast);
        return -1;
    }
    for (Py_ssize_t i = 0; i < b->n; i++) {
        struct target *t = &b->targets[i];
        if (target_from(PySequence_Fast_GET_ITEM(fast, i), writable, t) < 0) {
            Py_DECREF(fast);
            return -1;
        }
        b->ntargets = i + 1;
        /* The item's name goes into a message only when there is one to
         * raise: formatting it for each of 40,960 items cost ~4% of a
         * 32 KiB-block batch. */
        if (t->device != 0) {
            char what[300];
            snprintf(what, sizeof(what), "%s item %zd '%.200s'", op, i, b->items[i].name);
            if (target_check_device(t, what) < 0) {
                Py_DECREF(fast);
                return -1;
            }
        }
        target_desc(t, &b->items[i].desc);
        b->items[i].buf = t->ptr;
        b->items[i].len = t->len;
    }
    Py_DECREF(fast);
    return 0;
}

/* Raises for the first failed item (by index) of a finished batch. row:
 * the one destination shape of every item (stacked form), else NULL and
 * each item's own target. */
static PyObject *batch_raise(struct batch *b, const char *op, int check_shapes,
                             const struct target *row)
{
    for (Py_ssize_t i = 0; i < b->n; i++) {
        struct tw_batch_item *it = &b->items[i];
        const struct target *t = row ? row : &b->targets[i];
        int mismatch = it->status == -ENOBUFS ||
                       (it->status == 0 && check_shapes && target_matches(t, &it->desc) < 0);
        if (!mismatch && it->status >= 0)
            continue;
        char what[300];
        snprintf(what, sizeof(what), "%s item %zd '%.200s'", op, i, it->name);
        if (mismatch)
            return raise_mismatch(what, t, &it->desc, i, it->name);
        return raise_code(it->status, what, NULL, i, it->name);
    }
    return NULL;
}

/* Runs the prepared batch b with the GIL released and raises for the first
 * failed item (by index), naming it. Returns 0 or -1 with an exception. */
static int batch_exec(ClientObject *self, struct batch *b, int is_get, const char *what,
                      const struct target *row)
{
    int rc;

    if (client_enter(self) < 0)
        return -1;
    PyThreadState *ts = PyEval_SaveThread();
    rc = is_get ? tw_batch_get(self->c, b->items, (size_t)b->n)
                : tw_batch_put(self->c, b->items, (size_t)b->n);
    PyEval_RestoreThread(ts);
    client_leave(self);
    /* A get can succeed with an out of the wrong shape: always check. */
    batch_raise(b, what, is_get, row);
    if (!PyErr_Occurred() && rc < 0)
        raise_code(rc, what, NULL, -1, "");
    return PyErr_Occurred() ? -1 : 0;
}

/* put_many(names, tensors) / get_many(names, outs) -> None: one batch, one
 * buffer export per item. */
static PyObject *batch_run(PyObject *op, PyObject *args, int is_get)
{
    const char *what = is_get ? "get_many" : "put_many";
    PyObject *names, *objs;
    struct batch b;
    int rc = -1;

    if (!PyArg_ParseTuple(args, "OO", &names, &objs))
        return NULL;
    if (batch_prepare(&b, names, objs, is_get, what) == 0)
        rc = batch_exec((ClientObject *)op, &b, is_get, what, NULL);
    batch_release(&b);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/*
 * The stacked form: one object T (buffer protocol, torch tensor, CUDA
 * array) with T.shape[0] == n; item i is the row T[i] (shape T.shape[1:],
 * T's dtype, T.nbytes / n bytes). Fills t (T's one export, released by the
 * caller with target_release) and row (the shape every item has; it owns
 * nothing). Returns 0, or -1 with an exception.
 */
static int stacked_from(PyObject *obj, Py_ssize_t n, int writable, const char *what,
                        struct target *t, struct target *row)
{
    if (target_from(obj, writable, t) < 0) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "%s: expected a list or tuple with one tensor per name, or one stacked "
                         "tensor (buffer protocol, torch tensor, CUDA array), not %.100s",
                         what, Py_TYPE(obj)->tp_name);
        }
        return -1;
    }
    if (t->ndim < 1 || t->shape[0] != (uint64_t)n) {
        char have[256];
        shape_text(have, sizeof(have), t->dtype, t->ndim, t->shape);
        PyErr_Format(InvalidArgument,
                     "%s: the stacked tensor is %s but there are %zd names: its first dimension "
                     "must be the number of names (one row per name)",
                     what, have, n);
        return -1;
    }
    if (target_check_device(t, what) < 0)
        return -1;
    *row = *t;
    row->has_view = 0;
    row->ndim = t->ndim - 1;
    memmove(row->shape, t->shape + 1, sizeof(uint64_t) * (size_t)row->ndim);
    row->len = n ? t->len / (size_t)n : 0;
    return 0;
}

/* put_many_stacked(names, T) / get_many_stacked(names, T) -> None: one
 * batch, one export of T for the whole call; item i moves row i. */
static PyObject *batch_run_stacked(PyObject *op, PyObject *args, int is_get)
{
    const char *what = is_get ? "get_many" : "put_many";
    PyObject *names, *obj;
    struct batch b;
    struct target t, row;
    struct tw_tensor_desc d;
    int rc = -1;

    memset(&t, 0, sizeof(t));
    if (!PyArg_ParseTuple(args, "OO", &names, &obj))
        return NULL;
    if (batch_prepare(&b, names, NULL, is_get, what) < 0 ||
        stacked_from(obj, b.n, is_get, what, &t, &row) < 0)
        goto out_release;
    target_desc(&row, &d);
    for (Py_ssize_t i = 0; i < b.n; i++) {
        b.items[i].buf = (char *)t.ptr + (size_t)i * row.len;
        b.items[i].len = row.len;
        if (!is_get)
            b.items[i].desc = d;
    }
    rc = batch_exec((ClientObject *)op, &b, is_get, what, &row);

out_release:
    target_release(&t);
    batch_release(&b);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *client_put_many_stacked(PyObject *op, PyObject *args)
{
    return batch_run_stacked(op, args, 0);
}

static PyObject *client_get_many_stacked(PyObject *op, PyObject *args)
{
    return batch_run_stacked(op, args, 1);
}

static PyObject *client_put_many(PyObject *op, PyObject *args)
{
    return batch_run(op, args, 0);
}

static PyObject *client_get_many(PyObject *op, PyObject *args)
{
    return batch_run(op, args, 1);
}

/* get_many_alloc(names) -> [(Buffer, dtype_code, shape)]: one stat per name
 * (the sizes are not known otherwise), then one batch into fresh buffers. */
static PyObject *client_get_many_alloc(PyObject *op, PyObject *args)
{
    ClientObject *self = (ClientObject *)op;
    PyObject *names, *out = NULL;
    struct batch b;
    Py_ssize_t failed = -1;
    int rc = 0;

    if (!PyArg_ParseTuple(args, "O:get_many_alloc", &names))
        return NULL;
    if (batch_prepare(&b, names, NULL, 1, "get_many") < 0)
        goto out_release;
    if (client_enter(self) < 0)
        goto out_release;
    PyThreadState *ts = PyEval_SaveThread();
    for (Py_ssize_t i = 0; i < b.n; i++) {
        struct tw_tensor_desc d;
        void *p = NULL;
        rc = tw_stat(self->c, b.items[i].name, &d);
        if (rc == 0 && posix_memalign(&p, 4096, d.byte_length ? d.byte_length : 1) != 0)
            rc = -ENOMEM;
        if (rc < 0) {
            failed = i;
            break;
        }
        b.items[i].buf = p;
        b.items[i].len = d.byte_length;
    }
    if (failed < 0)
        rc = tw_batch_get(self->c, b.items, (size_t)b.n);
    PyEval_RestoreThread(ts);
    if (failed >= 0) {
        char what[300];
        snprintf(what, sizeof(what), "get_many item %zd '%.200s'", failed, b.items[failed].name);
        raise_code(rc, what, rc == -ENOMEM ? NULL : tw_client_last_error_message(self->c), failed,
                   b.items[failed].name);
    }
    client_leave(self);
    if (failed >= 0)
        goto out_free;
    for (Py_ssize_t i = 0; i < b.n; i++) {
        if (b.items[i].status < 0) {
            char what[300];
            snprintf(what, sizeof(what), "get_many item %zd '%.200s'", i, b.items[i].name);
            raise_code(b.items[i].status, what, NULL, i, b.items[i].name);
            goto out_free;
        }
    }
    out = PyList_New(b.n);
    for (Py_ssize_t i = 0; out && i < b.n; i++) {
        PyObject *buf = buffer_new(b.items[i].buf, b.items[i].desc.byte_length, 0);
        b.items[i].buf = NULL; /* owned by buf now (or freed) */
        PyObject *e = buf ? Py_BuildValue("(NiN)", buf, (int)b.items[i].desc.dtype,
                                          shape_tuple(&b.items[i].desc))
                          : NULL;
        if (!e) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, e);
    }

out_free:
    for (Py_ssize_t i = 0; i < b.n; i++)
        free(b.items[i].buf);
out_release:
    batch_release(&b);
    return out;
}

static PyObject *client_get_closed(PyObject *op, void *unused)
{
    return PyBool_FromLong(((ClientObject *)op)->c == NULL);
}

/* A text attribute read from the library under the client's lock; the
 * getset entry's closure names the library call. */
struct text_attr {
    const char *(*get)(const tw_client *c);
};
static const struct text_attr attr_data_plane = {tw_client_data_plane};
static const struct text_attr attr_fabric_status = {tw_client_fabric_status};

static PyObject *client_get_text(PyObject *op, void *closure)
{
    ClientObject *self = (ClientObject *)op;
    const struct text_attr *a = closure;
    if (client_enter(self) < 0)
        return NULL;
    PyObject *s = PyUnicode_FromString(a->get(self->c));
    client_leave(self);
    return s;
}

static PyObject *client_get_max_inflight(PyObject *op, void *unused)
{
    ClientObject *self = (ClientObject *)op;
    if (client_enter(self) < 0)
        return NULL;
    PyObject *s = PyLong_FromUnsignedLong(tw_client_max_inflight(self->c));
    client_leave(self);
    return s;
}

static PyMethodDef client_methods[] = {
    {"close", client_close, METH_NOARGS, "close()\n\nSends GOODBYE and closes the connection."},
    {"_put", (PyCFunction)(void (*)(void))client_put, METH_VARARGS | METH_KEYWORDS,
     "_put(name, data, dtype=0, shape=None)"},
    {"_get_into", client_get_into, METH_VARARGS, "_get_into(name, out) -> out"},
    {"_get_alloc", client_get_alloc, METH_VARARGS, "_get_alloc(name) -> (buffer, dtype, shape)"},
    {"_stat", client_stat, METH_VARARGS, "_stat(name) -> tuple"},
    {"_delete", client_delete, METH_VARARGS, "_delete(name)"},
    {"_list", client_list, METH_VARARGS, "_list(prefix) -> [tuple]"},
    {"ping", client_ping, METH_NOARGS,
     "ping() -> float\n\nOne round trip to the server; returns its time in seconds."},
    {"stats", client_stats, METH_NOARGS,
     "stats() -> dict[str, int]\n\nThe server's counters, e.g. stats()['tensors']."},
    {"_put_many", client_put_many, METH_VARARGS, "_put_many(names, tensors)"},
    {"_get_many", client_get_many, METH_VARARGS, "_get_many(names, outs)"},
    {"_put_many_stacked", client_put_many_stacked, METH_VARARGS,
     "_put_many_stacked(names, tensor): item i sends tensor[i]"},
    {"_get_many_stacked", client_get_many_stacked, METH_VARARGS,
     "_get_many_stacked(names, out): item i fills out[i]"},
    {"_get_many_alloc", client_get_many_alloc, METH_VARARGS,
     "_get_many_alloc(names) -> [(buffer, dtype, shape)]"},
    {NULL}};

static PyGetSetDef client_getset[] = {
    {"closed", client_get_closed, NULL, "True once close() ran.", NULL},
    {"data_plane", client_get_text, NULL,
     "Which data plane moved the last get or put ('inline tcp', 'rdma pull (tcp;ofi_rxm)' ...).",
     (void *)&attr_data_plane},
    {"fabric_status", client_get_text, NULL,
     "The RDMA state of the connection ('rdma PROVIDER' or 'inline: REASON').",
     (void *)&attr_fabric_status},
    {"max_inflight", client_get_max_inflight, NULL,
     "Requests the batch calls keep in flight (negotiated).", NULL},
    {NULL}};

static PyTypeObject ClientType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tensorwire._tensorwire.Client",
    .tp_basicsize = sizeof(ClientObject),
    .tp_dealloc = client_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "One connection to a tensorwired server (see tensorwire.Client).",
    .tp_methods = client_methods,
    .tp_getset = client_getset,
    .tp_init = client_init,
    .tp_new = PyType_GenericNew,
};

/* ---- module ---- */

static PyObject *mod_dtype_size(PyObject *m, PyObject *arg)
{
    long code = PyLong_AsLong(arg);
    if (code == -1 && PyErr_Occurred())
        return NULL;
    return PyLong_FromSize_t(tw_dtype_size((int)code));
}

static PyObject *mod_dtype_name(PyObject *m, PyObject *arg)
{
    long code = PyLong_AsLong(arg);
    if (code == -1 && PyErr_Occurred())
        return NULL;
    const char *n = tw_dtype_name((int)code);
    if (!n)
        return PyErr_Format(InvalidArgument, "unknown dtype code %ld", code);
    return PyUnicode_FromString(n);
}

static PyObject *mod_dtype_from_string(PyObject *m, PyObject *arg)
{
    const char *s = PyUnicode_AsUTF8(arg);
    if (!s)
        return NULL;
    int code = tw_dtype_from_string(s);
    if (code < 0)
        return PyErr_Format(InvalidArgument, "unknown dtype '%s'", s);
    return PyLong_FromLong(code);
}

static PyObject *mod_set_converter(PyObject *m, PyObject *fn)
{
    if (!PyCallable_Check(fn))
        return PyErr_Format(PyExc_TypeError, "converter must be callable");
    Py_INCREF(fn);
    Py_XSETREF(converter, fn);
    Py_RETURN_NONE;
}

static PyObject *mod_version(PyObject *m, PyObject *unused)
{
    return PyUnicode_FromString(TW_VERSION_STRING);
}

static PyMethodDef module_methods[] = {
    {"dtype_size", mod_dtype_size, METH_O, "Bytes per element of a dtype code."},
    {"dtype_name", mod_dtype_name, METH_O, "Short name ('f32', 'bf16' ...) of a dtype code."},
    {"dtype_from_string", mod_dtype_from_string, METH_O,
     "dtype code of a name ('f32', 'float32', 'bf16' ...)."},
    {"library_version", mod_version, METH_NOARGS, "The version libtensorwire was built as."},
    {"_set_converter", mod_set_converter, METH_O,
     "Registers f(obj) -> target tuple for objects without the buffer protocol."},
    {NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_tensorwire",
    "C extension of the tensorwire package; use the tensorwire module.", -1, module_methods};

static int add_exc(PyObject *m, PyObject **slot, const char *name, PyObject *base, PyObject *pybase,
                   const char *doc)
{
    char full[128];
    PyObject *bases;
    snprintf(full, sizeof(full), "tensorwire.%s", name);
    bases = pybase ? PyTuple_Pack(2, base, pybase) : PyTuple_Pack(1, base);
    if (!bases)
        return -1;
    *slot = PyErr_NewExceptionWithDoc(full, doc, bases, NULL);
    Py_DECREF(bases);
    if (!*slot)
        return -1;
    Py_INCREF(*slot);
    return PyModule_AddObject(m, name, *slot);
}

PyMODINIT_FUNC PyInit__tensorwire(void)
{
    PyObject *m, *dict;

    if (PyType_Ready(&BufferType) < 0 || PyType_Ready(&ClientType) < 0)
        return NULL;
    m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    /* Error carries code/code_name/detail/index/name; defaults as class
     * attributes so every instance has them. */
    dict = Py_BuildValue("{s:i,s:s,s:s,s:O,s:O}", "code", 0, "code_name", "", "detail", "", "index",
                         Py_None, "name", Py_None);
    if (!dict)
        goto out_mod;
    Error = PyErr_NewExceptionWithDoc(
        "tensorwire.Error",
        "A tensorwire call failed. Attributes: code (the library's negative code), code_name "
        "(e.g. 'NOT_FOUND'), detail (the server's or library's message); inside a batch also "
        "index and name of the failed item.",
        NULL, dict);
    Py_DECREF(dict);
    if (!Error)
        goto out_mod;
    Py_INCREF(Error);
    if (PyModule_AddObject(m, "Error", Error) < 0)
        goto out_mod;
    if (add_exc(m, &NotFound, "NotFound", Error, PyExc_LookupError, "No tensor of that name.") ||
        add_exc(m, &CapacityExceeded, "CapacityExceeded", Error, NULL,
                "The server has no room for the tensor.") ||
        add_exc(m, &DeviceUnavailable, "DeviceUnavailable", Error, NULL,
                "The device (e.g. CUDA memory) cannot be used on this path.") ||
        add_exc(m, &Unauthorized, "Unauthorized", Error, PyExc_PermissionError,
                "Authentication failed (missing or wrong token).") ||
        add_exc(m, &TimeoutErr, "Timeout", Error, PyExc_TimeoutError,
                "No progress within the timeout; the connection is closed.") ||
        add_exc(m, &ConnectionClosed, "ConnectionClosed", Error, PyExc_ConnectionError,
                "The connection is gone (server died, shut down, refused, or closed after an "
                "earlier connection-level error).") ||
        add_exc(m, &ProtocolError, "ProtocolError", Error, NULL,
                "The peer sent something malformed or out of order; the connection is closed.") ||
        add_exc(m, &InvalidArgument, "InvalidArgument", Error, PyExc_ValueError,
                "A bad name, dtype or shape, or an out= that does not fit the tensor.") ||
        add_exc(m, &Busy, "Busy", Error, NULL, "The server is full; try again later.") ||
        add_exc(m, &ChecksumMismatch, "ChecksumMismatch", Error, NULL,
                "The CRC32C of the bytes did not match."))
        goto out_mod;
    Py_INCREF(&ClientType);
    if (PyModule_AddObject(m, "Client", (PyObject *)&ClientType) < 0)
        goto out_mod;
    Py_INCREF(&BufferType);
    if (PyModule_AddObject(m, "Buffer", (PyObject *)&BufferType) < 0)
        goto out_mod;
#ifdef TW_CLIENT_DEVICE_MEMORY
    PyModule_AddIntConstant(m, "DEVICE_MEMORY", 1);
#else
    PyModule_AddIntConstant(m, "DEVICE_MEMORY", 0);
#endif
    return m;

out_mod:
    Py_DECREF(m);
    return NULL;
}
