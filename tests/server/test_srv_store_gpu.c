/*
 * GPU-resident tensors in the store on real GPUs (exit 77 without a CUDA
 * driver or device): a version tagged cuda:N lives in that device's memory
 * (the driver says so), counts against that GPU only, keeps its memory while
 * a reader holds it, and gives it back to the driver with the last
 * reference (small blocks: carved from shared chunks, kept for reuse,
 * reused only after the copies queued from them, trimmed). Every visible
 * GPU.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cuda.h"
#include "mem/memkind.h"
#include "server/store.h"
#include "tw_test.h"
#include "tw_test_gpu.h"

static void test_gpu(const struct tw_cuda_api *cu, int ordinal)
{
    struct tw_store s;
    struct tw_descriptor d;
    struct tw_tensor *t, *reader;
    struct tw_mem_attr attr;
    char tag[16], err[256];
    const uint64_t n = (64ull << 20) + 3;
    snprintf(tag, sizeof(tag), "cuda:%d", ordinal);
    TW_ASSERT_OK(tw__store_init(&s, 1 << 20));
    TW_ASSERT_OK(tw__store_add_gpu(&s, ordinal, 1ull << 30));
    tw_test_desc_u8(&d, "w", tag, n);
    TW_ASSERT_OK(tw__store_alloc(&s, &d, &t));
    TW_ASSERT(t->data != NULL);
    TW_ASSERT_OK(tw__memkind_cuda.query((uintptr_t)t->data, n, &attr, err, sizeof(err)));
    TW_ASSERT_EQ(attr.device, ordinal);
    TW_ASSERT_EQ_U64(tw__store_gpu(&s, ordinal)->reserved, n);
    TW_ASSERT_EQ_U64(s.reserved, 0);
    /* The memory is usable: bytes in and out through the driver. */
    uint8_t *a = malloc(n), *b = malloc(n);
    TW_ASSERT(a && b);
    for (uint64_t i = 0; i < n; i++)
        a[i] = (uint8_t)(i * 131 + 7);
    TW_ASSERT_OK(
        tw__memkind_cuda.copy_from_host((uintptr_t)t->data, a, n, &attr, err, sizeof(err)));
    TW_ASSERT_OK(tw__memkind_cuda.copy_to_host(b, (uintptr_t)t->data, n, &attr, err, sizeof(err)));
    TW_ASSERT_MEM_EQ(a, b, n);
    tw__store_commit(&s, t);
    TW_ASSERT_EQ_U64(tw__store_gpu(&s, ordinal)->stored_bytes, n);
    /* A reader keeps the old version's device memory alive. */
    reader = tw__store_get(&s, (const uint8_t *)"w", 1);
    uintptr_t addr = (uintptr_t)reader->data;
    tw__tensor_unref(t);
    TW_ASSERT_OK(tw__store_delete(&s, (const uint8_t *)"w", 1));
    TW_ASSERT_OK(tw__memkind_cuda.query(addr, n, &attr, err, sizeof(err)));
    tw__tensor_unref(reader);
    /* Gone with the last reference: the driver no longer knows it. */
    TW_ASSERT(tw__memkind_cuda.query(addr, n, &attr, err, sizeof(err)) != 0);
    TW_ASSERT_EQ_U64(tw__store_gpu(&s, ordinal)->reserved, 0);
    fprintf(stderr, "cuda:%d: %llu-byte tensor stored, read back, freed\n", ordinal,
            (unsigned long long)n);
    /* More than the GPU's capacity. */
    tw_test_desc_u8(&d, "big", tag, (1ull << 30) + 1);
    TW_ASSERT_ERR(tw__store_alloc(&s, &d, &t), TW_ECAPACITY);
    tw__store_destroy(&s);
    free(a);
    free(b);
}

/* Small versions' device blocks are carved from one allocation of the
 * driver (64 blocks of 32 KiB in a 2 MiB chunk, each usable on its own),
 * kept when freed and handed out again for the same size, only after the
 * copies queued from them finished; a trim gives back the chunks unused
 * for a whole period, and every idle one when asked. */
