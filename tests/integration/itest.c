#include "itest.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "net/sock.h"
#include "proto/auth.h"
#include "tw_test.h"

#define IO_TIMEOUT_S 20

uint64_t itest_now_ms(void)
{
    (void)tw_test_cases_run; /* tw_test.h's counter belongs to the test mains */
    return tw__now_ms();
}

void itest_fill(uint8_t *p, size_t n, uint32_t seed)
{
    tw_test_fill(p, n, seed);
}

void itest_server_start(struct itest_server *s, const char *const *args)
{
    const char *bdir = getenv("TW_BUILD_DIR");
    const char *level = getenv("TW_TEST_LOG");
    char path[4096];
    const char *argv[64];
    int n = 0, pfd[2];
    snprintf(path, sizeof(path), "%s/tensorwired", bdir ? bdir : ".");
    /* TW_TEST_SERVER_WRAPPER="valgrind --error-exitcode=99 --leak-check=full"
     * runs the daemon under a tool; words split on spaces. */
    char wrap[512];
    const char *w = getenv("TW_TEST_SERVER_WRAPPER");
    if (w && *w) {
        snprintf(wrap, sizeof(wrap), "%s", w);
        for (char *save = NULL, *tok = strtok_r(wrap, " ", &save); tok && n < 16;
             tok = strtok_r(NULL, " ", &save))
            argv[n++] = tok;
    }
    argv[n++] = path;
    argv[n++] = "--listen";
    argv[n++] = "127.0.0.1:0";
    argv[n++] = "--log-level";
    argv[n++] = level ? level : "warn";
    for (int i = 0; args && args[i] && n < 62; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    if (pipe(pfd) < 0)
        TW_FAIL("pipe: %s", strerror(errno));
    s->pid = fork();
    if (s->pid < 0)
        TW_FAIL("fork: %s", strerror(errno));
    if (s->pid == 0) {
        /* A test that fails exits at once: take the server down with it
         * (CTest would otherwise wait for the orphan holding its stderr). */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(pfd[1], 1);
        close(pfd[0]);
        close(pfd[1]);
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(pfd[1]);
    char line[256];
    size_t len = 0;
    uint64_t deadline = itest_now_ms() + 30000;
    while (len < sizeof(line) - 1 && (len == 0 || line[len - 1] != '\n')) {
        struct pollfd p = {.fd = pfd[0], .events = POLLIN};
        int left = (int)(deadline - itest_now_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0)
            TW_FAIL("tensorwired did not print its address within 30 s");
        ssize_t r = read(pfd[0], line + len, 1);
        if (r <= 0)
            TW_FAIL("tensorwired exited before listening (see its stderr above)");
        len += (size_t)r;
    }
    line[len] = '\0';
    close(pfd[0]); /* later stdout writes would get EPIPE: the server prints nothing else */
    const char *prefix = "listening on 127.0.0.1:";
    if (strncmp(line, prefix, strlen(prefix)) != 0)
        TW_FAIL("unexpected first line from tensorwired: %s", line);
    s->port = atoi(line + strlen(prefix));
    snprintf(s->addr, sizeof(s->addr), "127.0.0.1:%d", s->port);
    TW_ASSERT(s->port > 0);
}

int itest_server_alive(struct itest_server *s)
{
    int st;
    return s->pid > 0 && waitpid(s->pid, &st, WNOHANG) == 0;
}

int itest_server_stop(struct itest_server *s, int sig, int timeout_ms)
{
    int st;
    if (sig)
        kill(s->pid, sig);
    uint64_t deadline = itest_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        pid_t r = waitpid(s->pid, &st, WNOHANG);
        if (r == s->pid)
            break;
        if (itest_now_ms() > deadline) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &st, 0);
            TW_FAIL("tensorwired did not exit within %d ms of signal %d", timeout_ms, sig);
        }
        usleep(10000);
    }
    s->pid = 0;
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    return 128 + WTERMSIG(st);
}

void itc_connect(struct itc *c, const struct itest_server *s)
{
    struct sockaddr_in sa;
    memset(c, 0, sizeof(*c));
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)s->port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc = tw__net_connect((struct sockaddr *)&sa, sizeof(sa), &c->fd);
    if (rc < 0)
        TW_FAIL("connect to %s: %s", s->addr, tw_strerror(rc));
    struct timeval tv = {.tv_sec = IO_TIMEOUT_S};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    c->cap = 1u << 16; /* grows to the largest frame received */
    c->buf = malloc(c->cap);
    TW_ASSERT(c->buf != NULL);
    c->next_id = 1;
    c->max_frame = TW_PREAUTH_MAX_FRAME;
}

