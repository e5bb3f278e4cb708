/* tensorwired entry point: configuration, then the server loop. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "server/config.h"
#include "server/log.h"
#include "server/server.h"

int main(int argc, char **argv)
{
    struct tw_srv_config cfg;
    struct tw_srv srv;
    char err[512] = "";

    tw__srv_config_defaults(&cfg);
    int rc = tw__srv_config_from_args(&cfg, argc, argv, err, sizeof(err));
    if (rc == 1)
        return 0;
    if (rc < 0) {
        fprintf(stderr, "tensorwired: %s\n(try --help)\n", err);
        return 2;
    }
    tw__log_set_level((enum tw_log_level)cfg.log_level);
    tw__log_set_format((enum tw_log_format)cfg.log_format);
    /* Writes to a vanished peer must fail with EPIPE, not kill the daemon
     * (sendmsg uses MSG_NOSIGNAL; this covers anything else). */
    signal(SIGPIPE, SIG_IGN);

    rc = tw__srv_init(&srv, &cfg, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "tensorwired: %s\n", err);
        return 1;
    }
    rc = tw__metrics_start(&srv, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "tensorwired: %s\n", err);
        tw__srv_destroy(&srv);
        return 1;
    }
    /* Scripts and tests read the bound port (useful with port 0) here. */
    printf("listening on %s\n", srv.bound);
    fflush(stdout);
    char cap[64];
    if (cfg.capacity)
        snprintf(cap, sizeof(cap), "%.2f GiB", (double)cfg.capacity / (double)(1ull << 30));
    else
        snprintf(cap, sizeof(cap), "unlimited");
    TW_LOGI("tensorwired listening on %s (capacity %s, auth %s, max %u connections, "
            "%u requests in flight each)",
            srv.bound, cap, srv.token.len ? "hmac-sha256" : "off", cfg.max_connections,
            cfg.max_inflight);

    rc = tw__srv_run(&srv);
    tw__metrics_stop(&srv);
    tw__srv_destroy(&srv);
    TW_LOGI("tensorwired stopped");
    return rc < 0 ? 1 : 0;
}
