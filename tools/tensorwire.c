/*
 * tensorwire: command-line client of tensorwired.
 *
 *   tensorwire [-s HOST:PORT] [--token-file PATH] COMMAND [ARGS]
 *
 * Exit status: 0 success, 1 the operation failed (stderr names the error code
 * and the server's message), 2 usage error.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tools/npy.h"
#include "tools/cli.h"

#define DEFAULT_SERVER "127.0.0.1:7450"

static const char usage_main[] =
    "usage: tensorwire [-s HOST:PORT] [--token-file PATH] [--timeout MS] [--checksum]\n"
    "                  [--fabric auto|none|PROV] [--push auto|always|never]\n"
    "                  [--rdma-min-bytes SIZE] [--gpudirect auto|off|require]\n"
    "                  [--gpudirect-max-distance PIX|PXB|PHB|NODE|SYS] COMMAND [ARGS]\n"
    "\n"
    "Commands:\n"
    "  put NAME FILE     store a .npy file (dtype and C-order shape from its header),\n"
    "                    or a raw file with --dtype D --shape 2,3,4\n"
    "  get NAME FILE     fetch into FILE as .npy (--raw: bytes only)\n"
    "  ls [PREFIX]       list tensors, sorted by name\n"
    "  stat NAME         describe one tensor\n"
    "  rm NAME           delete a tensor\n"
    "  ping              round-trip time to the server\n"
    "  stats             server counters\n"
    "  bench             throughput and latency against raw socket / libfabric loops\n"
    "  doctor            why GPUDirect RDMA is or is not used on this machine\n"
    "\n"
    "Options:\n"
    "  -s, --server HOST:PORT  server (default $TENSORWIRE_SERVER or " DEFAULT_SERVER ")\n"
    "  --token-file PATH       shared secret for HMAC-SHA256 mutual authentication\n"
    "  --timeout MS            longest wait without progress (default 30000)\n"
    "  --checksum              send and verify CRC32C of tensor bytes\n"
    "  --fabric auto|none|PROV RDMA data plane through libfabric for get and put\n"
    "                          (default none: inline TCP); PROV: tcp, shm, verbs,\n"
    "                          ... (comma-separated). Falls back to inline when the\n"
    "                          server has none or declines (get/put -v say why).\n"
    "  --push auto|always|never  with RDMA, let the source write into our buffer\n"
    "                          (always) or read it ourselves (auto, never)\n"
    "  --rdma-min-bytes SIZE   with RDMA, puts smaller than SIZE go inline (default\n"
    "                          1Mi, 0 = rdma at every size); the server applies its\n"
    "                          own --rdma-min-bytes to gets and puts\n"
    "  --gpudirect auto|off|require  GPUDirect RDMA for GPU memory here: where\n"
    "                          admitted (auto), never, or refuse to connect unless\n"
    "                          a GPU is admitted on the provider (tensorwire doctor)\n"
    "  --gpudirect-max-distance D  farthest GPU-NIC PCIe path admitted (default PXB)\n"
    "  -h, --help              this text; COMMAND --help for each command\n"
    "\n"
    "Exit status: 0 success, 1 the operation failed, 2 usage error.\n";

static const char usage_put[] =
    "usage: tensorwire put NAME FILE [--dtype D] [--shape 2,3,4] [--device TAG] [-v]\n"
    "  -v prints the data plane that moved the bytes (and why not rdma).\n"
    "  FILE is .npy (v1, v2, v3; little-endian, C order), or raw bytes when --dtype\n"
    "  and --shape are given ('' or 'scalar' for a 0-d tensor). .npy files with raw\n"
    "  void elements ('|V2', '|V1', as 'get' writes bf16/f8) need --dtype.\n"
    "  dtypes: f64 f32 f16 bf16 f8e4m3 f8e5m2 i8 i16 i32 i64 u8 u16 u32 u64 bool\n";
static const char usage_get[] =
    "usage: tensorwire get NAME FILE [--raw] [-v]\n"
    "  -v prints the data plane that moved the bytes (and why not rdma).\n"
    "  Writes FILE as .npy (v1.0). bf16 and f8 have no NumPy dtype: they are written\n"
    "  as raw void elements ('|V2' / '|V1'; view with ml_dtypes) and a note is\n"
    "  printed. --raw writes the tensor bytes only.\n";
static const char usage_ls[] = "usage: tensorwire ls [PREFIX]\n"
                               "  NAME DTYPE SHAPE BYTES DEVICE, one tensor a line.\n";
static const char usage_stat[] = "usage: tensorwire stat NAME\n";
static const char usage_rm[] = "usage: tensorwire rm NAME\n";
static const char usage_ping[] = "usage: tensorwire ping [--count N]\n";
static const char usage_stats[] = "usage: tensorwire stats\n";

int tw_cli_fail(tw_client *c, int rc, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    const char *detail = c ? tw_client_last_error_message(c) : "";
    fprintf(stderr, "tensorwire: %s: %s: %s\n", what, tw_strerror_name(rc),
            detail[0] ? detail : tw_strerror(rc));
    return TW_CLI_FAILED;
}

tw_client *tw_cli_connect(const struct tw_cli *cli)
{
    tw_client *c = NULL;
    char err[512];
    int rc = tw_client_connect_error(cli->server, &cli->opts, &c, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "tensorwire: connect %s: %s: %s\n", cli->server, tw_strerror_name(rc),
                err[0] ? err : tw_strerror(rc));
        return NULL;
    }
    return c;
}

static int usage(const char *text)
{
    fputs(text, stderr);
    return TW_CLI_USAGE;
}

static int wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 1;
    return 0;
}

/* Splits argv into positionals and "--key value" options of one command.
 * Returns 0, or TW_CLI_USAGE after printing why. */
