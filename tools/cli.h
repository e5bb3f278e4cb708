/*
 * Shared pieces of the tensorwire CLI (tools/tensorwire.c) and its bench
 * command (tools/bench.c, tools/raw_loop.c).
 */
#ifndef TW_TOOLS_CLI_H
#define TW_TOOLS_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "tensorwire/tensorwire.h"
#include "tools/clock.h"

/* Exit statuses of every command. */
#define TW_CLI_OK 0
#define TW_CLI_FAILED 1
#define TW_CLI_USAGE 2

struct tw_cli {
    const char *server; /* HOST:PORT */
    struct tw_client_options opts;
};

/* Connects with the global options; on failure prints
 * "tensorwire: connect ADDR: CODE: reason" and returns NULL. */
tw_client *tw_cli_connect(const struct tw_cli *cli);
/* Prints "tensorwire: WHAT: CODE: detail" for rc on stderr; returns
 * TW_CLI_FAILED. */
int tw_cli_fail(tw_client *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

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
 * thread streams the bytes back. Writes and reads move up to one tensor
 * (at most 1 GiB) per system call loop, like tw_raw_loop. Returns 0 or
 * -errno with the elapsed wall time.
 */
int tw_raw_stream(int op_put, uint64_t size, uint64_t count, int sockbuf, uint64_t *elapsed_ns);

#endif
