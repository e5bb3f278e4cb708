/*
 * Integration test helpers: start the real tensorwired on an ephemeral
 * loopback port and speak protocol v1 to it over raw sockets, using the
 * codec (src/proto) to build and check frames.
 *
 * Every blocking call is bounded (socket timeouts, waitpid with a deadline),
 * so a hung server fails the test instead of hanging CTest.
 */
#ifndef TW_ITEST_H
#define TW_ITEST_H

#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <sys/types.h>

#include "proto/proto.h"

struct itest_server {
    pid_t pid;
    int port;
    char addr[64];
};

/* Starts build/tensorwired --listen 127.0.0.1:0 --log-level LEVEL args...
 * (LEVEL from $TW_TEST_LOG, default "warn"), NULL-terminated args. Reads the
 * "listening on" line for the port. Fails the test on error. */
void itest_server_start(struct itest_server *s, const char *const *args);
/* Sends sig and waits up to timeout_ms; returns the exit status (the signal
 * number + 128 when killed), or fails the test on a timeout. */
int itest_server_stop(struct itest_server *s, int sig, int timeout_ms);
/* 1 while the server process is alive. */
int itest_server_alive(struct itest_server *s);

struct itc {
    int fd;
    uint8_t *buf;
    size_t cap, start, end;
    uint64_t next_id;
    uint32_t max_frame;
    uint64_t caps;
};

/* Connects (no handshake). Fails the test on error. */
void itc_connect(struct itc *c, const struct itest_server *s);
void itc_close(struct itc *c);
/* HELLO / HELLO_ACK (and AUTH when token != NULL). Returns 0 or the wire
 * code of an ERROR(id 0) the server answered with. */
int itc_handshake(struct itc *c, const char *token);
int itc_handshake_caps(struct itc *c, const char *token, uint64_t caps);

/* Sends one frame (fails the test on a send error). */
void itc_send(struct itc *c, const struct tw_msg *m);
int itc_send_raw(struct itc *c, const void *buf, size_t len);
/* Receives one frame into *m (views valid until the next receive).
 * Returns 0, -EPIPE on EOF, -ETIMEDOUT, or a decoder verdict. */
int itc_recv(struct itc *c, struct tw_msg *m);
/* Receives until EOF, skipping frames; returns 0 on EOF within timeout. */
int itc_expect_eof(struct itc *c);
/* Receives one frame and requires ERROR(code, id); returns nothing. */
void itc_expect_error(struct itc *c, uint64_t id, uint32_t code);
/* The same, and copies the ERROR's message into text (len bytes, always
 * NUL-terminated; text may be NULL). */
void itc_expect_error_text(struct itc *c, uint64_t id, uint32_t code, char *text, size_t len);

uint64_t itc_id(struct itc *c);
/* Zeroes *m and sets its tag and request id: the start of every message a
 * test builds by hand. */
void itc_msg(struct tw_msg *m, uint32_t tag, uint64_t id);
/* Sends TENSOR_PUT(d, flags) under a fresh id and returns the id; reads
 * nothing (the caller expects PUT_ACCEPT or an ERROR). d's views must stay
 * valid for the call only. */
uint64_t itc_send_put(struct itc *c, const struct tw_descriptor *d, uint32_t flags);
/* Sends TENSOR_REQUEST(name, flags) under a fresh id and returns the id;
 * reads nothing. */
uint64_t itc_send_get(struct itc *c, const char *name, uint32_t flags);
/* Sends the client's ERROR(code) for request id (e.g. CANCELLED). */
void itc_send_error(struct itc *c, uint64_t id, uint32_t code);

/* Synchronous operations. Return 0 or the wire error code the server
 * answered (positive); fail the test on anything unexpected. */
int itc_put(struct itc *c, const char *name, uint8_t dtype, uint8_t ndim, const uint64_t *shape,
            const void *data, uint64_t len, int with_crc);
/* GET into a malloc'd buffer (*out, *out_len; caller frees); *desc_out
 * (may be NULL) gets dtype/ndim/shape/byte_length (name view not kept). */
int itc_get(struct itc *c, const char *name, uint8_t **out, uint64_t *out_len,
            struct tw_descriptor *desc_out);
int itc_stat(struct itc *c, const char *name, struct tw_descriptor *desc_out);
int itc_delete(struct itc *c, const char *name);
/* LIST: names (malloc'd array of malloc'd strings) in reply order; returns
 * the number of LIST_REPLY frames in *frames. */
int itc_list(struct itc *c, const char *prefix, char ***names, size_t *n, size_t *frames);
void itc_free_names(char **names, size_t n);
/* STATS value for key, UINT64_MAX when absent. */
uint64_t itc_stat_value(struct itc *c, const char *key);
int itc_ping(struct itc *c);

/* Fills a descriptor for name/dtype/shape with device tag "cpu". */
void itest_desc(struct tw_descriptor *d, const char *name, uint8_t dtype, uint8_t ndim,
                const uint64_t *shape);
/* Deterministic test bytes. */
void itest_fill(uint8_t *p, size_t n, uint32_t seed);
uint64_t itest_now_ms(void);

#endif