struct opt_spec {
    const char *name;
    int has_value;
    const char **value; /* set to the value, or "1" for flags */
};

static int parse_args(int argc, char **argv, const struct opt_spec *specs, const char **pos,
                      int maxpos, int *npos, const char *usage_text)
{
    *npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-v") == 0)
            a = "--verbose";
        if (strncmp(a, "--", 2) == 0 && a[2]) {
            const char *eq = strchr(a, '=');
            size_t klen = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
            const struct opt_spec *s = specs;
            for (; s && s->name; s++)
                if (strlen(s->name) == klen && strncmp(s->name, a + 2, klen) == 0)
                    break;
            if (!s || !s->name) {
                fprintf(stderr, "tensorwire %s: unknown option '%s'\n", argv[0], a);
                return usage(usage_text);
            }
            if (s->has_value) {
                if (eq) {
                    *s->value = eq + 1;
                } else if (i + 1 < argc) {
                    *s->value = argv[++i];
                } else {
                    fprintf(stderr, "tensorwire %s: %s needs a value\n", argv[0], a);
                    return usage(usage_text);
                }
            } else {
                *s->value = "1";
            }
            continue;
        }
        if (*npos >= maxpos) {
            fprintf(stderr, "tensorwire %s: unexpected argument '%s'\n", argv[0], a);
            return usage(usage_text);
        }
        pos[(*npos)++] = a;
    }
    return 0;
}

/* -v: "data plane: rdma pull (provider tcp;ofi_rxm)" or "data plane: inline
 * tcp (REASON)". */
static void print_data_plane(const tw_client *c)
{
    const char *dp = tw_client_data_plane(c);
    const char *fs = tw_client_fabric_status(c);
    if (strncmp(dp, "rdma ", 5) == 0) {
        const char *paren = strchr(dp, '(');
        if (paren)
            printf("data plane: %.*s(provider %s\n", (int)(paren - dp), dp, paren + 1);
        else
            printf("data plane: %s\n", dp);
    } else if (strchr(dp, '(')) {
        printf("data plane: %s\n", dp); /* inline with its reason already */
    } else {
        printf("data plane: %s (%s)\n", dp, strncmp(fs, "inline: ", 8) == 0 ? fs + 8 : fs);
    }
}

