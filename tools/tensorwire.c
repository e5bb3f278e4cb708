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
#include <signal.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "src/fabric/provider_names.h"
#include "tools/npy.h"
#include "tools/cli.h"

#define DEFAULT_SERVER "127.0.0.1:7450"

static const char usage_main[] =
    "usage: tensorwire [-s HOST:PORT] [--token-file PATH] [--timeout MS] [--checksum]\n"
    "                  [--fabric auto|none|PROV] [--push auto|always|never]\n"
    "                  [--rdma-min-bytes SIZE] [--connect-timeout MS] [-q]\n"
    "                  [--gpudirect auto|off|require]\n"
    "                  [--gpudirect-max-distance PIX|PXB|PHB|NODE|SYS] COMMAND [ARGS]\n"
    "\n"
    "Commands:\n"
    "  put NAME FILE     store a .npy file (dtype and C-order shape from its header),\n"
    "                    or a raw file with --dtype D --shape 2,3,4\n"
    "  get NAME FILE     fetch into FILE as .npy (--raw: bytes only); FILE is\n"
    "                    replaced only once every byte arrived and was checked\n"
    "  ls [PREFIX]       list tensors, sorted by name (--json)\n"
    "  stat NAME         describe one tensor (--json)\n"
    "  rm NAME...        delete tensors (--prefix P: every tensor under P)\n"
    "  ping              round-trip time to the server\n"
    "  stats             server counters (--json)\n"
    "  bench             throughput and latency against raw socket / libfabric loops\n"
    "  doctor            why GPUDirect RDMA is or is not used on this machine\n"
    "\n"
    "Options:\n"
    "  -s, --server HOST:PORT  server (default $TENSORWIRE_SERVER or " DEFAULT_SERVER ")\n"
    "  --token-file PATH       shared secret for HMAC-SHA256 mutual authentication;\n"
    "                          the file must not be readable by group or others\n"
    "  --allow-insecure-token-file  accept a token file others can read\n"
    "  --timeout MS            longest wait without progress (default 30000)\n"
    "  --connect-timeout MS    TCP connect and handshake (default 10000, or --timeout\n"
    "                          when that is shorter)\n"
    "  --checksum              send and verify CRC32C of tensor bytes\n"
    "  --fabric auto|none|PROV RDMA data plane through libfabric for get and put\n"
    "                          (default none: inline TCP); PROV: tcp, shm, verbs,\n"
    "                          ... (comma-separated). Falls back to inline when the\n"
    "                          server has none or declines (get/put -v say why).\n"
    "  --push auto|always|never  with RDMA, let the source write into our buffer\n"
    "                          (always) or read it ourselves (auto, never)\n"
    "  --rdma-min-bytes SIZE   with RDMA, puts smaller than SIZE go inline (default\n"
    "                          over shm 32Ki in a batch of 32 or more in flight,\n"
    "                          else 64Ki; 1Mi otherwise, but 32Ki for GPU memory\n"
    "                          in a batch of 32 or more; 0 = rdma at every\n"
    "                          size); the server applies its own --rdma-min-bytes\n"
    "                          to gets and puts (unset: 32Ki for puts)\n"
    "  --gpudirect auto|off|require  GPUDirect RDMA for GPU memory here: where\n"
    "                          admitted (auto), never, or refuse to connect unless\n"
    "                          a GPU is admitted on the provider (tensorwire doctor)\n"
    "  --gpudirect-max-distance D  farthest GPU-NIC PCIe path admitted (default PXB)\n"
    "  -q, --quiet             no progress line and no notes on stderr\n"
    "  --version               version and protocol version\n"
    "  -h, --help              this text; COMMAND --help for each command\n"
    "\n"
    "On a terminal, a get or put running over a second shows its progress on\n"
    "stderr (bytes, rate, ETA). Exit status: 0 success, 1 the operation failed,\n"
    "2 usage error (the message names the option and the bad value).\n";

static const char usage_put[] =
    "usage: tensorwire put NAME FILE [--dtype D] [--shape 2,3,4] [--device TAG] [-v] [-q]\n"
    "  -v prints the data plane that moved the bytes (and why not rdma) and a\n"
    "  summary line (bytes, GB/s, time); -q hides the progress line.\n"
    "  FILE is .npy (v1, v2, v3; little-endian, C order), or raw bytes when --dtype\n"
    "  and --shape are given ('' or 'scalar' for a 0-d tensor). .npy files with raw\n"
    "  void elements ('|V2', '|V1', as 'get' writes bf16/f8) need --dtype.\n"
    "  dtypes: f64 f32 f16 bf16 f8e4m3 f8e5m2 i8 i16 i32 i64 u8 u16 u32 u64 bool\n";
