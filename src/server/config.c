/* Option parsing by hand (no getopt_long state to reset in tests, and the
 * same setter serves argv and the config file). */
#include "server/config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gdr/policy.h"
#include "fabric/provider_names.h"
#include "proto/proto.h"
#include "server/log.h"
#include "tensorwire/error.h"

void tw__srv_config_defaults(struct tw_srv_config *c)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->listen, sizeof(c->listen), "%s", TW_SRV_DEFAULT_LISTEN);
    c->capacity = tw__srv_default_capacity();
    c->log_level = TW_LOG_INFO;
    c->max_connections = 1024;
    c->max_handshakes = 256;
    c->max_handshakes_per_address = 128;
    c->max_inflight = 256;
    c->max_frame = TW_DEFAULT_MAX_FRAME;
    c->handshake_timeout_ms = 10000;
    c->handshake_timeout_busy_ms = 1000;
    c->idle_timeout_ms = 300000;
    c->transfer_timeout_ms = 300000;
    c->shutdown_grace_ms = 5000;
    snprintf(c->fabric, sizeof(c->fabric), "auto");
    c->push = TW_SRV_PUSH_AUTO;
    c->rdma_min_bytes = TW_DEFAULT_RDMA_MIN_BYTES;
    c->gpudirect = TW_GDR_MODE_AUTO;
    c->gpudirect_max_distance = TW_PCIE_PXB;
}

uint64_t tw__srv_default_capacity(void)
{
    /* Three quarters of physical memory: an unbounded default would let one
     * client's puts push the host into the OOM killer. */
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || psz <= 0)
        return 0;
    return (uint64_t)pages * (uint64_t)psz / 4 * 3;
}

void tw__srv_config_usage(const char *argv0)
{
    printf("usage: %s [options]\n"
           "\n"
           "tensorwire server: stores named tensors in host memory and serves them\n"
           "over the tensorwire protocol v1.\n"
           "\n"
           "  --listen HOST:PORT       address to listen on (default %s);\n"
           "                           port 0 picks a free port. The bound address is\n"
           "                           printed on stdout as 'listening on HOST:PORT'.\n"
           "  --capacity SIZE          most bytes stored in host memory, in-progress\n"
           "                           puts included (default 3/4 of RAM, 0 = unlimited);\n"
           "                           K/M/G = 1000^n, Ki/Mi/Gi = 1024^n\n"
           "  --capacity cpu=SIZE,cuda:N=SIZE,...\n"
           "                           the same per device; a GPU not named gets 3/4 of\n"
           "                           its free memory at startup\n"
           "  --devices cpu,cuda:N,... where tensors may be stored (default: cpu and\n"
           "                           every visible GPU); a put naming another device\n"
           "                           is refused with DEVICE_UNAVAILABLE\n"
           "  --token-file PATH        require HMAC-SHA256 authentication with this token\n"
           "  --log-level LEVEL        error, warn, info (default) or debug\n"
           "  --log-format FORMAT      text (default) or json (one object per line)\n"
           "  --metrics HOST:PORT      serve Prometheus metrics on http://HOST:PORT/metrics\n"
           "                           (default off; port 0 picks a free port, logged)\n"
           "  --config FILE            read 'key = value' lines with the same keys\n"
           "  --max-connections N      connections served at once (default 1024)\n"
           "  --max-inflight N         requests in flight per connection (default 256)\n"
           "  --max-frame SIZE         largest frame payload announced (default 16Mi)\n"
           "  --handshake-timeout S    seconds to finish HELLO/AUTH (default 10)\n"
           "  --max-handshakes N       connections still in HELLO/AUTH at once (default\n"
           "                           256); when full, the one waiting longest is\n"
           "                           refused with BUSY to make room\n"
           "  --max-handshakes-per-address N\n"
           "                           of those, from one client address (default 128);\n"
           "                           more are refused with BUSY\n"
           "  --handshake-timeout-busy S\n"
           "                           handshake deadline while over half of\n"
           "                           --max-handshakes wait (default 1)\n"
           "  --idle-timeout S         close connections without traffic (default 300, 0 off)\n"
           "  --transfer-timeout S     deadline of one put/get (default 300, 0 off)\n"
           "  --shutdown-grace S       on SIGTERM, wait this long for peers (default 5)\n"
           "  --fabric auto|none|PROV  RDMA data plane through libfabric (default auto:\n"
           "                           verbs, efa, shm, tcp as available); PROV is a\n"
           "                           comma-separated provider list ('tcp', 'shm',\n"
           "                           'tcp;ofi_rxm'). If it cannot open, one log line\n"
           "                           says why and the server runs inline-only.\n"
           "  --push auto|always|never who writes in an RDMA put: auto reads it (over\n"
           "                           shm by cross-memory attach) and lets the client\n"
           "                           push what it cannot read there, always pushes\n"
           "                           when the client supports it, never does not\n"
           "                           offer push (bit 3) at all\n"
           "  --rdma-min-bytes SIZE    gets and puts smaller than this move inline even\n"
           "                           when the client asks for RDMA (default: gets\n"
           "                           %lluKi on shm, %lluKi otherwise; puts %lluKi, the\n"
           "                           client's threshold deciding above; 0 = RDMA at\n"
           "                           every size)\n"
           "  --gpudirect auto|off|require\n"
           "                           GPUDirect RDMA into served GPUs: auto uses it where\n"
           "                           admitted (tensorwire doctor says why not), off\n"
           "                           never, require refuses to start unless a served\n"
           "                           GPU is admitted on the plane's provider\n"
           "  --gpudirect-max-distance PIX|PXB|PHB|NODE|SYS\n"
           "                           farthest GPU-NIC PCIe path admitted (default PXB)\n"
           "  --allow-insecure-token-file  accept a token file that its group or others\n"
           "                           can read (refused by default)\n"
           "  --version                version, protocol version, libfabric and CUDA found\n"
           "  --help                   this text\n",
           argv0, TW_SRV_DEFAULT_LISTEN, (unsigned long long)(TW_DEFAULT_RDMA_MIN_BYTES_SHM / 1024),
           (unsigned long long)(TW_DEFAULT_RDMA_MIN_BYTES / 1024),
           (unsigned long long)(TW_DEFAULT_RDMA_MIN_BYTES_PUT / 1024));
}

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        if (errbuf && errlen)                                                                      \
            snprintf(errbuf, errlen, __VA_ARGS__);                                                 \
        return TW_EINVAL;                                                                          \
    } while (0)