static void test_kept_blocks(const struct tw_cuda_api *cu, int ordinal)
{
    const struct tw_store_devmem_ops *m = &tw__store_devmem_cuda;
    struct tw_mem_attr attr;
    char err[256];
    const size_t n = 32768;
    void *a = NULL, *b = NULL;
    uint8_t *host = NULL, *pat = malloc(n);
    TW_ASSERT(pat);
    for (size_t i = 0; i < n; i++)
        pat[i] = (uint8_t)(i * 7 + 1);
    TW_ASSERT_OK(cu->cuMemHostAlloc((void **)&host, n, 0) == CUDA_SUCCESS ? 0 : -1);
    /* One driver allocation serves 64 blocks; each holds its own bytes. */
    void *blk[64];
    uintptr_t base = 0;
    for (int i = 0; i < 64; i++) {
        TW_ASSERT_OK(m->alloc(ordinal, n, &blk[i], err, sizeof(err)));
        TW_ASSERT_OK(tw__memkind_cuda.query((uintptr_t)blk[i], n, &attr, err, sizeof(err)));
        if (i == 0)
            base = attr.alloc_base;
        TW_ASSERT_EQ_U64(attr.alloc_base, base);
        TW_ASSERT(attr.alloc_len >= 64 * n);
        memset(pat, i + 1, n);
        TW_ASSERT_OK(m->from_host(ordinal, blk[i], pat, n, err, sizeof(err)));
    }
    for (int i = 0; i < 64; i++) {
        TW_ASSERT_OK(m->to_host(ordinal, host, blk[i], n, err, sizeof(err)));
        TW_ASSERT(host[0] == i + 1 && host[n - 1] == i + 1);
    }
    uint64_t held = 0, held_free = 0;
    m->held(ordinal, &held, &held_free); /* STATS device.cudaN.slab_* */
    TW_ASSERT_EQ_U64(held, 64 * n);
    TW_ASSERT_EQ_U64(held_free, 0);
    for (int i = 63; i >= 0; i--)
        m->free(ordinal, blk[i], n);
    m->held(ordinal, &held, &held_free);
    TW_ASSERT_EQ_U64(held, 64 * n);
    TW_ASSERT_EQ_U64(held_free, 64 * n);
    for (size_t i = 0; i < n; i++)
        pat[i] = (uint8_t)(i * 7 + 1);
    TW_ASSERT_OK(m->alloc(ordinal, n, &a, err, sizeof(err)));
    TW_ASSERT(a == blk[0]);
    TW_ASSERT_OK(m->from_host(ordinal, a, pat, n, err, sizeof(err)));
    /* A copy queued from a, then a freed (kept) and allocated again: the
     * copy must have read the old bytes before the block is reused. */
    uint64_t ticket = 0;
    TW_ASSERT_OK(m->copy_async(ordinal, host, a, n, 1, &ticket, err, sizeof(err)));
    m->free(ordinal, a, n);
    TW_ASSERT_OK(tw__memkind_cuda.query((uintptr_t)a, n, &attr, err, sizeof(err))); /* kept */
    TW_ASSERT_OK(m->alloc(ordinal, n, &b, err, sizeof(err)));
    TW_ASSERT(b == a);
    TW_ASSERT_EQ(m->copied(ordinal, ticket, 0, err, sizeof(err)), 1);
    TW_ASSERT_MEM_EQ(host, pat, n);
    memset(pat, 0xA5, n);
    TW_ASSERT_OK(m->from_host(ordinal, b, pat, n, err, sizeof(err)));
    m->free(ordinal, b, n);
    /* Another size is not served from them. */
    TW_ASSERT_OK(m->alloc(ordinal, n + 4096, &b, err, sizeof(err)));
    TW_ASSERT(b != a);
    m->free(ordinal, b, n + 4096);
    /* Used since the last trim: kept; unused for a period: given back. */
    (void)m->trim(ordinal, 0);
    TW_ASSERT_OK(tw__memkind_cuda.query((uintptr_t)a, n, &attr, err, sizeof(err)));
    TW_ASSERT(m->trim(ordinal, 0) >= n);
    TW_ASSERT(tw__memkind_cuda.query((uintptr_t)a, n, &attr, err, sizeof(err)) != 0);
    TW_ASSERT_OK(m->alloc(ordinal, n, &a, err, sizeof(err)));
    m->free(ordinal, a, n);
    TW_ASSERT(m->trim(ordinal, 1) >= n);
    TW_ASSERT(tw__memkind_cuda.query((uintptr_t)a, n, &attr, err, sizeof(err)) != 0);
    m->held(ordinal, &held, &held_free);
    TW_ASSERT_EQ_U64(held, 0);
    cu->cuMemFreeHost(host);
    free(pat);
    fprintf(stderr,
            "cuda:%d: 64 x 32 KiB from one allocation; a freed block reused after its "
            "queued copy, trimmed\n",
            ordinal);
}

int main(void)
{
    tw_test_each_gpu("test_gpu", test_gpu);
    tw_test_each_gpu("test_kept_blocks", test_kept_blocks);
    TW_DONE();
}