static const char usage_get[] =
    "usage: tensorwire get NAME FILE [--raw] [--via DEVICE] [-v] [-q]\n"
    "  -v prints the data plane that moved the bytes (and why not rdma) and a\n"
    "  summary line (bytes, GB/s, time); -q hides the progress line and notes.\n"
    "  --via cuda:N receives into this machine's GPU N first, then copies the bytes\n"
    "  to the file (tests the GPU path; default: straight into the file).\n"
    "  Writes FILE as .npy (v1.0). bf16 and f8 have no NumPy dtype: they are written\n"
    "  as raw void elements ('|V2' / '|V1'; view with ml_dtypes) and a note is\n"
    "  printed. --raw writes the tensor bytes only.\n"
    "  The bytes go to a temporary file next to FILE (.FILE.tw-XXXXXX), mapped,\n"
    "  not buffered, and it is renamed onto FILE only after the last byte (and\n"
    "  its CRC32C, with --checksum) arrived: a failed get leaves FILE as it was.\n";
static const char usage_ls[] = "usage: tensorwire ls [PREFIX] [--json]\n"
                               "  NAME DTYPE SHAPE BYTES DEVICE, one tensor a line; --json: one\n"
                               "  array of objects (docs/cli.md).\n";
static const char usage_stat[] = "usage: tensorwire stat NAME [--json]\n";
static const char usage_rm[] = "usage: tensorwire rm NAME... | rm --prefix PREFIX [-v]\n"
                               "  Deletes each NAME, or every tensor whose name starts with\n"
                               "  PREFIX (non-empty). Continues past a failed name; exit 1 if\n"
                               "  any failed. -v prints each name removed.\n";
static const char usage_ping[] = "usage: tensorwire ping [--count N]\n";
static const char usage_stats[] = "usage: tensorwire stats [--json]\n";

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

int tw_cli_bad_value(const char *cmd, const char *opt, const char *value, const char *expected)
{
    char shown[160];
    fprintf(stderr, "tensorwire%s%s: %s: '%s' is not %s\n", cmd ? " " : "", cmd ? cmd : "", opt,
            tw_cli_shown(value, shown, sizeof(shown), 64), expected);
    return TW_CLI_USAGE;
}

int tw_cli_check_fabric(const char *cmd, const char *value)
{
    size_t n = 0;
    const char *bad = tw__fabric_unknown_provider(value, &n);
    if (!bad)
        return 0;
    char shown[160];
    fprintf(stderr,
            "tensorwire%s%s: --fabric: unknown provider '%.*s' in '%s' (auto, none, or a "
            "comma-separated list of: tcp, shm, verbs, efa, ...; e.g. 'tcp;ofi_rxm')\n",
            cmd ? " " : "", cmd ? cmd : "", (int)(n < 64 ? n : 64), bad,
            tw_cli_shown(value, shown, sizeof(shown), 64));
    return TW_CLI_USAGE;
}

int tw_cli_parse_push(const char *cmd, const char *value, int *out)
{
    if (strcmp(value, "auto") == 0)
        *out = TW_PUSH_AUTO;
    else if (strcmp(value, "always") == 0)
        *out = TW_PUSH_ALWAYS;
    else if (strcmp(value, "never") == 0)
        *out = TW_PUSH_NEVER;
    else
        return tw_cli_bad_value(cmd, "--push", value, "one of auto, always, never");
    return 0;
}

/* One option of a command line: --name VALUE, --name=VALUE, or a flag;
 * short is its one-letter form (0: none). */
struct opt_spec {
    const char *name;
    char short_name;
    int has_value;
    const char **value; /* set to the value, or "1" for flags */
};

/*
 * Reads argv[*i]. Returns 1 with *spec/value set for an option of specs,
 * 0 for a positional argument (or "--" followed by one), or TW_CLI_USAGE
 * after printing "unknown option" or "needs a value" (one line, no usage
 * text: the message says what is wrong). Advances *i past a separate value.
 */
static int next_opt(int argc, char **argv, int *i, const struct opt_spec *specs, const char *cmd)
{
    const char *a = argv[*i];
    const char *pfx = cmd ? " " : "";
    char shown[160];
    if (a[0] != '-' || a[1] == '\0')
        return 0;
    const struct opt_spec *s = specs;
    const char *eq = NULL;
    if (a[1] != '-') {
        for (; s && s->name; s++)
            if (s->short_name && a[1] == s->short_name && a[2] == '\0')
                break;
    } else {
        eq = strchr(a, '=');
        size_t klen = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        for (; s && s->name; s++)
            if (strlen(s->name) == klen && strncmp(s->name, a + 2, klen) == 0)
                break;
    }
    if (!s || !s->name) {
        fprintf(stderr, "tensorwire%s%s: unknown option '%s' (see tensorwire %s%s--help)\n", pfx,
                cmd ? cmd : "", tw_cli_shown(a, shown, sizeof(shown), 64), cmd ? cmd : "", pfx);
        return TW_CLI_USAGE;
    }
    if (!s->has_value) {
        if (eq) {
            fprintf(stderr, "tensorwire%s%s: --%s takes no value\n", pfx, cmd ? cmd : "", s->name);
            return TW_CLI_USAGE;
        }
        *s->value = "1";
        return 1;
    }
    if (eq) {
        *s->value = eq + 1;
    } else if (*i + 1 < argc) {
        *s->value = argv[++*i];
    } else {
        fprintf(stderr, "tensorwire%s%s: %s needs a value\n", pfx, cmd ? cmd : "", a);
        return TW_CLI_USAGE;
    }
    return 1;
}