/* The next comma-separated item of *s: [*item, *item + *len); advances *s
 * past the comma. 0 at the end of the string. */
static int next_item(const char **s, const char **item, size_t *len)
{
    if (!*s)
        return 0;
    const char *comma = strchr(*s, ',');
    *item = *s;
    *len = comma ? (size_t)(comma - *s) : strlen(*s);
    *s = comma ? comma + 1 : NULL;
    return 1;
}

int tw__srv_parse_devices(const char *s, struct tw_device *out, unsigned max, unsigned *n,
                          char *errbuf, size_t errlen)
{
    struct tw_device found[TW_SRV_MAX_DEVICES];
    unsigned k = 0;
    const char *item;
    size_t len;
    if (!*s)
        FAIL("empty device list");
    while (next_item(&s, &item, &len)) {
        struct tw_device d;
        int rc = tw__device_parse(item, len, &d);
        if (rc == TW_EDEVICE)
            FAIL("'%.*s' is not a device this server can use (cpu or cuda:N)", (int)len, item);
        if (rc < 0)
            FAIL("'%.*s' is not a device tag (cpu or cuda:N, N in 0..255 without leading "
                 "zeros)",
                 (int)len, item);
        for (unsigned i = 0; i < k; i++)
            if (tw__device_equal(&found[i], &d))
                FAIL("'%.*s' is listed twice", (int)len, item);
        if (k >= max || k >= TW_SRV_MAX_DEVICES)
            FAIL("more than %u devices", max);
        found[k++] = d;
    }
    memcpy(out, found, k * sizeof(found[0]));
    *n = k;
    return 0;
}

int tw__srv_parse_capacity(const char *s, struct tw_srv_config *c, char *errbuf, size_t errlen)
{
    uint64_t v;
    if (!strchr(s, '=')) {
        if (tw_parse_size(s, &v) != 0)
            FAIL("'%s' is not a size", s);
        c->capacity = v;
        return 0;
    }
    uint64_t cpu = c->capacity;
    struct tw_srv_device_capacity caps[TW_SRV_MAX_DEVICES];
    unsigned k = 0, cpu_seen = 0;
    const char *item;
    size_t len;
    while (next_item(&s, &item, &len)) {
        const char *eq = memchr(item, '=', len);
        if (!eq)
            FAIL("'%.*s' is not TAG=SIZE", (int)len, item);
        struct tw_device d;
        if (tw__device_parse(item, (size_t)(eq - item), &d) != 0)
            FAIL("'%.*s' is not a device tag (cpu or cuda:N)", (int)(eq - item), item);
        char size[32];
        size_t slen = len - (size_t)(eq + 1 - item);
        if (slen >= sizeof(size))
            FAIL("'%.*s': size too long", (int)len, item);
        memcpy(size, eq + 1, slen);
        size[slen] = '\0';
        if (tw_parse_size(size, &v) != 0)
            FAIL("'%.*s': '%s' is not a size", (int)len, item, size);
        if (d.type == TW_DEVICE_CPU) {
            if (cpu_seen++)
                FAIL("cpu is given twice");
            cpu = v;
            continue;
        }
        for (unsigned i = 0; i < k; i++)
            if (tw__device_equal(&caps[i].dev, &d))
                FAIL("'%.*s' is given twice", (int)(eq - item), item);
        caps[k++] = (struct tw_srv_device_capacity){.dev = d, .bytes = v};
    }
    c->capacity = cpu;
    memcpy(c->capacities, caps, k * sizeof(caps[0]));
    c->ncapacities = k;
    return 0;
}

