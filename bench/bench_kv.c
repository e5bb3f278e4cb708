/*
 * The workloads users run most, through a running tensorwired and the
 * public client API, each against its own baseline from the same run: one
 * tensor of the same total bytes on the same path (issue 10).
 *
 *   bench_kv HOST:PORT [--workload kv|weights] [--scale F] [--rounds N]
 *            [--fabric none|PROV] [--rdma-min-bytes SIZE] [--push auto|always|never]
 *            [--json]
 *
 * kv:      a KV-cache hand-off with Llama-3-70B shapes: 80 layers x 256
 *          blocks x K/V = 40,960 tensors of 32 KiB (1.34 GB), as one
 *          tw_batch_put of new names, one of the same names again
 *          (overwrite), and one tw_batch_get.
 * weights: a Llama-2-7B-shaped weight sync: 291 tensors, 13.5 GB in fp16.
 * --scale F multiplies the tensor count (kv: blocks per layer; weights: the
 * number of layers), for small machines; 1 is the full workload.
 *
 * Every figure is the median of --rounds (default 3) and is reported as
 * bytes/s and as a ratio to the single tensor of the same bytes (put and
 * get separately). Each round checks a sample of the bytes it got back.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tensorwire/client.h"
#include "tensorwire/size.h"
#include "bench_util.h"

/* One tensor of the workload: its name and byte range in the shared buffer. */
struct item {
    char name[96];
    size_t off, len;
    uint64_t shape[2];
    unsigned ndim;
};

static size_t build_kv(double scale, struct item **out)
{
    const unsigned layers = 80, kv = 2;
    unsigned blocks = (unsigned)(256 * scale + 0.5);
    if (blocks < 1)
        blocks = 1;
    size_t n = (size_t)layers * blocks * kv, off = 0;
    struct item *it = calloc(n, sizeof(*it));
    if (!it)
        return 0;
    size_t k = 0;
    for (unsigned l = 0; l < layers; l++)
        for (unsigned b = 0; b < blocks; b++)
            for (unsigned h = 0; h < kv; h++, k++) {
                /* A 32 KiB block: 16 tokens x 8 KV heads x 128 dims x bf16. */
                snprintf(it[k].name, sizeof(it[k].name), "L%u/B%u/%c", l, b, h ? 'V' : 'K');
                it[k].ndim = 2;
                it[k].shape[0] = 16;
                it[k].shape[1] = 8 * 128;
                it[k].len = 16 * 8 * 128 * 2;
                it[k].off = off;
                off += it[k].len;
            }
    *out = it;
    return n;
}

static size_t build_weights(double scale, struct item **out)
{
    unsigned layers = (unsigned)(32 * scale + 0.5);
    if (layers < 1)
        layers = 1;
    const uint64_t d = 4096, ff = 11008, vocab = 32000;
    size_t n = 2 + (size_t)layers * 9 + 1, k = 0, off = 0;
    struct item *it = calloc(n, sizeof(*it));
    if (!it)
        return 0;
#define ADD(fmt, l, r, c)                                                                          \
    do {                                                                                           \
        snprintf(it[k].name, sizeof(it[k].name), fmt, l);                                          \
        it[k].ndim = (c) ? 2 : 1;                                                                  \
        it[k].shape[0] = (r);                                                                      \
        it[k].shape[1] = (c);                                                                      \
        it[k].len = (size_t)((r) * ((c) ? (c) : 1) * 2);                                           \
        it[k].off = off;                                                                           \
        off += it[k].len;                                                                          \
        k++;                                                                                       \
    } while (0)
    ADD("model.embed_tokens.weight%.0u", 0u, vocab, d);
    for (unsigned l = 0; l < layers; l++) {
        ADD("model.layers.%u.self_attn.q_proj.weight", l, d, d);
        ADD("model.layers.%u.self_attn.k_proj.weight", l, d, d);
        ADD("model.layers.%u.self_attn.v_proj.weight", l, d, d);
        ADD("model.layers.%u.self_attn.o_proj.weight", l, d, d);
        ADD("model.layers.%u.mlp.gate_proj.weight", l, ff, d);
        ADD("model.layers.%u.mlp.up_proj.weight", l, ff, d);
        ADD("model.layers.%u.mlp.down_proj.weight", l, d, ff);
        ADD("model.layers.%u.input_layernorm.weight", l, d, 0);
        ADD("model.layers.%u.post_attention_layernorm.weight", l, d, 0);
    }
    ADD("model.norm.weight%.0u", 0u, d, 0);
    ADD("lm_head.weight%.0u", 0u, vocab, d);
#undef ADD
    *out = it;
    return k;
}

static void desc_of(const struct item *it, struct tw_tensor_desc *d)
{
    memset(d, 0, sizeof(*d));
    d->dtype = TW_BF16;
    d->ndim = it->ndim;
    d->shape[0] = it->shape[0];
    d->shape[1] = it->shape[1];
}