/* Splits the arguments of one command into positionals and options. Returns
 * 0, or TW_CLI_USAGE after printing why. */
static int parse_args(int argc, char **argv, const struct opt_spec *specs, const char **pos,
                      int maxpos, int *npos, const char *usage_text)
{
    *npos = 0;
    for (int i = 1; i < argc; i++) {
        int r = next_opt(argc, argv, &i, specs, argv[0]);
        if (r == TW_CLI_USAGE)
            return r;
        if (r == 1)
            continue;
        if (*npos >= maxpos) {
            char shown[160];
            fprintf(stderr, "tensorwire %s: unexpected argument '%s'\n", argv[0],
                    tw_cli_shown(argv[i], shown, sizeof(shown), 64));
            return usage(usage_text);
        }
        pos[(*npos)++] = argv[i];
    }
    return 0;
}

/* The part of a tensor name shown in messages: escaped, at most 96 bytes. */
#define SHOWN_NAME(name, buf) tw_cli_shown((name), (buf), sizeof(buf), 96)

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

/* -v: "put NAME: 64.0 MiB (67108864 bytes) in 0.052 s, 1.29 GB/s": the
 * transfer call only (connect and file work excluded). */
static void print_summary(const char *op, const char *name, uint64_t bytes, uint64_t ns)
{
    char shown[160], human[32];
    double secs = (double)ns / 1e9;
    printf("%s %s: %s (%llu bytes) in %.3f s, %.2f GB/s\n", op, SHOWN_NAME(name, shown),
           tw_cli_bytes(bytes, human, sizeof(human)), (unsigned long long)bytes, secs,
           secs > 0 ? (double)bytes / secs / 1e9 : 0.0);
}

/* --- put ----------------------------------------------------------------- */

static int cmd_put(const struct tw_cli *cli, int argc, char **argv)
{
    const char *pos[2], *o_dtype = NULL, *o_shape = NULL, *o_device = NULL, *o_verbose = NULL,
                        *o_quiet = NULL;
    const struct opt_spec specs[] = {{"dtype", 0, 1, &o_dtype},   {"shape", 0, 1, &o_shape},
                                     {"device", 0, 1, &o_device}, {"verbose", 'v', 0, &o_verbose},
                                     {"quiet", 'q', 0, &o_quiet}, {NULL, 0, 0, NULL}};
    char shown[160];
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
        if (dtype < 0)
            return tw_cli_bad_value("put", "--dtype", o_dtype,
                                    "a dtype (f64 f32 f16 bf16 f8e4m3 f8e5m2 i8 i16 i32 i64 u8 "
                                    "u16 u32 u64 bool)");
    }
    if (o_device) {
        if (strlen(o_device) > TW_TENSOR_MAX_DEVICE_TAG)
            return tw_cli_bad_value("put", "--device", o_device,
                                    "a device tag (at most 32 bytes: cpu, cuda:0, ...)");
        snprintf(desc.device_tag, sizeof(desc.device_tag), "%s", o_device);
    }

    int fd = open(pos[1], O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
        fprintf(stderr, "tensorwire: put %s: cannot read '%s': %s\n", SHOWN_NAME(pos[0], shown),
                pos[1], strerror(errno));
        if (fd >= 0)
            close(fd);
        return TW_CLI_FAILED;
    }
    if (!S_ISREG(st.st_mode)) {
        fprintf(stderr, "tensorwire: put %s: '%s' is %s, not a file\n", SHOWN_NAME(pos[0], shown),
                pos[1], S_ISDIR(st.st_mode) ? "a directory" : "a special file");
        close(fd);
        return TW_CLI_FAILED;
    }
    map_len = (size_t)st.st_size;
    if (map_len > 0) {
        /* Mapped, not read: the library sends straight from these pages. */
        map = mmap(NULL, map_len, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        if (map == MAP_FAILED) {
            fprintf(stderr, "tensorwire: put %s: cannot map '%s': %s\n", SHOWN_NAME(pos[0], shown),
                    pos[1], strerror(errno));
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
                    SHOWN_NAME(pos[0], shown), pos[1]);
            goto out_unmap;
        }
        if (rc) {
            fprintf(stderr, "tensorwire: put %s: '%s': %s\n", SHOWN_NAME(pos[0], shown), pos[1],
                    err);
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
                    SHOWN_NAME(pos[0], shown), pos[1], map_len - info.data_offset,
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
            ret = tw_cli_bad_value("put", "--shape", o_shape,
                                   "a shape (e.g. 2,3,4; '' or scalar for 0-d)");
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
                    SHOWN_NAME(pos[0], shown), pos[1], map_len, o_dtype, o_shape,
                    (unsigned long long)len);
            goto out_unmap;
        }
        data = map;
    }

    c = tw_cli_connect(cli);
    if (!c)
        goto out_unmap;
    struct tw_cli_progress prog;
    uint64_t t0 = tw_cli_now_ns();
    tw_cli_progress_start(&prog, cli->progress && !o_quiet, 1, len, "put");
    rc = tw_put(c, pos[0], &desc, data, (size_t)len);
    tw_cli_progress_stop(&prog);
    if (rc)
        ret = tw_cli_fail(c, rc, "put %s", SHOWN_NAME(pos[0], shown));
    else
        ret = TW_CLI_OK;
    if (!rc && o_verbose) {
        print_data_plane(c);
        print_summary("put", pos[0], len, tw_cli_now_ns() - t0);
    }
    tw_close(c);