int tw__parse_seconds(const char *s, uint64_t *out_ms)
{
    uint64_t whole = 0, frac_ms = 0;
    const char *p = s;
    if (!isdigit((unsigned char)*p))
        return TW_EINVAL;
    for (; isdigit((unsigned char)*p); p++) {
        if (whole > 100000000ull)
            return TW_EINVAL;
        whole = whole * 10 + (uint64_t)(*p - '0');
    }
    if (*p == '.') {
        p++;
        uint64_t scale = 100;
        if (!isdigit((unsigned char)*p))
            return TW_EINVAL;
        for (; isdigit((unsigned char)*p); p++) {
            frac_ms += (uint64_t)(*p - '0') * scale;
            scale /= 10;
        }
    }
    if (*p == 's')
        p++;
    if (*p)
        return TW_EINVAL;
    *out_ms = whole * 1000 + frac_ms;
    return 0;
}

static int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
    uint64_t v = 0;
    if (!isdigit((unsigned char)*s))
        return TW_EINVAL;
    for (; *s; s++) {
        if (!isdigit((unsigned char)*s))
            return TW_EINVAL;
        v = v * 10 + (uint64_t)(*s - '0');
        if (v > hi)
            return TW_EINVAL;
    }
    if (v < lo)
        return TW_EINVAL;
    *out = (uint32_t)v;
    return 0;
}

