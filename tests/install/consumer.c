/*
 * A program a user would write, built against an installed tensorwire
 * (scripts/check-install.sh): only <tensorwire/tensorwire.h>, linked with
 * -ltensorwire. It checks that the header and the library it runs against
 * agree, and exercises a few calls that need no server.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <tensorwire/tensorwire.h>

int main(void)
{
    uint64_t v = 0;
    struct tw_client_options o;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    char addr[64], err[256];
    tw_client *c = NULL;

    if (strcmp(tw_version(), TW_VERSION_STRING) != 0) {
        fprintf(stderr, "library %s, header %s\n", tw_version(), TW_VERSION_STRING);
        return 1;
    }
    if (tw_parse_size("4Ki", &v) != 0 || v != 4096 || tw_dtype_size(TW_BF16) != 2) {
        fprintf(stderr, "tw_parse_size / tw_dtype_size disagree with the header\n");
        return 1;
    }
    /* A port that was just free: connecting must fail with ECONNREFUSED,
     * through the library's resolver and socket code. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sl) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) != 0)
        return 1;
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));
    close(fd);
    tw_client_options_init(&o);
    o.connect_timeout_ms = 5000;
    int rc = tw_client_connect_error(addr, &o, &c, err, sizeof(err));
    if (rc != -ECONNREFUSED || c != NULL) {
        fprintf(stderr, "connect %s: %d (%s): %s\n", addr, rc, tw_strerror_name(rc), err);
        return 1;
    }
    printf("tensorwire %s: ok (%s: %s)\n", tw_version(), tw_strerror_name(rc), err);
    return 0;
}