void itc_close(struct itc *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    free(c->buf);
    c->buf = NULL;
}

uint64_t itc_id(struct itc *c)
{
    return c->next_id++;
}

void itc_msg(struct tw_msg *m, uint32_t tag, uint64_t id)
{
    memset(m, 0, sizeof(*m));
    m->hdr.tag = tag;
    m->hdr.request_id = id;
}

uint64_t itc_send_put(struct itc *c, const struct tw_descriptor *d, uint32_t flags)
{
    struct tw_msg m;
    uint64_t id = itc_id(c);
    itc_msg(&m, TW_TAG_TENSOR_PUT, id);
    m.u.tensor_put.flags = flags;
    m.u.tensor_put.desc = *d;
    itc_send(c, &m);
    return id;
}

uint64_t itc_send_get(struct itc *c, const char *name, uint32_t flags)
{
    struct tw_msg m;
    uint64_t id = itc_id(c);
    itc_msg(&m, TW_TAG_TENSOR_REQUEST, id);
    m.u.tensor_request.flags = flags;
    m.u.tensor_request.name.ptr = (const uint8_t *)name;
    m.u.tensor_request.name.len = (uint32_t)strlen(name);
    itc_send(c, &m);
    return id;
}

void itc_send_error(struct itc *c, uint64_t id, uint32_t code)
{
    struct tw_msg m;
    itc_msg(&m, TW_TAG_ERROR, id);
    m.u.error.code = code;
    itc_send(c, &m);
}

