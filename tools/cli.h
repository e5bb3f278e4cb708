/*
 * Shared pieces of the tensorwire CLI (tools/tensorwire.c) and its bench
 * command (tools/bench.c, tools/raw_loop.c).
 */
#ifndef TW_TOOLS_CLI_H
#define TW_TOOLS_CLI_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tensorwire/tensorwire.h"
#include "tools/clock.h"

/* Exit statuses of every command. */
#define TW_CLI_OK 0
#define TW_CLI_FAILED 1
#define TW_CLI_USAGE 2

struct tw_cli {
    const char *server; /* HOST:PORT */
    struct tw_client_options opts;
    int quiet;    /* -q: no progress line, no notes */
    int progress; /* stderr is a terminal and not -q */
};

/* Connects with the global options; on failure prints
 * "tensorwire: connect ADDR: CODE: reason" and returns NULL. */
tw_client *tw_cli_connect(const struct tw_cli *cli);
/* Prints "tensorwire: WHAT: CODE: detail" for rc on stderr; returns
 * TW_CLI_FAILED. */
int tw_cli_fail(tw_client *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Argument errors, one line each, naming the option and the bad value:
 * "tensorwire CMD: OPT: 'VALUE' is not EXPECTED" (cmd NULL for the global
 * options; a long value is cut). Return TW_CLI_USAGE. */
int tw_cli_bad_value(const char *cmd, const char *opt, const char *value, const char *expected);
/* --fabric: "auto", "none", or a list of libfabric provider names
 * ("tcp", "shm,tcp", "tcp;ofi_rxm"); an unknown name is an error. Returns 0
 * or TW_CLI_USAGE after saying which name. */
int tw_cli_check_fabric(const char *cmd, const char *value);
/* --push auto|always|never into *out (enum tw_push_policy); 0 or
 * TW_CLI_USAGE. */
int tw_cli_parse_push(const char *cmd, const char *value, int *out);
/* `tensorwire doctor ...` (argv[0] is "doctor"; tools/doctor.c). */
int tw_cli_doctor(int argc, char **argv);

/* `tensorwire bench ...` (argv[0] is "bench"). */
int tw_cli_bench(const struct tw_cli *cli, int argc, char **argv);

/*
 * The raw-socket baseline: a loopback TCP request/response loop with no
 * protocol, on a sink/source thread of this process. op_put: the client sends
 * a 16-byte request plus size bytes, the thread answers 16 bytes; otherwise
 * the client sends 16 bytes and the thread answers size bytes. inflight
 * requests are kept outstanding on one connection. Fills per-request
 * latencies (ns, count entries) and the elapsed wall time. Returns 0 or -errno.
 */
int tw_raw_loop(int op_put, uint64_t size, uint64_t count, uint32_t inflight, int sockbuf,
                uint64_t *lat_ns, uint64_t *elapsed_ns);
/*
 * The one-way streaming baseline (what iperf3 measures): the same bytes,
 * size * count, as one continuous stream on one loopback connection with no
 * request/response turnarounds. op_put: the client sends a 16-byte request
 * and then the bytes, the thread reads them all and answers 16 bytes (so the
 * time includes delivery); otherwise the client sends 16 bytes and the
 * thread streams the bytes back. Each side cycles through a buffer of one
 * tensor (at most 1 GiB) in system calls of block bytes (0: the whole
 * buffer per call, like tw_raw_loop). Returns 0 or -errno with the elapsed
 * wall time.
 */
int tw_raw_stream(int op_put, uint64_t size, uint64_t count, size_t block, int sockbuf,
                  uint64_t *elapsed_ns);

/* Terminal-safe copy of s in buf (cap >= 32 bytes): control characters (C0,
 * DEL, C1) as \xNN, a backslash doubled, and at most max_shown bytes of s,
 * cut at a character boundary and followed by "...(N bytes)". Returns buf. */
const char *tw_cli_shown(const char *s, char *buf, size_t cap, size_t max_shown);
/* s as a JSON string with its quotes; controls as \u00XX. */
void tw_cli_json_string(FILE *f, const char *s);
/* "512 B", "1.5 MiB", "2.0 GiB" into buf; returns buf. */
const char *tw_cli_bytes(uint64_t n, char *buf, size_t cap);

/*
 * A progress line on stderr for one transfer of total bytes (tools/
 * progress.c says how bytes are counted). start with enabled 0 does
 * nothing, so callers need no branch; stop erases the line and joins the
 * thread. The struct must stay in place between the two calls.
 */
struct tw_cli_progress {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running, stop, shown, sending;
    uint64_t total, base, start_ns, last_done;
    char label[64];
};
void tw_cli_progress_start(struct tw_cli_progress *p, int enabled, int sending, uint64_t total,
                           const char *label);
void tw_cli_progress_stop(struct tw_cli_progress *p);

#endif
