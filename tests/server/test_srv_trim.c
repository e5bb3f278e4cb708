/* Idle memory: spare buffers of the store go back after two unused trim
 * periods, a reused one starts over, small tensors never become spares. */
#include <string.h>

#include "server/store.h"
#include "tw_test.h"

static void desc(struct tw_descriptor *d, const char *name, uint64_t n)
{
    memset(d, 0, sizeof(*d));
    d->dtype = TW_DTYPE_U8;
    d->ndim = 1;
    d->shape[0] = n;
    d->byte_length = n;
    d->name.ptr = (const uint8_t *)name;
    d->name.len = (uint32_t)strlen(name);
    d->device_tag.ptr = (const uint8_t *)"cpu";
    d->device_tag.len = 3;
}

/* Puts and deletes `name` of n bytes: its storage becomes a spare (large). */
static void put_delete(struct tw_store *s, const char *name, uint64_t n)
{
    struct tw_descriptor d;
    struct tw_tensor *t;
    desc(&d, name, n);
    TW_ASSERT_OK(tw__store_alloc(s, &d, &t));
    memset(t->data, 0x5a, n);
    tw__store_commit(s, t);
    tw__tensor_unref(t); /* the store holds its own reference */
    TW_ASSERT_OK(tw__store_delete(s, (const uint8_t *)name, strlen(name)));
}

static void test_trim_spares(void)
{
    struct tw_store s;
    TW_ASSERT_OK(tw__store_init(&s, 0));
    put_delete(&s, "a", 4u << 20);
    put_delete(&s, "b", 2u << 20);
    put_delete(&s, "small", 4096); /* posix_memalign'd: freed at once */
    TW_ASSERT_EQ_U64(s.spare_bytes, 6u << 20);
    TW_ASSERT_EQ_U64(tw__store_trim_spares(&s), 0); /* first period: marked */
    /* A put of 4 MiB takes the 4 MiB spare; its next life starts unmarked. */
    put_delete(&s, "a2", 4u << 20);
    TW_ASSERT_EQ_U64(s.spare_bytes, 6u << 20);
    TW_ASSERT_EQ_U64(tw__store_trim_spares(&s), 2u << 20); /* only the unused one */
    TW_ASSERT_EQ_U64(s.spare_bytes, 4u << 20);
    TW_ASSERT_EQ_U64(tw__store_trim_spares(&s), 4u << 20);
    TW_ASSERT_EQ_U64(s.spare_bytes, 0);
    TW_ASSERT_EQ_U64(tw__store_trim_spares(&s), 0);
    tw__store_destroy(&s);
}

int main(void)
{
    TW_RUN(test_trim_spares);
    TW_DONE();
}
