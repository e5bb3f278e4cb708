/* The tensor store: versions, refcounts, capacity, listing order. */
#include <stdio.h>
#include <string.h>

#include "server/store.h"
#include "tw_test.h"
#include "tw_test_gpu.h"

static void desc(struct tw_descriptor *d, const char *name, uint64_t n)
{
    tw_test_desc_u8(d, name, "cpu", n);
}

static void test_versions_and_capacity(void)
{
    struct tw_store s;
    struct tw_descriptor d;
    struct tw_tensor *a, *b, *c;
    TW_ASSERT_OK(tw__store_init(&s, 3u << 20));
    desc(&d, "w", 2u << 20);
    TW_ASSERT_OK(tw__store_alloc(&s, &d, &a));
    TW_ASSERT_EQ((uintptr_t)a->data % 4096, 0);
    memset(a->data, 0xaa, a->byte_length);
    /* Not visible before commit. */
    TW_ASSERT(tw__store_get(&s, (const uint8_t *)"w", 1) == NULL);
    TW_ASSERT_EQ_U64(s.reserved, 2u << 20);
    TW_ASSERT_ERR(tw__store_alloc(&s, &d, &b), TW_ECAPACITY);
    tw__store_commit(&s, a);
    tw__tensor_unref(a);
    TW_ASSERT_EQ(s.count, 1);
    TW_ASSERT_EQ_U64(s.stored_bytes, 2u << 20);

    /* A reader holds version 1 while a smaller version 2 replaces it. */
    struct tw_tensor *reader = tw__store_get(&s, (const uint8_t *)"w", 1);
    TW_ASSERT(reader == a);
    desc(&d, "w", 1u << 20);
    TW_ASSERT_OK(tw__store_alloc(&s, &d, &b));
    memset(b->data, 0xbb, b->byte_length);
    tw__store_commit(&s, b);
    tw__tensor_unref(b);
    TW_ASSERT_EQ_U64(s.stored_bytes, 1u << 20);
    TW_ASSERT_EQ_U64(s.reserved, 3u << 20); /* the old version is still read */
    TW_ASSERT_EQ(reader->data[12345], 0xaa);
    c = tw__store_get(&s, (const uint8_t *)"w", 1);
    TW_ASSERT(c == b);
    TW_ASSERT_EQ(c->data[0], 0xbb);
    tw__tensor_unref(c);
    tw__tensor_unref(reader);
    TW_ASSERT_EQ_U64(s.reserved, 1u << 20);

    TW_ASSERT_OK(tw__store_delete(&s, (const uint8_t *)"w", 1));
    TW_ASSERT_ERR(tw__store_delete(&s, (const uint8_t *)"w", 1), TW_ENOTFOUND);
    TW_ASSERT_EQ_U64(s.reserved, 0);
    TW_ASSERT_EQ(s.count, 0);
    tw__store_destroy(&s);
}

static void test_list_sorted_and_growth(void)
{
    struct tw_store s;
    struct tw_descriptor d;
    char name[32];
    TW_ASSERT_OK(tw__store_init(&s, 0));
    /* Enough names to grow the table several times; inserted out of order. */
    for (int i = 999; i >= 0; i--) {
        struct tw_tensor *t;
        snprintf(name, sizeof(name), "%s/%03d", (i % 3) ? "a" : "ab", i);
        desc(&d, name, (uint64_t)(i % 5));
        TW_ASSERT_OK(tw__store_alloc(&s, &d, &t));
        tw__store_commit(&s, t);
        tw__tensor_unref(t);
    }
    TW_ASSERT_EQ(s.count, 1000);
    struct tw_tensor **list;
    size_t n;
    TW_ASSERT_OK(tw__store_list(&s, (const uint8_t *)"ab/", 3, &list, &n));
    TW_ASSERT_EQ(n, 334);
    for (size_t i = 1; i < n; i++)
        TW_ASSERT(strcmp(list[i - 1]->name, list[i]->name) < 0);
    tw__store_list_free(list, n);
    TW_ASSERT_OK(tw__store_list(&s, (const uint8_t *)"", 0, &list, &n));
    TW_ASSERT_EQ(n, 1000);
    /* "a/..." sorts before "ab/..." bytewise ('/' < 'b'). */
    TW_ASSERT(strncmp(list[0]->name, "a/", 2) == 0);
    TW_ASSERT(strncmp(list[999]->name, "ab/", 3) == 0);
    tw__store_list_free(list, n);
    tw__store_destroy(&s);
}