out_unmap:
    if (map && map_len)
        munmap(map, map_len);
    return ret;
}

/* --- get ----------------------------------------------------------------- */

/*
 * The temporary file of a get in flight, so that SIGINT, SIGTERM and SIGHUP
 * remove it before the process dies (unlink is async-signal-safe). Empty
 * when none. A CLI process runs one get at a time.
 */
static char temp_path[4200];

static void on_fatal_signal(int sig)
{
    if (temp_path[0])
        unlink(temp_path);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void watch_signals(void (*handler)(int))
{
    signal(SIGINT, handler);
    signal(SIGTERM, handler);
    signal(SIGHUP, handler);
}

/* Creates the temporary file next to dest: ".BASE.tw-XXXXXX" in dest's
 * directory, so that rename() is atomic (same filesystem). Its mode is the
 * destination's when dest exists, else 0666 less the umask, as a plain
 * open(O_CREAT) would have made it. Returns the fd or -errno; the path is
 * in temp_path. */
static int create_temp(const char *dest)
{
    const char *slash = strrchr(dest, '/');
    const char *base = slash ? slash + 1 : dest;
    int dirlen = slash ? (int)(slash - dest) + 1 : 0;
    struct stat st;
    mode_t mode;
    char tmpl[sizeof(temp_path)];

    if (snprintf(tmpl, sizeof(tmpl), "%.*s.%s.tw-XXXXXX", dirlen, dest, base) >= (int)sizeof(tmpl))
        return -ENAMETOOLONG;
    if (stat(dest, &st) == 0) {
        mode = st.st_mode & 07777;
    } else {
        mode_t um = umask(0);
        umask(um);
        mode = 0666 & ~um;
    }
    watch_signals(on_fatal_signal);
    snprintf(temp_path, sizeof(temp_path), "%s", tmpl);
    int fd = mkostemp(temp_path, O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        temp_path[0] = '\0';
        return -e;
    }
    if (fchmod(fd, mode) != 0) {
        int e = errno;
        close(fd);
        unlink(temp_path);
        temp_path[0] = '\0';
        return -e;
    }
    return fd;
}

static void remove_temp(void)
{
    if (temp_path[0])
        unlink(temp_path);
    temp_path[0] = '\0';
}

static int same_desc(const struct tw_tensor_desc *a, const struct tw_tensor_desc *b)
{
    return a->dtype == b->dtype && a->ndim == b->ndim && a->byte_length == b->byte_length &&
           memcmp(a->shape, b->shape, sizeof(a->shape[0]) * a->ndim) == 0;
}

/* tw_get into a buffer on `device` (--via cuda:N), then its bytes into
 * dst: the path a GPU consumer takes, checked end to end. */
static int get_via(tw_client *c, const char *name, const char *device, uint8_t *dst, size_t len,
                   struct tw_tensor_desc *got)
{
    void *dev = NULL;
    int rc = tw_device_alloc(device, len, &dev);
    if (rc == TW_EINVAL)
        fprintf(stderr, "tensorwire: get: bad --via '%s' (cpu or cuda:N)\n", device);
    if (rc)
        return rc;
    rc = tw_get(c, name, dev, len, got);
    if (rc == 0)
        rc = tw_mem_copy(dst, dev, len);
    tw_device_free(dev);
    return rc;
}

/*
 * Why get maps a file instead of buffering: the public API fetches a tensor
 * in one call into one caller buffer (no ranged get), so bounded memory
 * means that buffer must not be anonymous memory. The temporary file is
 * sized (posix_fallocate: a full filesystem fails here, before any byte
 * moves, instead of SIGBUS in the middle), mapped shared, and the library
 * receives straight into the mapping; the pages are page cache that the
 * kernel writes back and reclaims, so a tensor larger than free memory
 * still fits and the process's anonymous memory stays small.
 *
 * The size comes from a STAT first. If the tensor is replaced between STAT
 * and GET (another size or shape: -ENOBUFS, or a different descriptor), the
 * file is resized and the get retried, a few times.
 */
static int cmd_get(const struct tw_cli *cli, int argc, char **argv)
{
    const char *pos[2], *o_raw = NULL, *o_verbose = NULL, *o_quiet = NULL, *o_via = NULL;
    const struct opt_spec specs[] = {{"raw", 0, 0, &o_raw},
                                     {"via", 0, 1, &o_via},
                                     {"verbose", 'v', 0, &o_verbose},
                                     {"quiet", 'q', 0, &o_quiet},
                                     {NULL, 0, 0, NULL}};
    struct tw_tensor_desc desc, got;
    uint8_t hdr[4096], one_byte;
    uint8_t *map = NULL;
    size_t map_len = 0, hlen = 0;
    uint64_t elapsed = 0;
    int npos, rc, ret = TW_CLI_FAILED, fd = -1, is_void = 0;
    char shown[160];
    struct stat st;
    tw_client *c;

    if (wants_help(argc, argv))
        return fputs(usage_get, stdout), TW_CLI_OK;
    if (parse_args(argc, argv, specs, pos, 2, &npos, usage_get))
        return TW_CLI_USAGE;
    if (npos != 2)
        return usage(usage_get);
    /* Refuse what rename() would refuse, before moving any byte. */
    if (stat(pos[1], &st) == 0 && S_ISDIR(st.st_mode)) {
        fprintf(stderr, "tensorwire: get %s: '%s' is a directory; give a file name\n",
                SHOWN_NAME(pos[0], shown), pos[1]);
        return TW_CLI_FAILED;
    }
    c = tw_cli_connect(cli);
    if (!c)
        return TW_CLI_FAILED;

    for (int attempt = 0;; attempt++) {
        rc = tw_stat(c, pos[0], &desc);
        if (rc) {
            ret = tw_cli_fail(c, rc, "get %s", SHOWN_NAME(pos[0], shown));
            goto out_remove;
        }
        /* Created once the tensor is known to exist: a get of a missing
         * name touches no file. */
        if (fd < 0) {
            fd = create_temp(pos[1]);
            if (fd < 0) {
                fprintf(stderr,
                        "tensorwire: get %s: cannot create a temporary file next to '%s': %s\n",
                        SHOWN_NAME(pos[0], shown), pos[1], strerror(-fd));
                goto out_close;
            }
        }
        hlen = 0;
        if (!o_raw) {
            long h =
                tw__npy_write_header(desc.dtype, desc.ndim, desc.shape, hdr, sizeof(hdr), &is_void);
            if (h < 0) {
                fprintf(stderr, "tensorwire: get %s: cannot write a .npy header for dtype %u\n",
                        SHOWN_NAME(pos[0], shown), desc.dtype);
                goto out_remove;
            }
            hlen = (size_t)h;
        }
        if (desc.byte_length > SIZE_MAX - hlen) {
            fprintf(stderr, "tensorwire: get %s: %llu bytes do not fit in this address space\n",
                    SHOWN_NAME(pos[0], shown), (unsigned long long)desc.byte_length);
            goto out_remove;
        }
        map_len = hlen + (size_t)desc.byte_length;
        rc = ftruncate(fd, 0) != 0 ? -errno : 0;
        if (!rc && map_len)
            rc = -posix_fallocate(fd, 0, (off_t)map_len);
        if (rc) {
            fprintf(stderr, "tensorwire: get %s: cannot make room for %zu bytes next to '%s': %s\n",
                    SHOWN_NAME(pos[0], shown), map_len, pos[1], strerror(-rc));
            goto out_remove;
        }
        if (map_len) {
            map = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (map == MAP_FAILED) {
                map = NULL;
                fprintf(stderr, "tensorwire: get %s: cannot map '%s': %s\n",
                        SHOWN_NAME(pos[0], shown), temp_path, strerror(errno));
                goto out_remove;
            }
            memcpy(map, hdr, hlen);
        }
        struct tw_cli_progress prog;
        uint64_t t0 = tw_cli_now_ns();
        tw_cli_progress_start(&prog, cli->progress && !o_quiet, 0, desc.byte_length, "get");
        if (o_via)
            rc = get_via(c, pos[0], o_via, desc.byte_length ? map + hlen : &one_byte,
                         (size_t)desc.byte_length, &got);
        else
            rc = tw_get(c, pos[0], desc.byte_length ? map + hlen : &one_byte,
                        (size_t)desc.byte_length, &got);
        tw_cli_progress_stop(&prog);
        elapsed = tw_cli_now_ns() - t0;
        if (rc == 0 && same_desc(&desc, &got))
            break;
        if (rc && rc != -ENOBUFS) {
            ret = tw_cli_fail(c, rc, "get %s", SHOWN_NAME(pos[0], shown));
            goto out_remove;
        }
        /* Replaced between STAT and GET: size the file again. */
        if (map)
            munmap(map, map_len);
        map = NULL;
        if (attempt == 4) {
            fprintf(stderr, "tensorwire: get %s: the tensor kept changing size while being read\n",
                    SHOWN_NAME(pos[0], shown));
            goto out_remove;
        }
    }
    if (o_verbose)
        print_data_plane(c);
    if (is_void && !cli->quiet && !o_quiet)
        fprintf(stderr,
                "tensorwire: note: %s has no NumPy dtype; '%s' holds raw %zu-byte void "
                "elements (view with ml_dtypes; put it back with --dtype %s)\n",
                tw_dtype_name(desc.dtype), pos[1], tw_dtype_size(desc.dtype),
                tw_dtype_name(desc.dtype));
    /* Every byte arrived (and its CRC32C matched, when negotiated): make it
     * durable, then put it in place in one step. */
    if (map && munmap(map, map_len) != 0) {
        rc = -errno;
        map = NULL;
        goto out_write_failed;
    }
    map = NULL;
    if (fsync(fd) != 0) {
        rc = -errno;
        goto out_write_failed;
    }
    rc = close(fd) != 0 ? -errno : 0;
    fd = -1;
    if (rc)
        goto out_write_failed;
    if (rename(temp_path, pos[1]) != 0) {
        rc = -errno;
        goto out_write_failed;
    }
    temp_path[0] = '\0';
    watch_signals(SIG_DFL);
    if (o_verbose)
        print_summary("get", pos[0], desc.byte_length, elapsed);
    ret = TW_CLI_OK;
    goto out_close;

out_write_failed:
    fprintf(stderr, "tensorwire: get %s: writing '%s': %s\n", SHOWN_NAME(pos[0], shown), pos[1],
            strerror(-rc));
out_remove:
    if (map)
        munmap(map, map_len);
    if (fd >= 0)
        close(fd);
    remove_temp();
    watch_signals(SIG_DFL);
out_close:
    tw_close(c);
    return ret;
}

/* --- ls, stat, rm, ping, stats ------------------------------------------ */

static void print_desc_line(const char *name, const struct tw_tensor_desc *d)
{
    char shape[512], shown[2048];
    format_shape(d, shape, sizeof(shape));
    /* Names never hold control characters (docs/protocol.md §3.1), but this
     * output goes to a terminal: escape whatever a server sends anyway. */
    printf("%-32s %-7s %-20s %14llu %s\n", tw_cli_shown(name, shown, sizeof(shown), 1024),
           tw_dtype_name(d->dtype) ? tw_dtype_name(d->dtype) : "?", shape,
           (unsigned long long)d->byte_length, d->device_tag);
}

/* {"name":..,"dtype":..,"shape":[..],"bytes":N,"device":..} (docs/cli.md). */
static void print_desc_json(const char *name, const struct tw_tensor_desc *d)
{
    fputs("{\"name\":", stdout);
    tw_cli_json_string(stdout, name);
    fputs(",\"dtype\":", stdout);
    tw_cli_json_string(stdout, tw_dtype_name(d->dtype) ? tw_dtype_name(d->dtype) : "?");
    fputs(",\"shape\":[", stdout);
    for (unsigned i = 0; i < d->ndim; i++)
        printf("%s%llu", i ? "," : "", (unsigned long long)d->shape[i]);
    printf("],\"bytes\":%llu,\"device\":", (unsigned long long)d->byte_length);
    tw_cli_json_string(stdout, d->device_tag);
    fputs("}", stdout);
}

static int cmd_ls(const struct tw_cli *cli, int argc, char **argv)
{
    const char *pos[1] = {NULL}, *o_json = NULL;
    const struct opt_spec specs[] = {{"json", 0, 0, &o_json}, {NULL, 0, 0, NULL}};
    struct tw_tensor_info *list;
    char shown[160];
    size_t n;
    int npos, rc;
    tw_client *c;
    if (wants_help(argc, argv))
        return fputs(usage_ls, stdout), TW_CLI_OK;
    if (parse_args(argc, argv, specs, pos, 1, &npos, usage_ls))
        return TW_CLI_USAGE;
    c = tw_cli_connect(cli);
    if (!c)
        return TW_CLI_FAILED;
    rc = tw_list(c, pos[0], &list, &n);
    if (rc) {
        rc = tw_cli_fail(c, rc, "ls %s", pos[0] ? SHOWN_NAME(pos[0], shown) : "");
        tw_close(c);
        return rc;
    }
    if (o_json)
        fputs("[", stdout);
    for (size_t i = 0; i < n; i++) {
        if (o_json) {
            fputs(i ? ",\n" : "", stdout);
            print_desc_json(list[i].name, &list[i].desc);
        } else {
            print_desc_line(list[i].name, &list[i].desc);
        }
    }
    if (o_json)
        fputs("]\n", stdout);
    tw_list_free(list);
    tw_close(c);
    return TW_CLI_OK;
}

static int cmd_stat(const struct tw_cli *cli, int argc, char **argv)
{
    const char *pos[1], *o_json = NULL;
    const struct opt_spec specs[] = {{"json", 0, 0, &o_json}, {NULL, 0, 0, NULL}};
    struct tw_tensor_desc d;
    char shape[512], shown[2048];
    int npos, rc;
    tw_client *c;
    if (wants_help(argc, argv))
        return fputs(usage_stat, stdout), TW_CLI_OK;
    if (parse_args(argc, argv, specs, pos, 1, &npos, usage_stat))
        return TW_CLI_USAGE;
    if (npos != 1)
        return usage(usage_stat);
    c = tw_cli_connect(cli);
    if (!c)
        return TW_CLI_FAILED;
    rc = tw_stat(c, pos[0], &d);
    if (rc) {
        rc = tw_cli_fail(c, rc, "stat %s", SHOWN_NAME(pos[0], shown));
        tw_close(c);
        return rc;
    }
    if (o_json) {
        print_desc_json(pos[0], &d);
        fputs("\n", stdout);
    } else {
        format_shape(&d, shape, sizeof(shape));
        printf("name:   %s\ndtype:  %s\nshape:  %s\nbytes:  %llu\ndevice: %s\n",
               tw_cli_shown(pos[0], shown, sizeof(shown), 1024),
               tw_dtype_name(d.dtype) ? tw_dtype_name(d.dtype) : "?", shape,
               (unsigned long long)d.byte_length, d.device_tag);
    }
    tw_close(c);
    return TW_CLI_OK;
}

/* Deletes one name; prints why it failed. Returns 0 or 1 (failed). */
static int rm_one(tw_client *c, const char *name, int verbose, int missing_ok)
{
    char shown[160];
    int rc = tw_delete(c, name);
    if (rc == TW_ENOTFOUND && missing_ok)
        return 0; /* listed, then removed by someone else: gone either way */
    if (rc) {
        tw_cli_fail(c, rc, "rm %s", SHOWN_NAME(name, shown));
        return 1;
    }
    if (verbose)
        printf("removed %s\n", SHOWN_NAME(name, shown));
    return 0;
}

static int cmd_rm(const struct tw_cli *cli, int argc, char **argv)
{
    const char **pos, *o_prefix = NULL, *o_verbose = NULL;
    const struct opt_spec specs[] = {
        {"prefix", 0, 1, &o_prefix}, {"verbose", 'v', 0, &o_verbose}, {NULL, 0, 0, NULL}};
    int npos, failed = 0;
    tw_client *c;
    if (wants_help(argc, argv))
        return fputs(usage_rm, stdout), TW_CLI_OK;
    pos = calloc((size_t)argc, sizeof(*pos));
    if (!pos)
        return TW_CLI_FAILED;
    if (parse_args(argc, argv, specs, pos, argc, &npos, usage_rm)) {
        free(pos);
        return TW_CLI_USAGE;
    }
    if ((npos == 0) == (o_prefix == NULL)) {
        free(pos);
        fputs(npos ? "tensorwire rm: give names or --prefix, not both\n"
                   : "tensorwire rm: nothing to remove (give NAME... or --prefix PREFIX)\n",
              stderr);
        return TW_CLI_USAGE;
    }
    if (o_prefix && !o_prefix[0]) {
        free(pos);
        return tw_cli_bad_value("rm", "--prefix", o_prefix,
                                "a prefix (an empty one would remove every tensor)");
    }
    c = tw_cli_connect(cli);
    if (!c) {
        free(pos);
        return TW_CLI_FAILED;
    }
    if (o_prefix) {
        struct tw_tensor_info *list;
        char shown[160];
        size_t n;
        int rc = tw_list(c, o_prefix, &list, &n);
        if (rc) {
            failed = 1;
            tw_cli_fail(c, rc, "rm --prefix %s", SHOWN_NAME(o_prefix, shown));
        } else {
            for (size_t i = 0; i < n; i++)
                failed |= rm_one(c, list[i].name, o_verbose != NULL, 1);
            tw_list_free(list);
        }
    }
    for (int i = 0; i < npos; i++)
        failed |= rm_one(c, pos[i], o_verbose != NULL, 0);
    tw_close(c);
    free(pos);
    return failed ? TW_CLI_FAILED : TW_CLI_OK;
}

static int cmd_ping(const struct tw_cli *cli, int argc, char **argv)
{
    const char *o_count = NULL;
    const struct opt_spec specs[] = {{"count", 0, 1, &o_count}, {NULL, 0, 0, NULL}};
    const char *pos[1];
    uint64_t count = 1;
    int npos;
    tw_client *c;
    if (wants_help(argc, argv))
        return fputs(usage_ping, stdout), TW_CLI_OK;
    if (parse_args(argc, argv, specs, pos, 0, &npos, usage_ping))
        return TW_CLI_USAGE;
    if (o_count && (tw_parse_size(o_count, &count) || count == 0))
        return tw_cli_bad_value("ping", "--count", o_count, "a count of 1 or more");
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
    const char *pos[1], *o_json = NULL;
    const struct opt_spec specs[] = {{"json", 0, 0, &o_json}, {NULL, 0, 0, NULL}};
    struct tw_stat_entry *st;
    size_t n;
    int npos, rc;
    tw_client *c;
    if (wants_help(argc, argv))
        return fputs(usage_stats, stdout), TW_CLI_OK;
    if (parse_args(argc, argv, specs, pos, 0, &npos, usage_stats))
        return TW_CLI_USAGE;
    c = tw_cli_connect(cli);
    if (!c)
        return TW_CLI_FAILED;
    rc = tw_stats(c, &st, &n);
    if (rc) {
        rc = tw_cli_fail(c, rc, "stats");
        tw_close(c);
        return rc;
    }
    if (o_json)
        fputs("{", stdout);
    for (size_t i = 0; i < n; i++) {
        if (o_json) {
            fputs(i ? "," : "", stdout);
            tw_cli_json_string(stdout, st[i].key);
            printf(":%llu", (unsigned long long)st[i].value);
        } else {
            printf("%s %llu\n", st[i].key, (unsigned long long)st[i].value);
        }
    }
    if (o_json)
        fputs("}\n", stdout);
    tw_stats_free(st);
    tw_close(c);
    return TW_CLI_OK;
}

int main(int argc, char **argv)
{
    struct tw_cli cli;
    const char *env = getenv("TENSORWIRE_SERVER");
    const char *o_server = NULL, *o_token = NULL, *o_timeout = NULL, *o_connect = NULL,
               *o_checksum = NULL, *o_fabric = NULL, *o_push = NULL, *o_rdma_min = NULL,
               *o_quiet = NULL, *o_insecure = NULL, *o_version = NULL, *o_help = NULL,
               *o_gdr = NULL, *o_gdr_dist = NULL;
    const struct opt_spec specs[] = {{"server", 's', 1, &o_server},
                                     {"token-file", 0, 1, &o_token},
                                     {"timeout", 0, 1, &o_timeout},
                                     {"connect-timeout", 0, 1, &o_connect},
                                     {"checksum", 0, 0, &o_checksum},
                                     {"fabric", 0, 1, &o_fabric},
                                     {"push", 0, 1, &o_push},
                                     {"rdma-min-bytes", 0, 1, &o_rdma_min},
                                     {"gpudirect", 0, 1, &o_gdr},
                                     {"gpudirect-max-distance", 0, 1, &o_gdr_dist},
                                     {"quiet", 'q', 0, &o_quiet},
                                     {"allow-insecure-token-file", 0, 0, &o_insecure},
                                     {"version", 0, 0, &o_version},
                                     {"help", 'h', 0, &o_help},
                                     {NULL, 0, 0, NULL}};
    uint64_t ms;
    int i, r;

    memset(&cli, 0, sizeof(cli));
    tw_client_options_init(&cli.opts);
    cli.opts.agent = "tensorwire-cli/" TW_VERSION_STRING;
    cli.server = env && *env ? env : DEFAULT_SERVER;
    for (i = 1; i < argc; i++) {
        r = next_opt(argc, argv, &i, specs, NULL);
        if (r == TW_CLI_USAGE)
            return r;
        if (r == 0)
            break;
        if (o_help) {
            fputs(usage_main, stdout);
            return TW_CLI_OK;
        }
        if (o_version) {
            printf("tensorwire %s (protocol %d)\n", tw_version(), TW_PROTOCOL_VERSION);
            return TW_CLI_OK;
        }
    }
    if (o_server)
        cli.server = o_server;
    cli.opts.token_file = o_token;
    cli.opts.allow_insecure_token_file = o_insecure != NULL;
    cli.opts.checksum = o_checksum != NULL;
    if (o_timeout) {
        if (tw_parse_size(o_timeout, &ms) || ms > 86400000u)
            return tw_cli_bad_value(NULL, "--timeout", o_timeout,
                                    "a number of milliseconds (0..86400000; 0 waits forever)");
        cli.opts.request_timeout_ms = (int)ms;
        /* A silent listener must not outlast the timeout asked for. */
        if (ms > 0 && ms < (uint64_t)cli.opts.connect_timeout_ms)
            cli.opts.connect_timeout_ms = (int)ms;
    }
    if (o_connect) {
        if (tw_parse_size(o_connect, &ms) || ms == 0 || ms > 86400000u)
            return tw_cli_bad_value(NULL, "--connect-timeout", o_connect,
                                    "a number of milliseconds (1..86400000)");
        cli.opts.connect_timeout_ms = (int)ms;
    }
    if (o_fabric) {
        if (tw_cli_check_fabric(NULL, o_fabric))
            return TW_CLI_USAGE;
        cli.opts.fabric = o_fabric;
    }
    if (o_push && tw_cli_parse_push(NULL, o_push, &cli.opts.push))
        return TW_CLI_USAGE;
    if (o_rdma_min && tw_parse_size(o_rdma_min, &cli.opts.rdma_min_bytes))
        return tw_cli_bad_value(NULL, "--rdma-min-bytes", o_rdma_min,
                                "a size (e.g. 0, 65536, 256Ki, 1Mi)");
    if (o_gdr) {
        static const char *const modes[] = {"auto", "off", "require"};
        int m = -1;
        for (int k = 0; k < 3; k++)
            if (strcmp(o_gdr, modes[k]) == 0)
                m = k; /* enum tw_gpudirect_mode's values */
        if (m < 0)
            return tw_cli_bad_value(NULL, "--gpudirect", o_gdr, "auto, off or require");
        cli.opts.gpudirect = m;
    }
    if (o_gdr_dist) {
        static const char *const dists[] = {"PIX", "PXB", "PHB", "NODE", "SYS"};
        int d = 0;
        for (int k = 0; k < 5; k++)
            if (strcasecmp(o_gdr_dist, dists[k]) == 0)
                d = k + 1; /* tw_client_options.gpudirect_max_distance */
        if (!d)
            return tw_cli_bad_value(NULL, "--gpudirect-max-distance", o_gdr_dist,
                                    "PIX, PXB, PHB, NODE or SYS");
        cli.opts.gpudirect_max_distance = d;
    }
    cli.quiet = o_quiet != NULL;
    cli.progress = !cli.quiet && isatty(STDERR_FILENO);
    if (i >= argc) {
        fputs("tensorwire: no command given\n", stderr);
        return usage(usage_main);
    }
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
    char shown[160];
    fprintf(stderr,
            "tensorwire: unknown command '%s' (put, get, ls, stat, rm, ping, stats, bench, "
            "doctor)\n",
            tw_cli_shown(cmd, shown, sizeof(shown), 64));
    return TW_CLI_USAGE;
}