static int die(tw_client *c, const char *what, int rc)
{
    fprintf(stderr, "bench_kv: %s: %s: %s\n", what, tw_strerror_name(rc),
            c ? tw_client_last_error_message(c) : "");
    exit(1);
}

/* Appends to b (cap bytes, *used of them written); output beyond cap is
 * cut, and b stays terminated. */
static void appendf(char *b, size_t cap, size_t *used, const char *fmt, ...)
{
    if (*used >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(b + *used, cap - *used, fmt, ap);
    va_end(ap);
    *used = w < 0 ? cap : *used + (size_t)w;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr,
                "usage: %s HOST:PORT [--workload kv|weights] [--scale F] [--rounds N]\n"
                "          [--fabric none|PROV] [--rdma-min-bytes SIZE] "
                "[--push auto|always|never] [--inflight N] [--json]\n",
                argv[0]);
        return 2;
    }
    const char *addr = argv[1], *workload = "kv";
    double scale = 1.0;
    int rounds = 3, json = 0;
    struct tw_client_options o;
    tw_client_options_init(&o);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--json") == 0) {
            json = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "bench_kv: option '%s' needs a value\n", a);
            return 2;
        }
        i++;
        if (strcmp(a, "--workload") == 0 && (!strcmp(v, "kv") || !strcmp(v, "weights")))
            workload = v;
        else if (strcmp(a, "--scale") == 0 && atof(v) > 0)
            scale = atof(v);
        else if (strcmp(a, "--rounds") == 0 && atoi(v) > 0)
            rounds = atoi(v);
        else if (strcmp(a, "--fabric") == 0)
            o.fabric = v;
        else if (strcmp(a, "--inflight") == 0 && atoi(v) > 0)
            o.max_inflight = (uint32_t)atoi(v); /* the batch calls' window */
        else if (strcmp(a, "--rdma-min-bytes") == 0 && tw_parse_size(v, &o.rdma_min_bytes) == 0) {
            /* SIZE as tensorwire takes it ("1Mi" = 1048576; strtoull read 1) */
        } else if (strcmp(a, "--push") == 0 && !strcmp(v, "always"))
            o.push = TW_PUSH_ALWAYS;
        else if (strcmp(a, "--push") == 0 && !strcmp(v, "never"))
            o.push = TW_PUSH_NEVER;
        else if (strcmp(a, "--push") == 0 && !strcmp(v, "auto"))
            o.push = TW_PUSH_AUTO;
        else {
            fprintf(stderr, "bench_kv: bad option '%s %s'\n", a, v);
            return 2;
        }
    }
    struct item *items = NULL;
    size_t n = strcmp(workload, "kv") == 0 ? build_kv(scale, &items) : build_weights(scale, &items);
    if (!n)
        return 1;
    size_t total = items[n - 1].off + items[n - 1].len;
    uint8_t *src = malloc(total), *dst = malloc(total);
    struct tw_batch_item *batch = calloc(n, sizeof(*batch));
    double *tp_new = calloc((size_t)rounds, sizeof(double)),
           *tp_over = calloc((size_t)rounds, sizeof(double)),
           *tg = calloc((size_t)rounds, sizeof(double)),
           *sp = calloc((size_t)rounds, sizeof(double)),
           *sg = calloc((size_t)rounds, sizeof(double));
    if (!src || !dst || !batch || !tp_new || !tp_over || !tg || !sp || !sg)
        return 1;
    tw_test_fill(src, total, 7);
    /* Fault the destination in before the first get (not zero: the
     * compiler turns malloc + memset(0) into calloc, which leaves the pages
     * untouched, and the first round's gets then paid for faulting them). */
    memset(dst, 0x5a, total);

    tw_client *c = NULL;
    char err[512];
    int rc = tw_client_connect_error(addr, &o, &c, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "bench_kv: connect %s: %s\n", addr, err);
        return 1;
    }
    char prefix[64], batch_plane[128] = "", single_plane[128] = "";
    for (int r = 0; r < rounds; r++) {
        /* New names each round: a store that reuses a freed name's memory
         * would otherwise hide the cost of first allocation. */
        snprintf(prefix, sizeof(prefix), "kvb/%d/%d/", (int)getpid(), r);
        /* Room for the whole prefix and item name, so the name is never cut. */
        char(*names)[sizeof(prefix) + sizeof(items[0].name)] = malloc(n * sizeof(*names));
        if (!names)
            return 1;
        for (size_t i = 0; i < n; i++) {
            snprintf(names[i], sizeof(names[i]), "%s%s", prefix, items[i].name);
            batch[i].name = names[i];
            desc_of(&items[i], &batch[i].desc);
            batch[i].buf = src + items[i].off;
            batch[i].len = items[i].len;
        }
        double t0 = tw_bench_now_s();
        if ((rc = tw_batch_put(c, batch, n)))
            die(c, "batch put (new names)", rc);
        tp_new[r] = tw_bench_now_s() - t0;
        snprintf(batch_plane, sizeof(batch_plane), "%s", tw_client_data_plane(c));
        t0 = tw_bench_now_s();
        if ((rc = tw_batch_put(c, batch, n)))
            die(c, "batch put (overwrite)", rc);
        tp_over[r] = tw_bench_now_s() - t0;
        for (size_t i = 0; i < n; i++) {
            batch[i].buf = dst + items[i].off;
            batch[i].len = items[i].len;
        }
        t0 = tw_bench_now_s();
        if ((rc = tw_batch_get(c, batch, n)))
            die(c, "batch get", rc);
        tg[r] = tw_bench_now_s() - t0;
        /* A sample of every item: first and last 8 bytes. */
        for (size_t i = 0; i < n; i++) {
            const struct item *it = &items[i];
            if (memcmp(dst + it->off, src + it->off, 8) ||
                memcmp(dst + it->off + it->len - 8, src + it->off + it->len - 8, 8)) {
                fprintf(stderr, "bench_kv: item %zu (%s) came back different\n", i, it->name);
                return 1;
            }
        }
        for (size_t i = 0; i < n; i++)
            tw_delete(c, names[i]);
        free(names);

        /* The baseline: one tensor of the same bytes, same connection. */
        char single[96];
        snprintf(single, sizeof(single), "kvs/%d/%d", (int)getpid(), r);
        struct tw_tensor_desc d;
        memset(&d, 0, sizeof(d));
        d.dtype = TW_U8;
        d.ndim = 1;
        d.shape[0] = total;
        t0 = tw_bench_now_s();
        if ((rc = tw_put(c, single, &d, src, total)))
            die(c, "single put", rc);
        sp[r] = tw_bench_now_s() - t0;
        snprintf(single_plane, sizeof(single_plane), "%s", tw_client_data_plane(c));
        memset(dst, 0, 4096);
        t0 = tw_bench_now_s();
        if ((rc = tw_get(c, single, dst, total, NULL)))
            die(c, "single get", rc);
        sg[r] = tw_bench_now_s() - t0;
        if (memcmp(dst, src, 4096)) {
            fprintf(stderr, "bench_kv: single tensor came back different\n");
            return 1;
        }
        tw_delete(c, single);
    }
    unsigned window = tw_client_max_inflight(c);
    tw_close(c);
    double gb = (double)total / 1e9;
    /* Each round in order as well (before the medians sort the arrays): a
     * first round on a fresh server, its memory allocated rather than
     * reused, shows apart from the rest. */
    char per_round[1024] = "";
    const double *per[] = {tp_new, tp_over, tg, sp, sg};
    const char *what[] = {"put new", "overwrite", "get", "single put", "single get"};
    size_t used = 0;
    for (int k = 0; k < 5; k++) {
        appendf(per_round, sizeof(per_round), &used, "%s %s", k ? ";" : "", what[k]);
        for (int r = 0; r < rounds; r++)
            appendf(per_round, sizeof(per_round), &used, " %.3f", gb / per[k][r]);
    }
    double mpn = tw_bench_median(tp_new, rounds), mpo = tw_bench_median(tp_over, rounds),
           mg = tw_bench_median(tg, rounds);
    double msp = tw_bench_median(sp, rounds), msg = tw_bench_median(sg, rounds);
    if (json) {
        printf("{\"workload\":\"%s\",\"scale\":%g,\"tensors\":%zu,\"bytes\":%zu,\"rounds\":%d,"
               "\"fabric\":\"%s\",\"window\":%u,\"batch_plane\":\"%s\",\"single_plane\":\"%s\","
               "\"batch_put_new_gbps\":%.3f,\"batch_put_overwrite_gbps\":%.3f,"
               "\"batch_get_gbps\":%.3f,\"single_put_gbps\":%.3f,\"single_get_gbps\":%.3f,"
               "\"ratio_put_new\":%.3f,\"ratio_put_overwrite\":%.3f,\"ratio_get\":%.3f}\n",
               workload, scale, n, total, rounds, o.fabric ? o.fabric : "none", window, batch_plane,
               single_plane, gb / mpn, gb / mpo, gb / mg, gb / msp, gb / msg, msp / mpn, msp / mpo,
               msg / mg);
    } else {
        printf("%s x%g: %zu tensors, %.3f GB, fabric %s, batch window %s%u, median of %d\n",
               workload, scale, n, gb, o.fabric ? o.fabric : "none",
               o.max_inflight ? "" : "auto, at most ", window, rounds);
        printf("  batch put, new names   %7.3f GB/s  x%.2f of single put\n", gb / mpn, msp / mpn);
        printf("  batch put, overwrite   %7.3f GB/s  x%.2f of single put\n", gb / mpo, msp / mpo);
        printf("  batch get              %7.3f GB/s  x%.2f of single get\n", gb / mg, msg / mg);
        printf("  single put / get       %7.3f / %.3f GB/s\n", gb / msp, gb / msg);
        printf("  planes: batch [%s], single [%s]\n", batch_plane, single_plane);
        printf("  rounds (GB/s):%s\n", per_round);
    }
    free(src);
    free(dst);
    free(batch);
    free(items);
    return 0;
}