int tw__srv_config_set(struct tw_srv_config *c, const char *key, const char *value, char *errbuf,
                       size_t errlen)
{
    char k[64];
    size_t i;
    /* Accept max_connections as well as max-connections in files. */
    for (i = 0; key[i] && i + 1 < sizeof(k); i++)
        k[i] = key[i] == '_' ? '-' : key[i];
    k[i] = '\0';

    if (strcmp(k, "listen") == 0) {
        if (strlen(value) >= sizeof(c->listen))
            FAIL("listen: address too long");
        snprintf(c->listen, sizeof(c->listen), "%s", value);
    } else if (strcmp(k, "token-file") == 0) {
        if (strlen(value) >= sizeof(c->token_file))
            FAIL("token-file: path too long");
        snprintf(c->token_file, sizeof(c->token_file), "%s", value);
    } else if (strcmp(k, "allow-insecure-token-file") == 0) {
        if (strcmp(value, "1") != 0 && strcmp(value, "true") != 0 && strcmp(value, "yes") != 0)
            FAIL("allow-insecure-token-file: '%s' is not true (it is a flag)", value);
        c->allow_insecure_token_file = 1;
    } else if (strcmp(k, "capacity") == 0) {
        char why[160];
        if (tw__srv_parse_capacity(value, c, why, sizeof(why)) != 0)
            FAIL("capacity: %s (examples: 64Gi, 2G, cpu=64Gi,cuda:0=40Gi)", why);
    } else if (strcmp(k, "devices") == 0) {
        char why[160];
        if (tw__srv_parse_devices(value, c->devices, TW_SRV_MAX_DEVICES, &c->ndevices, why,
                                  sizeof(why)) != 0)
            FAIL("devices: %s (example: cpu,cuda:0,cuda:1)", why);
    } else if (strcmp(k, "max-frame") == 0) {
        uint64_t v;
        if (tw_parse_size(value, &v) != 0 || v < TW_MIN_MAX_FRAME || v > TW_MAX_MAX_FRAME)
            FAIL("max-frame: '%s' must be a size between 64Ki and 1Gi", value);
        c->max_frame = (uint32_t)v;
    } else if (strcmp(k, "log-level") == 0) {
        int l = tw__log_level_parse(value);
        if (l < 0)
            FAIL("log-level: '%s' is not one of error, warn, info, debug", value);
        c->log_level = l;
    } else if (strcmp(k, "log-format") == 0) {
        int f = tw__log_format_parse(value);
        if (f < 0)
            FAIL("log-format: '%s' is not one of text, json", value);
        c->log_format = f;
    } else if (strcmp(k, "metrics") == 0) {
        if (strlen(value) >= sizeof(c->metrics))
            FAIL("metrics: address too long");
        snprintf(c->metrics, sizeof(c->metrics), "%s", value);
    } else if (strcmp(k, "max-connections") == 0) {
        if (parse_u32(value, 1, 1000000, &c->max_connections) != 0)
            FAIL("max-connections: '%s' must be a number 1..1000000", value);
    } else if (strcmp(k, "max-inflight") == 0) {
        if (parse_u32(value, 1, 65536, &c->max_inflight) != 0)
            FAIL("max-inflight: '%s' must be a number 1..65536", value);
    } else if (strcmp(k, "handshake-timeout") == 0) {
        if (tw__parse_seconds(value, &c->handshake_timeout_ms) != 0)
            FAIL("handshake-timeout: '%s' is not a number of seconds", value);
    } else if (strcmp(k, "max-handshakes") == 0) {
        if (parse_u32(value, 1, 1000000, &c->max_handshakes) != 0)
            FAIL("max-handshakes: '%s' must be a number 1..1000000", value);
    } else if (strcmp(k, "max-handshakes-per-address") == 0) {
        if (parse_u32(value, 1, 1000000, &c->max_handshakes_per_address) != 0)
            FAIL("max-handshakes-per-address: '%s' must be a number 1..1000000", value);
    } else if (strcmp(k, "handshake-timeout-busy") == 0) {
        if (tw__parse_seconds(value, &c->handshake_timeout_busy_ms) != 0)
            FAIL("handshake-timeout-busy: '%s' is not a number of seconds", value);
    } else if (strcmp(k, "idle-timeout") == 0) {
        if (tw__parse_seconds(value, &c->idle_timeout_ms) != 0)
            FAIL("idle-timeout: '%s' is not a number of seconds", value);
    } else if (strcmp(k, "transfer-timeout") == 0) {
        if (tw__parse_seconds(value, &c->transfer_timeout_ms) != 0)
            FAIL("transfer-timeout: '%s' is not a number of seconds", value);
    } else if (strcmp(k, "shutdown-grace") == 0) {
        if (tw__parse_seconds(value, &c->shutdown_grace_ms) != 0)
            FAIL("shutdown-grace: '%s' is not a number of seconds", value);
    } else if (strcmp(k, "fabric") == 0) {
        size_t n = 0;
        const char *bad = tw__fabric_unknown_provider(value, &n);
        if (!*value || strlen(value) >= sizeof(c->fabric))
            FAIL("fabric: '%s' must be auto, none or a provider list (tcp, shm, verbs, ...)",
                 value);
        if (bad)
            FAIL("fabric: unknown provider '%.*s' in '%.64s' (auto, none, or a list of tcp, shm, "
                 "verbs, efa, ...; e.g. 'tcp;ofi_rxm')",
                 (int)(n < 64 ? n : 64), bad, value);
        snprintf(c->fabric, sizeof(c->fabric), "%s", value);
    } else if (strcmp(k, "push") == 0) {
        if (strcmp(value, "auto") == 0)
            c->push = TW_SRV_PUSH_AUTO;
        else if (strcmp(value, "always") == 0)
            c->push = TW_SRV_PUSH_ALWAYS;
        else if (strcmp(value, "never") == 0)
            c->push = TW_SRV_PUSH_NEVER;
        else
            FAIL("push: '%s' is not one of auto, always, never", value);
    } else if (strcmp(k, "rdma-min-bytes") == 0) {
        if (tw_parse_size(value, &c->rdma_min_bytes) != 0)
            FAIL("rdma-min-bytes: '%s' is not a size (examples: 0, 65536, 256Ki, 1Mi)", value);
        c->rdma_min_bytes_set = 1;
    } else if (strcmp(k, "gpudirect") == 0) {
        enum tw_gdr_mode m;
        if (tw__gdr_mode_parse(value, &m) != 0)
            FAIL("gpudirect: '%s' is not one of auto, off, require", value);
        c->gpudirect = m;
    } else if (strcmp(k, "gpudirect-max-distance") == 0) {
        enum tw_pcie_dist d;
        if (tw__pcie_dist_parse(value, &d) != 0)
            FAIL("gpudirect-max-distance: '%s' is not one of PIX, PXB, PHB, NODE, SYS", value);
        c->gpudirect_max_distance = d;
    } else {
        FAIL("unknown option '%s'", key);
    }
    return 0;
}