static void format_shape(const struct tw_tensor_desc *d, char *buf, size_t cap)
{
    size_t n = 0;
    n += (size_t)snprintf(buf, cap, "(");
    for (unsigned i = 0; i < d->ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%llu%s", (unsigned long long)d->shape[i],
                              d->ndim == 1      ? ","
                              : i + 1 < d->ndim ? ","
                                                : "");
    if (n < cap)
        snprintf(buf + n, cap - n, ")");
}

/* --- put ----------------------------------------------------------------- */

static int cmd_put(const struct tw_cli *cli, int argc, char **argv)
{
    const char *pos[2], *o_dtype = NULL, *o_shape = NULL, *o_device = NULL, *o_verbose = NULL;
    const struct opt_spec specs[] = {{"dtype", 1, &o_dtype},
                                     {"shape", 1, &o_shape},
                                     {"device", 1, &o_device},
                                     {"verbose", 0, &o_verbose},
                                     {NULL, 0, NULL}};
    struct tw_tensor_desc desc;
    int npos, rc, ret = TW_CLI_FAILED, dtype = 0;
    struct stat st;
    uint8_t *map = NULL;
    size_t map_len = 0;
    const uint8_t *data;
    uint64_t len;
    tw_client *c;

    if (wants_help(argc, argv))
        return fputs(usage_put, stdout), TW_CLI_OK;
    if (parse_args(argc, argv, specs, pos, 2, &npos, usage_put))
        return TW_CLI_USAGE;
    if (npos != 2)
        return usage(usage_put);
    memset(&desc, 0, sizeof(desc));
    if (o_dtype) {
        dtype = tw_dtype_from_string(o_dtype);
        if (dtype < 0) {
            fprintf(stderr, "tensorwire put: unknown dtype '%s'\n", o_dtype);
            return usage(usage_put);
        }
    }
    if (o_device) {
        if (strlen(o_device) > TW_TENSOR_MAX_DEVICE_TAG) {
            fprintf(stderr, "tensorwire put: device tag longer than %d bytes\n",
                    TW_TENSOR_MAX_DEVICE_TAG);
            return TW_CLI_USAGE;
        }
        snprintf(desc.device_tag, sizeof(desc.device_tag), "%s", o_device);
    }

    int fd = open(pos[1], O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
        fprintf(stderr, "tensorwire: put %s: cannot read '%s': %s\n", pos[0], pos[1],
                strerror(errno));
        if (fd >= 0)
            close(fd);
        return TW_CLI_FAILED;
    }
    map_len = (size_t)st.st_size;
    if (map_len > 0) {
        /* Mapped, not read: the library sends straight from these pages. */
        map = mmap(NULL, map_len, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        if (map == MAP_FAILED) {
            fprintf(stderr, "tensorwire: put %s: cannot map '%s': %s\n", pos[0], pos[1],
                    strerror(errno));
            close(fd);
            return TW_CLI_FAILED;
        }
    }
    close(fd);

    if (map_len >= 6 && memcmp(map, "\x93NUMPY", 6) == 0) {
        struct tw__npy_info info;
        char err[256];
        if (o_shape) {
            fprintf(stderr, "tensorwire put: --shape is for raw files; '%s' is .npy\n", pos[1]);
            ret = TW_CLI_USAGE;
            goto out_unmap;
        }
        rc = tw__npy_parse(map, map_len, dtype, &info, err, sizeof(err));
        if (rc == -EAGAIN) {
            fprintf(stderr, "tensorwire: put %s: '%s' is truncated inside its .npy header\n",
                    pos[0], pos[1]);
            goto out_unmap;
        }
        if (rc) {
            fprintf(stderr, "tensorwire: put %s: '%s': %s\n", pos[0], pos[1], err);
            goto out_unmap;
        }
        if (dtype && tw_dtype_size(dtype) == tw_dtype_size(info.dtype) && info.dtype != dtype &&
            !(info.dtype == TW_BF16 || info.dtype == TW_F8E4M3 || info.dtype == TW_F8E5M2)) {
            fprintf(stderr, "tensorwire put: --dtype %s conflicts with the file's %s\n", o_dtype,
                    tw_dtype_name(info.dtype));
            ret = TW_CLI_USAGE;
            goto out_unmap;
        }
        if (map_len - info.data_offset != info.byte_length) {
            fprintf(stderr, "tensorwire: put %s: '%s' holds %zu data bytes, its header says %llu\n",
                    pos[0], pos[1], map_len - info.data_offset,
                    (unsigned long long)info.byte_length);
            goto out_unmap;
        }
        desc.dtype = info.dtype;
        desc.ndim = info.ndim;
        memcpy(desc.shape, info.shape, sizeof(desc.shape));
        data = map + info.data_offset;
        len = info.byte_length;
    } else {
        if (!o_dtype || !o_shape) {
            fprintf(stderr,
                    "tensorwire put: '%s' is not .npy: raw files need --dtype and --shape\n",
                    pos[1]);
            ret = TW_CLI_USAGE;
            goto out_unmap;
        }
        if (tw__cli_parse_shape(o_shape, &desc.ndim, desc.shape)) {
            fprintf(stderr, "tensorwire put: bad --shape '%s' (e.g. 2,3,4)\n", o_shape);
            ret = TW_CLI_USAGE;
            goto out_unmap;
        }
        desc.dtype = (uint8_t)dtype;
        if (tw_tensor_desc_bytes(&desc, &len) != 0) {
            fprintf(stderr, "tensorwire put: shape '%s' of %s overflows\n", o_shape, o_dtype);
            ret = TW_CLI_USAGE;
            goto out_unmap;
        }
        if (len != map_len) {
            fprintf(stderr, "tensorwire: put %s: '%s' has %zu bytes; %s with shape %s needs %llu\n",
                    pos[0], pos[1], map_len, o_dtype, o_shape, (unsigned long long)len);
            goto out_unmap;
        }
        data = map;
    }

    c = tw_cli_connect(cli);
    if (!c)
        goto out_unmap;
    rc = tw_put(c, pos[0], &desc, data, (size_t)len);
    if (rc)
        ret = tw_cli_fail(c, rc, "put %s", pos[0]);
    else
        ret = TW_CLI_OK;
    if (!rc && o_verbose)
        print_data_plane(c);
    tw_close(c);
out_unmap:
    if (map && map_len)
        munmap(map, map_len);
    return ret;
}

/* --- get ----------------------------------------------------------------- */

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int cmd_get(const struct tw_cli *cli, int argc, char **argv)
{
    const char *pos[2], *o_raw = NULL, *o_verbose = NULL;
    const struct opt_spec specs[] = {
        {"raw", 0, &o_raw}, {"verbose", 0, &o_verbose}, {NULL, 0, NULL}};
    struct tw_tensor_desc desc;
    void *buf = NULL;
    size_t len = 0;
    int npos, rc, ret = TW_CLI_FAILED, fd;
    tw_client *c;

    if (wants_help(argc, argv))
        return fputs(usage_get, stdout), TW_CLI_OK;
    if (parse_args(argc, argv, specs, pos, 2, &npos, usage_get))
        return TW_CLI_USAGE;
    if (npos != 2)
        return usage(usage_get);
    c = tw_cli_connect(cli);
    if (!c)
        return TW_CLI_FAILED;
    rc = tw_get_alloc(c, pos[0], &buf, &len, &desc);
    if (rc) {
        ret = tw_cli_fail(c, rc, "get %s", pos[0]);
        goto out_close;
    }
    if (o_verbose)
        print_data_plane(c);
    fd = open(pos[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "tensorwire: get %s: cannot create '%s': %s\n", pos[0], pos[1],
                strerror(errno));
        goto out_free;
    }
    if (!o_raw) {
        uint8_t hdr[4096];
        int is_void = 0;
        long h =
            tw__npy_write_header(desc.dtype, desc.ndim, desc.shape, hdr, sizeof(hdr), &is_void);
        if (h < 0) {
            fprintf(stderr, "tensorwire: get %s: cannot write a .npy header for dtype %u\n", pos[0],
                    desc.dtype);
            goto out_close_fd;
        }
        if (is_void)
            fprintf(stderr,
                    "tensorwire: note: %s has no NumPy dtype; '%s' holds raw %zu-byte void "
                    "elements (view with ml_dtypes; put it back with --dtype %s)\n",
                    tw_dtype_name(desc.dtype), pos[1], tw_dtype_size(desc.dtype),
                    tw_dtype_name(desc.dtype));
        rc = write_all(fd, hdr, (size_t)h);
        if (rc)
            goto out_write_failed;
    }
    rc = write_all(fd, buf, len);
    if (rc)
        goto out_write_failed;
    if (close(fd) != 0) {
        rc = -errno;
        fd = -1;
        goto out_write_failed;
    }
    fd = -1;
    ret = TW_CLI_OK;
    goto out_free;

out_write_failed:
    fprintf(stderr, "tensorwire: get %s: writing '%s': %s\n", pos[0], pos[1], strerror(-rc));
out_close_fd:
    if (fd >= 0)
        close(fd);
out_free:
    tw_free(buf);
out_close:
    tw_close(c);
    return ret;
}

/* --- ls, stat, rm, ping, stats ------------------------------------------ */

static void print_desc_line(const char *name, const struct tw_tensor_desc *d)
{
    char shape[512];
    format_shape(d, shape, sizeof(shape));
    printf("%-32s %-7s %-20s %14llu %s\n", name,
           tw_dtype_name(d->dtype) ? tw_dtype_name(d->dtype) : "?", shape,
           (unsigned long long)d->byte_length, d->device_tag);
}

static int cmd_ls(const struct tw_cli *cli, int argc, char **argv)
{
    const char *pos[1] = {NULL};
    struct tw_tensor_info *list;
    size_t n;
    int npos, rc;
    tw_client *c;
    if (wants_help(argc, argv))
        return fputs(usage_ls, stdout), TW_CLI_OK;
    if (parse_args(argc, argv, NULL, pos, 1, &npos, usage_ls))
        return TW_CLI_USAGE;
    c = tw_cli_connect(cli);
    if (!c)
        return TW_CLI_FAILED;
    rc = tw_list(c, pos[0], &list, &n);
    if (rc) {
        rc = tw_cli_fail(c, rc, "ls %s", pos[0] ? pos[0] : "");
        tw_close(c);
        return rc;
    }
    for (size_t i = 0; i < n; i++)
        print_desc_line(list[i].name, &list[i].desc);
    tw_list_free(list);
    tw_close(c);
    return TW_CLI_OK;
}

static int cmd_stat(const struct tw_cli *cli, int argc, char **argv)
{
    const char *pos[1];
    struct tw_tensor_desc d;
    char shape[512];
    int npos, rc;
    tw_client *c;
    if (wants_help(argc, argv))
        return fputs(usage_stat, stdout), TW_CLI_OK;
    if (parse_args(argc, argv, NULL, pos, 1, &npos, usage_stat))
        return TW_CLI_USAGE;
    if (npos != 1)
        return usage(usage_stat);
    c = tw_cli_connect(cli);
    if (!c)
        return TW_CLI_FAILED;
    rc = tw_stat(c, pos[0], &d);
    if (rc) {
        rc = tw_cli_fail(c, rc, "stat %s", pos[0]);
        tw_close(c);
        return rc;
    }
    format_shape(&d, shape, sizeof(shape));
    printf("name:   %s\ndtype:  %s\nshape:  %s\nbytes:  %llu\ndevice: %s\n", pos[0],
           tw_dtype_name(d.dtype) ? tw_dtype_name(d.dtype) : "?", shape,
           (unsigned long long)d.byte_length, d.device_tag);
    tw_close(c);
    return TW_CLI_OK;
}

static int cmd_rm(const struct tw_cli *cli, int argc, char **argv)
{
    const char *pos[1];
    int npos, rc;
    tw_client *c;
    if (wants_help(argc, argv))
        return fputs(usage_rm, stdout), TW_CLI_OK;
    if (parse_args(argc, argv, NULL, pos, 1, &npos, usage_rm))
        return TW_CLI_USAGE;
    if (npos != 1)
        return usage(usage_rm);
    c = tw_cli_connect(cli);
    if (!c)
        return TW_CLI_FAILED;
    rc = tw_delete(c, pos[0]);
    if (rc)
        rc = tw_cli_fail(c, rc, "rm %s", pos[0]);
    tw_close(c);
    return rc ? TW_CLI_FAILED : TW_CLI_OK;
}

static int cmd_ping(const struct tw_cli *cli, int argc, char **argv)
{
    const char *o_count = NULL;
    const struct opt_spec specs[] = {{"count", 1, &o_count}, {NULL, 0, NULL}};
    const char *pos[1];
    uint64_t count = 1;
    int npos;
    tw_client *c;
    if (wants_help(argc, argv))
        return fputs(usage_ping, stdout), TW_CLI_OK;
    if (parse_args(argc, argv, specs, pos, 0, &npos, usage_ping))
        return TW_CLI_USAGE;
    if (o_count && (tw_parse_size(o_count, &count) || count == 0))
        return usage(usage_ping);
    c = tw_cli_connect(cli);
    if (!c)
        return TW_CLI_FAILED;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t ns;
        int rc = tw_ping(c, &ns);
        if (rc) {
            rc = tw_cli_fail(c, rc, "ping");
            tw_close(c);
            return rc;
        }
        printf("pong from %s: %.1f us\n", cli->server, (double)ns / 1e3);
    }
    tw_close(c);
    return TW_CLI_OK;
}