int itc_send_raw(struct itc *c, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

void itc_send(struct itc *c, const struct tw_msg *m)
{
    ssize_t len = tw__msg_encoded_len(m);
    if (len < 0)
        TW_FAIL("encode %s: %s", tw__tag_name(m->hdr.tag), tw_strerror_name((int)len));
    uint8_t *b = malloc((size_t)len);
    TW_ASSERT(b != NULL);
    ssize_t n = tw__msg_encode(m, b, (size_t)len);
    if (n < 0)
        TW_FAIL("encode %s: %s", tw__tag_name(m->hdr.tag), tw_strerror_name((int)n));
    int rc = itc_send_raw(c, b, (size_t)n);
    free(b);
    if (rc < 0)
        TW_FAIL("send %s: %s", tw__tag_name(m->hdr.tag), tw_strerror(rc));
}

int itc_recv(struct itc *c, struct tw_msg *m)
{
    for (;;) {
        size_t avail = c->end - c->start;
        if (avail >= TW_FRAME_HEADER_LEN) {
            ssize_t n = tw__msg_decode(c->buf + c->start, avail, TW_MAX_MAX_FRAME, m);
            if (n > 0) {
                c->start += (size_t)n;
                return 0;
            }
            if (n != TW_EAGAIN_FRAME)
                return (int)n;
        }
        if (c->start > 0) {
            memmove(c->buf, c->buf + c->start, avail);
            c->end = avail;
            c->start = 0;
        }
        if (c->end == c->cap) {
            c->cap *= 2;
            c->buf = realloc(c->buf, c->cap);
            TW_ASSERT(c->buf != NULL);
        }
        ssize_t r = recv(c->fd, c->buf + c->end, c->cap - c->end, 0);
        if (r == 0)
            return -EPIPE;
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return (errno == EAGAIN || errno == EWOULDBLOCK) ? -ETIMEDOUT : -errno;
        c->end += (size_t)r;
    }
}

int itc_expect_eof(struct itc *c)
{
    struct tw_msg m;
    for (int i = 0; i < 1000000; i++) {
        int rc = itc_recv(c, &m);
        if (rc == -EPIPE || rc == -ECONNRESET)
            return 0;
        if (rc < 0)
            return rc;
    }
    return -EIO;
}

void itc_expect_error(struct itc *c, uint64_t id, uint32_t code)
{
    itc_expect_error_text(c, id, code, NULL, 0);
}

void itc_expect_error_text(struct itc *c, uint64_t id, uint32_t code, char *text, size_t len)
{
    struct tw_msg m;
    int rc = itc_recv(c, &m);
    if (rc < 0)
        TW_FAIL("expected ERROR(%s, id %llu), got %s", tw_strerror_name(TW_ERR_FROM_WIRE(code)),
                (unsigned long long)id, tw_strerror_name(rc));
    if (m.hdr.tag != TW_TAG_ERROR)
        TW_FAIL("expected ERROR(%s, id %llu), got %s (id %llu)",
                tw_strerror_name(TW_ERR_FROM_WIRE(code)), (unsigned long long)id,
                tw__tag_name(m.hdr.tag), (unsigned long long)m.hdr.request_id);
    if (m.hdr.request_id != id || m.u.error.code != code)
        TW_FAIL("expected ERROR(%s, id %llu), got ERROR(%s, id %llu): %.*s",
                tw_strerror_name(TW_ERR_FROM_WIRE(code)), (unsigned long long)id,
                tw_strerror_name(TW_ERR_FROM_WIRE(m.u.error.code)),
                (unsigned long long)m.hdr.request_id, (int)m.u.error.message.len,
                (const char *)m.u.error.message.ptr);
    fprintf(stderr, "  got ERROR(%s, %llu): %.*s\n", tw_strerror_name(TW_ERR_FROM_WIRE(code)),
            (unsigned long long)id, (int)m.u.error.message.len,
            (const char *)m.u.error.message.ptr);
    if (text && len)
        snprintf(text, len, "%.*s", (int)m.u.error.message.len,
                 (const char *)m.u.error.message.ptr);
}

int itc_handshake_caps(struct itc *c, const char *token, uint64_t caps)
{
    struct tw_msg m;
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_HELLO;
    m.u.hello.caps = caps;
    m.u.hello.max_frame = TW_DEFAULT_MAX_FRAME;
    m.u.hello.max_inflight = 256;
    m.u.hello.agent.ptr = (const uint8_t *)"itest";
    m.u.hello.agent.len = 5;
    itc_send(c, &m);
    int rc = itc_recv(c, &m);
    if (rc < 0)
        TW_FAIL("no HELLO_ACK: %s", tw_strerror_name(rc));
    if (m.hdr.tag == TW_TAG_ERROR)
        return (int)m.u.error.code;
    TW_ASSERT_EQ(m.hdr.tag, TW_TAG_HELLO_ACK);
    c->max_frame = m.u.hello_ack.max_frame;
    c->caps = m.u.hello_ack.caps;
    if (m.u.hello_ack.auth_method == TW_AUTH_NONE)
        return 0;
    TW_ASSERT_EQ(m.u.hello_ack.auth_method, TW_AUTH_HMAC_SHA256);
    /* No token: AUTH carries an all-zero MAC, which the server must reject. */
    const uint8_t *key = (const uint8_t *)(token ? token : "");
    size_t key_len = token ? strlen(token) : 0;
    uint8_t snonce[TW_AUTH_NONCE_LEN];
    memcpy(snonce, m.u.hello_ack.server_nonce, sizeof(snonce));
    struct tw_msg a;
    memset(&a, 0, sizeof(a));
    a.hdr.tag = TW_TAG_AUTH;
    TW_ASSERT_OK(tw__auth_nonce(a.u.auth.client_nonce));
    if (key_len)
        TW_ASSERT_OK(tw__auth_mac(key, key_len, TW_AUTH_PROOF_CLIENT, snonce, a.u.auth.client_nonce,
                                  a.u.auth.mac));
    itc_send(c, &a);
    rc = itc_recv(c, &m);
    if (rc < 0)
        TW_FAIL("no AUTH_OK: %s", tw_strerror_name(rc));
    if (m.hdr.tag == TW_TAG_ERROR)
        return (int)m.u.error.code;
    TW_ASSERT_EQ(m.hdr.tag, TW_TAG_AUTH_OK);
    uint8_t want[TW_AUTH_MAC_LEN];
    TW_ASSERT_OK(
        tw__auth_mac(key, key_len, TW_AUTH_PROOF_SERVER, snonce, a.u.auth.client_nonce, want));
    TW_ASSERT_MEM_EQ(m.u.auth_ok.mac, want, TW_AUTH_MAC_LEN);
    return 0;
}

int itc_handshake(struct itc *c, const char *token)
{
    return itc_handshake_caps(c, token, TW_CAP_INLINE_DATA | TW_CAP_PAYLOAD_CRC32C);
}

void itest_desc(struct tw_descriptor *d, const char *name, uint8_t dtype, uint8_t ndim,
                const uint64_t *shape)
{
    memset(d, 0, sizeof(*d));
    d->dtype = dtype;
    d->ndim = ndim;
    if (ndim)
        memcpy(d->shape, shape, sizeof(uint64_t) * ndim);
    TW_ASSERT_OK(tw__shape_bytes(dtype, ndim, shape, &d->byte_length));
    d->name.ptr = (const uint8_t *)name;
    d->name.len = (uint32_t)strlen(name);
    d->device_tag.ptr = (const uint8_t *)"cpu";
    d->device_tag.len = 3;
}

static int expect_reply(struct itc *c, uint64_t id, uint32_t tag, struct tw_msg *m)
{
    int rc = itc_recv(c, m);
    if (rc < 0)
        TW_FAIL("waiting for %s (id %llu): %s", tw__tag_name(tag), (unsigned long long)id,
                tw_strerror_name(rc));
    if (m->hdr.tag == TW_TAG_ERROR && m->hdr.request_id == id)
        return (int)m->u.error.code;
    if (m->hdr.tag != tag || m->hdr.request_id != id)
        TW_FAIL("expected %s (id %llu), got %s (id %llu)", tw__tag_name(tag),
                (unsigned long long)id, tw__tag_name(m->hdr.tag),
                (unsigned long long)m->hdr.request_id);
    return 0;
}

int itc_put(struct itc *c, const char *name, uint8_t dtype, uint8_t ndim, const uint64_t *shape,
            const void *data, uint64_t len, int with_crc)
{
    struct tw_msg m, r;
    uint64_t id = itc_id(c);
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_TENSOR_PUT;
    m.hdr.request_id = id;
    itest_desc(&m.u.tensor_put.desc, name, dtype, ndim, shape);
    TW_ASSERT_EQ_U64(m.u.tensor_put.desc.byte_length, len);
    if (with_crc) {
        m.u.tensor_put.desc.flags = TW_DESC_HAS_CRC32C;
        m.u.tensor_put.desc.crc32c = tw__crc32c(0, data, (size_t)len);
    }
    itc_send(c, &m);
    int rc = expect_reply(c, id, TW_TAG_PUT_ACCEPT, &r);
    if (rc)
        return rc;
    TW_ASSERT_EQ(r.u.put_accept.data_plane, TW_DP_INLINE);
    size_t chunk = c->max_frame - TW_DATA_PREFIX_LEN;
    if (chunk > (1u << 20))
        chunk = 1u << 20;
    uint64_t off = 0;
    do {
        size_t n = len - off < chunk ? (size_t)(len - off) : chunk;
        memset(&m, 0, sizeof(m));
        m.hdr.tag = TW_TAG_DATA;
        m.hdr.request_id = id;
        m.hdr.flags = off + n < len ? TW_FRAME_MORE : 0;
        m.u.data.offset = off;
        m.u.data.bytes.ptr = NULL;
        m.u.data.bytes.len = (uint32_t)n;
        uint8_t hdr[TW_FRAME_HEADER_LEN + TW_DATA_PREFIX_LEN];
        TW_ASSERT_EQ(tw__msg_encode(&m, hdr, sizeof(hdr)), (long long)sizeof(hdr));
        TW_ASSERT_OK(itc_send_raw(c, hdr, sizeof(hdr)));
        if (n)
            TW_ASSERT_OK(itc_send_raw(c, (const uint8_t *)data + off, n));
        off += n;
    } while (off < len);
    return expect_reply(c, id, TW_TAG_OK, &r);
}

int itc_get(struct itc *c, const char *name, uint8_t **out, uint64_t *out_len,
            struct tw_descriptor *desc_out)
{
    struct tw_msg r;
    uint64_t id = itc_send_get(c, name, 0);
    int rc = expect_reply(c, id, TW_TAG_TENSOR_INFO, &r);
    if (rc)
        return rc;
    TW_ASSERT_EQ(r.u.tensor_info.data_plane, TW_DP_INLINE);
    struct tw_descriptor d = r.u.tensor_info.desc;
    TW_ASSERT_EQ(d.name.len, strlen(name));
    TW_ASSERT_MEM_EQ(d.name.ptr, name, d.name.len);
    d.name.ptr = NULL;
    d.device_tag.ptr = NULL;
    uint64_t len = d.byte_length, off = 0;
    uint8_t *buf = malloc(len ? (size_t)len : 1);
    TW_ASSERT(buf != NULL);
    for (;;) {
        rc = expect_reply(c, id, TW_TAG_DATA, &r);
        if (rc)
            TW_FAIL("GET %s: ERROR %u mid-transfer", name, rc);
        TW_ASSERT_EQ_U64(r.u.data.offset, off);
        TW_ASSERT(off + r.u.data.bytes.len <= len);
        memcpy(buf + off, r.u.data.bytes.ptr, r.u.data.bytes.len);
        off += r.u.data.bytes.len;
        if (!(r.hdr.flags & TW_FRAME_MORE))
            break;
    }
    TW_ASSERT_EQ_U64(off, len);
    if (d.flags & TW_DESC_HAS_CRC32C)
        TW_ASSERT_EQ_U64(tw__crc32c(0, buf, (size_t)len), d.crc32c);
    *out = buf;
    *out_len = len;
    if (desc_out)
        *desc_out = d;
    return 0;
}

static int name_op(struct itc *c, uint32_t tag, const char *name, uint32_t reply, struct tw_msg *r)
{
    struct tw_msg m;
    uint64_t id = itc_id(c);
    memset(&m, 0, sizeof(m));
    m.hdr.tag = tag;
    m.hdr.request_id = id;
    m.u.name.name.ptr = (const uint8_t *)name;
    m.u.name.name.len = (uint32_t)strlen(name);
    itc_send(c, &m);
    return expect_reply(c, id, reply, r);
}

int itc_stat(struct itc *c, const char *name, struct tw_descriptor *desc_out)
{
    struct tw_msg r;
    int rc = name_op(c, TW_TAG_STAT, name, TW_TAG_TENSOR_INFO, &r);
    if (rc)
        return rc;
    TW_ASSERT_EQ(r.u.tensor_info.data_plane, TW_DP_NONE);
    if (desc_out) {
        *desc_out = r.u.tensor_info.desc;
        desc_out->name.ptr = NULL;
        desc_out->device_tag.ptr = NULL;
    }
    return 0;
}

int itc_delete(struct itc *c, const char *name)
{
    struct tw_msg r;
    return name_op(c, TW_TAG_DELETE, name, TW_TAG_OK, &r);
}

int itc_list(struct itc *c, const char *prefix, char ***names, size_t *n, size_t *frames)
{
    struct tw_msg m, r;
    uint64_t id = itc_id(c);
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_LIST;
    m.hdr.request_id = id;
    m.u.list.prefix.ptr = (const uint8_t *)prefix;
    m.u.list.prefix.len = (uint32_t)strlen(prefix);
    itc_send(c, &m);
    *names = NULL;
    *n = 0;
    *frames = 0;
    size_t cap = 0;
    for (;;) {
        int rc = expect_reply(c, id, TW_TAG_LIST_REPLY, &r);
        if (rc)
            return rc;
        (*frames)++;
        size_t cur = 0;
        struct tw_descriptor d;
        uint32_t seen = 0;
        while ((rc = tw__list_next(&r, &cur, &d)) == 1) {
            if (*n == cap) {
                cap = cap ? cap * 2 : 64;
                *names = realloc(*names, cap * sizeof(char *));
            }
            char *s = malloc(d.name.len + 1);
            memcpy(s, d.name.ptr, d.name.len);
            s[d.name.len] = '\0';
            (*names)[(*n)++] = s;
            seen++;
        }
        TW_ASSERT_EQ(rc, 0);
        TW_ASSERT_EQ(seen, r.u.list_reply.count);
        if (!(r.hdr.flags & TW_FRAME_MORE))
            return 0;
    }
}

void itc_free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

uint64_t itc_stat_value(struct itc *c, const char *key)
{
    struct tw_msg m, r;
    uint64_t id = itc_id(c), found = UINT64_MAX;
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_STATS;
    m.hdr.request_id = id;
    itc_send(c, &m);
    TW_ASSERT_EQ(expect_reply(c, id, TW_TAG_STATS_REPLY, &r), 0);
    size_t cur = 0;
    struct tw_bytes k;
    uint64_t v;
    int rc;
    while ((rc = tw__stats_next(&r, &cur, &k, &v)) == 1)
        if (k.len == strlen(key) && memcmp(k.ptr, key, k.len) == 0)
            found = v;
    TW_ASSERT_EQ(rc, 0);
    return found;
}

int itc_ping(struct itc *c)
{
    struct tw_msg m, r;
    uint64_t id = itc_id(c);
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_PING;
    m.hdr.request_id = id;
    memcpy(m.u.ping.payload, "pingpong", 8);
    itc_send(c, &m);
    int rc = expect_reply(c, id, TW_TAG_PONG, &r);
    if (rc)
        return rc;
    TW_ASSERT_MEM_EQ(r.u.ping.payload, "pingpong", 8);
    return 0;
}