static char *trim(char *s)
{
    while (*s && isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

int tw__srv_config_load_file(struct tw_srv_config *c, const char *path, char *errbuf, size_t errlen)
{
    char line[4352], err[256];
    unsigned lineno = 0;
    int rc = 0;
    FILE *f = fopen(path, "re");
    if (!f) {
        int e = errno;
        if (errbuf && errlen)
            snprintf(errbuf, errlen, "config file %s: %s", path, strerror(e));
        return -e;
    }
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *s = trim(line);
        if (!*s)
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            if (errbuf && errlen)
                snprintf(errbuf, errlen, "%s:%u: expected 'key = value'", path, lineno);
            rc = TW_EINVAL;
            goto out_close_file;
        }
        *eq = '\0';
        char *key = trim(s), *value = trim(eq + 1);
        if (strcmp(key, "config") == 0) {
            if (errbuf && errlen)
                snprintf(errbuf, errlen, "%s:%u: 'config' cannot be nested", path, lineno);
            rc = TW_EINVAL;
            goto out_close_file;
        }
        rc = tw__srv_config_set(c, key, value, err, sizeof(err));
        if (rc < 0) {
            if (errbuf && errlen)
                snprintf(errbuf, errlen, "%s:%u: %s", path, lineno, err);
            goto out_close_file;
        }
    }

out_close_file:
    fclose(f);
    return rc;
}

/* Options that take no value ("--allow-insecure-token-file"): on the
 * command line they stand alone; in a file they are "key = true". */
static int is_flag(const char *key)
{
    return strcmp(key, "allow-insecure-token-file") == 0;
}

/* Whether tw__srv_config_set knows key, asked on a scratch config so the
 * one list of keys stays in tw__srv_config_set. */
static int is_known_key(const char *key)
{
    struct tw_srv_config scratch;
    char err[256] = "";
    if (strcmp(key, "config") == 0) /* handled by tw__srv_config_from_args */
        return 1;
    tw__srv_config_defaults(&scratch);
    return tw__srv_config_set(&scratch, key, "", err, sizeof(err)) == 0 ||
           strncmp(err, "unknown option", 14) != 0;
}

/* Splits "--key=value" / "--key value" / "--flag". Returns the number of
 * argv slots consumed (1 or 2), or TW_EINVAL (key too long, value missing). */
static int split_opt(int argc, char **argv, int i, char *key, size_t keylen, const char **value)
{
    const char *a = argv[i] + 2;
    const char *eq = strchr(a, '=');
    if (eq) {
        size_t n = (size_t)(eq - a);
        if (n >= keylen)
            return TW_EINVAL;
        memcpy(key, a, n);
        key[n] = '\0';
        *value = eq + 1;
        return 1;
    }
    if (strlen(a) >= keylen)
        return TW_EINVAL;
    strcpy(key, a);
    if (is_flag(key)) {
        *value = "1";
        return 1;
    }
    if (i + 1 >= argc)
        return TW_EINVAL;
    *value = argv[i + 1];
    return 2;
}

int tw__srv_config_from_args(struct tw_srv_config *c, int argc, char **argv, char *errbuf,
                             size_t errlen)
{
    char key[64];
    const char *value;
    int rc;

    /* First pass: --help and --config, so the file is applied before the
     * other options override it regardless of their order. */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            tw__srv_config_usage(argv[0]);
            return 1;
        }
        if (strcmp(argv[i], "--version") == 0) {
            tw__srv_print_version();
            return 1;
        }
    }
    for (int i = 1; i < argc;) {
        if (strncmp(argv[i], "--", 2) != 0)
            FAIL("unexpected argument '%s'", argv[i]);
        int used = split_opt(argc, argv, i, key, sizeof(key), &value);
        if (used < 0 && !is_known_key(argv[i] + 2))
            FAIL("unknown option '%.*s'", 64, argv[i]);
        if (used < 0)
            FAIL("option '%s' needs a value", argv[i]);
        if (strcmp(key, "config") == 0) {
            rc = tw__srv_config_load_file(c, value, errbuf, errlen);
            if (rc < 0)
                return TW_EINVAL;
        }
        i += used;
    }
    for (int i = 1; i < argc;) {
        int used = split_opt(argc, argv, i, key, sizeof(key), &value);
        if (!is_known_key(key))
            FAIL("unknown option '--%s'", key);
        if (strcmp(key, "config") != 0) {
            rc = tw__srv_config_set(c, key, value, errbuf, errlen);
            if (rc < 0)
                return rc;
        }
        i += used;
    }
    return 0;
}