static int cmd_stats(const struct tw_cli *cli, int argc, char **argv)
{
    struct tw_stat_entry *st;
    size_t n;
    int rc;
    tw_client *c;
    if (wants_help(argc, argv))
        return fputs(usage_stats, stdout), TW_CLI_OK;
    if (argc != 1)
        return usage(usage_stats);
    c = tw_cli_connect(cli);
    if (!c)
        return TW_CLI_FAILED;
    rc = tw_stats(c, &st, &n);
    if (rc) {
        rc = tw_cli_fail(c, rc, "stats");
        tw_close(c);
        return rc;
    }
    for (size_t i = 0; i < n; i++)
        printf("%s %llu\n", st[i].key, (unsigned long long)st[i].value);
    tw_stats_free(st);
    tw_close(c);
    return TW_CLI_OK;
}

int main(int argc, char **argv)
{
    struct tw_cli cli;
    const char *env = getenv("TENSORWIRE_SERVER");
    int i;

    tw_client_options_init(&cli.opts);
    cli.opts.agent = "tensorwire-cli/" TW_VERSION_STRING;
    cli.server = env && *env ? env : DEFAULT_SERVER;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage_main, stdout);
            return TW_CLI_OK;
        } else if (strcmp(a, "-s") == 0 || strcmp(a, "--server") == 0) {
            if (++i >= argc)
                return usage(usage_main);
            cli.server = argv[i];
        } else if (strncmp(a, "--server=", 9) == 0) {
            cli.server = a + 9;
        } else if (strcmp(a, "--token-file") == 0) {
            if (++i >= argc)
                return usage(usage_main);
            cli.opts.token_file = argv[i];
        } else if (strncmp(a, "--token-file=", 13) == 0) {
            cli.opts.token_file = a + 13;
        } else if (strcmp(a, "--timeout") == 0) {
            uint64_t ms;
            if (++i >= argc || tw_parse_size(argv[i], &ms) || ms > 86400000u)
                return usage(usage_main);
            cli.opts.request_timeout_ms = (int)ms;
        } else if (strcmp(a, "--checksum") == 0) {
            cli.opts.checksum = 1;
        } else if (strcmp(a, "--fabric") == 0 || strncmp(a, "--fabric=", 9) == 0) {
            if (a[8] == '=')
                cli.opts.fabric = a + 9;
            else if (++i < argc)
                cli.opts.fabric = argv[i];
            else
                return usage(usage_main);
        } else if (strcmp(a, "--rdma-min-bytes") == 0 || strncmp(a, "--rdma-min-bytes=", 17) == 0) {
            const char *v = a[16] == '=' ? a + 17 : (++i < argc ? argv[i] : "");
            if (tw_parse_size(v, &cli.opts.rdma_min_bytes))
                return usage(usage_main);
        } else if (strcmp(a, "--push") == 0 || strncmp(a, "--push=", 7) == 0) {
            const char *v = a[6] == '=' ? a + 7 : (++i < argc ? argv[i] : "");
            if (strcmp(v, "auto") == 0)
                cli.opts.push = TW_PUSH_AUTO;
            else if (strcmp(v, "always") == 0)
                cli.opts.push = TW_PUSH_ALWAYS;
            else if (strcmp(v, "never") == 0)
                cli.opts.push = TW_PUSH_NEVER;
            else
                return usage(usage_main);
        } else if (strcmp(a, "--gpudirect") == 0 || strncmp(a, "--gpudirect=", 12) == 0) {
            const char *v = a[11] == '=' ? a + 12 : (++i < argc ? argv[i] : "");
            static const char *const modes[] = {"auto", "off", "require"};
            int m = -1;
            for (int k = 0; k < 3; k++)
                if (strcmp(v, modes[k]) == 0)
                    m = k; /* enum tw_gpudirect_mode's values */
            if (m < 0)
                return usage(usage_main);
            cli.opts.gpudirect = m;
        } else if (strcmp(a, "--gpudirect-max-distance") == 0 ||
                   strncmp(a, "--gpudirect-max-distance=", 25) == 0) {
            const char *v = a[24] == '=' ? a + 25 : (++i < argc ? argv[i] : "");
            static const char *const dists[] = {"PIX", "PXB", "PHB", "NODE", "SYS"};
            int d = 0;
            for (int k = 0; k < 5; k++)
                if (strcasecmp(v, dists[k]) == 0)
                    d = k + 1; /* tw_client_options.gpudirect_max_distance */
            if (!d)
                return usage(usage_main);
            cli.opts.gpudirect_max_distance = d;
        } else if (a[0] == '-') {
            fprintf(stderr, "tensorwire: unknown option '%s'\n", a);
            return usage(usage_main);
        } else {
            break;
        }
    }
    if (i >= argc)
        return usage(usage_main);
    const char *cmd = argv[i];
    int cargc = argc - i;
    char **cargv = argv + i;
    if (strcmp(cmd, "put") == 0)
        return cmd_put(&cli, cargc, cargv);
    if (strcmp(cmd, "get") == 0)
        return cmd_get(&cli, cargc, cargv);
    if (strcmp(cmd, "ls") == 0)
        return cmd_ls(&cli, cargc, cargv);
    if (strcmp(cmd, "stat") == 0)
        return cmd_stat(&cli, cargc, cargv);
    if (strcmp(cmd, "rm") == 0)
        return cmd_rm(&cli, cargc, cargv);
    if (strcmp(cmd, "ping") == 0)
        return cmd_ping(&cli, cargc, cargv);
    if (strcmp(cmd, "stats") == 0)
        return cmd_stats(&cli, cargc, cargv);
    if (strcmp(cmd, "bench") == 0)
        return tw_cli_bench(&cli, cargc, cargv);
    if (strcmp(cmd, "doctor") == 0)
        return tw_cli_doctor(cargc, cargv);
    fprintf(stderr, "tensorwire: unknown command '%s'\n", cmd);
    return usage(usage_main);
}