static void test_spare_reuse(void)
{
    struct tw_store s;
    struct tw_descriptor d;
    struct tw_tensor *a, *b;
    TW_ASSERT_OK(tw__store_init(&s, 0));
    desc(&d, "x", (4u << 20) - 100);
    TW_ASSERT_OK(tw__store_alloc(&s, &d, &a));
    uint8_t *mem = a->data;
    memset(mem, 1, a->byte_length);
    tw__tensor_unref(a); /* an abandoned put: its mapping becomes a spare */
    TW_ASSERT_EQ_U64(s.spare_bytes, 4u << 20);
    TW_ASSERT_EQ_U64(s.reserved, 0);
    /* Same page-rounded size: the already-faulted mapping comes back. */
    desc(&d, "y", (4u << 20) - 4000);
    TW_ASSERT_OK(tw__store_alloc(&s, &d, &b));
    TW_ASSERT(b->data == mem);
    TW_ASSERT_EQ_U64(s.spare_bytes, 0);
    tw__tensor_unref(b);
    /* With a capacity, spares stay below a quarter of it. */
    tw__store_destroy(&s);
    TW_ASSERT_OK(tw__store_init(&s, 8u << 20));
    desc(&d, "z", 4u << 20);
    TW_ASSERT_OK(tw__store_alloc(&s, &d, &a));
    tw__tensor_unref(a);
    TW_ASSERT_EQ_U64(s.spare_bytes, 0);
    tw__store_destroy(&s);
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

/* Idle memory: spare buffers go back after two unused trim periods, a
 * reused one starts over, small tensors never become spares. */
static void test_trim_spares(void)
{
    struct tw_store s;
    TW_ASSERT_OK(tw__store_init(&s, 0));
    put_delete(&s, "a", 4u << 20);
    put_delete(&s, "b", 2u << 20);
    put_delete(&s, "small", 4096); /* a free slab block, trimmed by the same rule */
    TW_ASSERT_EQ_U64(s.spare_bytes, 6u << 20);
    TW_ASSERT_EQ_U64(tw__store_trim_spares(&s), 0); /* first period: marked */
    /* A put of 4 MiB takes the 4 MiB spare; its next life starts unmarked. */
    put_delete(&s, "a2", 4u << 20);
    TW_ASSERT_EQ_U64(s.spare_bytes, 6u << 20);
    /* Only the unused spare, and the small block. */
    TW_ASSERT_EQ_U64(tw__store_trim_spares(&s), (2u << 20) + 4096);
    TW_ASSERT_EQ_U64(s.spare_bytes, 4u << 20);
    TW_ASSERT_EQ_U64(tw__store_trim_spares(&s), 4u << 20);
    TW_ASSERT_EQ_U64(s.spare_bytes, 0);
    TW_ASSERT_EQ_U64(tw__store_trim_spares(&s), 0);
    tw__store_destroy(&s);
}

/* A full pool makes room for the buffer freed last by dropping the one
 * given back longest ago, whether bytes or slots run out. */
static void test_spares_oldest_go_first(void)
{
    struct tw_store s;
    TW_ASSERT_OK(tw__store_init(&s, 0));
    s.spare_max = 6u << 20;
    put_delete(&s, "a", 4u << 20);
    put_delete(&s, "b", 2u << 20);
    TW_ASSERT_EQ_U64(s.spare_bytes, 6u << 20);
    /* 3 MiB does not fit: "a" (the oldest) goes, "b" stays. */
    put_delete(&s, "c", 3u << 20);
    TW_ASSERT_EQ_U64(s.spare_bytes, 5u << 20);
    int has2 = 0, has3 = 0, has4 = 0;
    for (int i = 0; i < TW_STORE_SPARES; i++) {
        has2 += s.spare[i].p && s.spare[i].len == 2u << 20;
        has3 += s.spare[i].p && s.spare[i].len == 3u << 20;
        has4 += s.spare[i].p && s.spare[i].len == 4u << 20;
    }
    TW_ASSERT(has2 == 1 && has3 == 1 && has4 == 0);
    /* Larger than the whole pool: freed, the others stay. */
    put_delete(&s, "huge", 7u << 20);
    TW_ASSERT_EQ_U64(s.spare_bytes, 5u << 20);
    tw__store_destroy(&s);

    /* Slots: TW_STORE_SPARES + 1 buffers of distinct sizes; the first goes. */
    TW_ASSERT_OK(tw__store_init(&s, 0));
    char name[16];
    for (int i = 0; i <= TW_STORE_SPARES; i++) {
        snprintf(name, sizeof(name), "s%d", i);
        put_delete(&s, name, (1u << 20) + (uint64_t)i * 4096);
    }
    uint64_t want = 0;
    for (int i = 1; i <= TW_STORE_SPARES; i++)
        want += (1u << 20) + (uint64_t)i * 4096;
    TW_ASSERT_EQ_U64(s.spare_bytes, want);
    for (int i = 0; i < TW_STORE_SPARES; i++)
        TW_ASSERT(s.spare[i].p && s.spare[i].len != 1u << 20);
    tw__store_destroy(&s);
}

int main(void)
{
    TW_RUN(test_versions_and_capacity);
    TW_RUN(test_list_sorted_and_growth);
    TW_RUN(test_spare_reuse);
    TW_RUN(test_trim_spares);
    TW_RUN(test_spares_oldest_go_first);
    TW_DONE();
}
