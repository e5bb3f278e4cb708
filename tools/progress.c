/*
 * Progress of one get or put on a terminal.
 *
 * The public API has no progress callback (tw_get and tw_put block until
 * the last byte), so a thread of the CLI watches the TCP byte counters of
 * this process's sockets (TCP_INFO: tcpi_bytes_received for a get,
 * tcpi_bytes_acked for a put, summed over every socket in /proc/self/fd).
 * That counts the inline plane and RDMA over the tcp provider. Planes that
 * move bytes without TCP (shm through cross-memory attach, verbs) leave the
 * counters still: the line then shows 0 bytes and the elapsed time, never a
 * made-up rate. (/proc/self/io is no help: recv() and sendmsg() do not count
 * in its rchar and wchar.)
 *
 * The line appears once the transfer has run TW_CLI_PROGRESS_AFTER_MS, is
 * redrawn every TW_CLI_PROGRESS_TICK_MS with "\r", and is erased when the
 * transfer ends, so short transfers print nothing at all. The ETA says
 * "stalled" while no byte moved since the last redraw.
 */
#include <dirent.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "tools/cli.h"

#define TW_CLI_PROGRESS_AFTER_MS 1000
#define TW_CLI_PROGRESS_TICK_MS 250

/* Bytes received (or, sending, acknowledged by the peer) over every TCP
 * socket of this process. A socket closed meanwhile takes its bytes with
 * it; draw() never lets the shown count go back. */
static uint64_t tcp_bytes(int sending)
{
    uint64_t sum = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    if (!d)
        return 0;
    while ((e = readdir(d)) != NULL) {
        struct tcp_info ti;
        struct stat st;
        socklen_t len = sizeof(ti);
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end || end == e->d_name || fd == dirfd(d))
            continue;
        if (fstat((int)fd, &st) != 0 || !S_ISSOCK(st.st_mode))
            continue;
        memset(&ti, 0, sizeof(ti));
        if (getsockopt((int)fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0)
            continue; /* not TCP (a unix socket, libfabric's own) */
        if (len >= offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(ti.tcpi_bytes_received))
            sum += sending ? ti.tcpi_bytes_acked : ti.tcpi_bytes_received;
    }
    closedir(d);
    return sum;
}

static void draw(struct tw_cli_progress *p, uint64_t now_ns)
{
    char done_s[32], total_s[32], eta[32] = "?";
    uint64_t done = tcp_bytes(p->sending);
    double secs = (double)(now_ns - p->start_ns) / 1e9;
    done = done > p->base ? done - p->base : 0;
    done = done > p->total ? p->total : done;
    done = done < p->last_done ? p->last_done : done;
    double rate = secs > 0 ? (double)done / secs : 0;
    if (done == p->last_done && p->shown)
        snprintf(eta, sizeof(eta), "stalled");
    else if (rate > 0)
        snprintf(eta, sizeof(eta), "%.0f s", (double)(p->total - done) / rate);
    p->last_done = done;
    fprintf(stderr, "\r%s: %s / %s  %.1f MB/s  %.1f s  ETA %s\033[K", p->label,
            tw_cli_bytes(done, done_s, sizeof(done_s)),
            tw_cli_bytes(p->total, total_s, sizeof(total_s)), rate / 1e6, secs, eta);
    fflush(stderr);
    p->shown = 1;
}

static void *progress_main(void *arg)
{
    struct tw_cli_progress *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += TW_CLI_PROGRESS_TICK_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        if (p->stop)
            break;
        uint64_t now = tw_cli_now_ns();
        if (now - p->start_ns >= TW_CLI_PROGRESS_AFTER_MS * 1000000ull)
            draw(p, now);
    }
    if (p->shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

void tw_cli_progress_start(struct tw_cli_progress *p, int enabled, int sending, uint64_t total,
                           const char *label)
{
    pthread_condattr_t ca;
    memset(p, 0, sizeof(*p));
    if (!enabled)
        return;
    p->sending = sending;
    p->total = total;
    snprintf(p->label, sizeof(p->label), "%s", label);
    p->base = tcp_bytes(sending);
    p->start_ns = tw_cli_now_ns();
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cv, &ca);
    pthread_condattr_destroy(&ca);
    /* No thread, no progress line: the transfer itself is unaffected. */
    if (pthread_create(&p->thread, NULL, progress_main, p) == 0) {
        p->running = 1;
        return;
    }
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
}

void tw_cli_progress_stop(struct tw_cli_progress *p)
{
    if (!p->running)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    p->running = 0;
}
