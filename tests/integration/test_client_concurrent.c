/*
 * Many clients at once against one tensorwired: THREADS threads, each with its
 * own connection (a tw_client is not thread-safe), each putting and getting
 * ITEMS tensors per round in batches with many requests in flight, and
 * checking every byte. Names are per thread, plus one shared tensor that all
 * threads read while one rewrites it with self-describing content, so a torn
 * (partially replaced) read would be caught.
 */
#include <pthread.h>
#include <stdint.h>

#include "tensorwire/tensorwire.h"
#include "integration/server_fixture.h"
#include "tw_test.h"

#define THREADS 8
#define ITEMS 96
#define ROUNDS 3
#define MAXLEN (48 * 1024)
#define SHARED_LEN (1u << 20)

static struct tw_test_server srv;

struct worker {
    int id;
    int failed;
    char why[512];
};

static uint8_t pattern(int thread, int round, int item, size_t i)
{
    return (uint8_t)(thread * 131 + round * 17 + item * 7 + i * 29 + (i >> 8));
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct tw_client_options o;
    tw_client *c = NULL;
    struct tw_batch_item items[ITEMS];
    char names[ITEMS][24];
    uint8_t *src = malloc((size_t)ITEMS * MAXLEN), *dst = malloc((size_t)ITEMS * MAXLEN);
    uint8_t *shared = malloc(SHARED_LEN);
    int rc;

    tw_test_client_options(&o);
    o.max_inflight = 32;
    if (!src || !dst || !shared) {
        snprintf(w->why, sizeof(w->why), "out of memory");
        goto out_fail;
    }
    rc = tw_client_connect(srv.addr, &o, &c);
    if (rc) {
        snprintf(w->why, sizeof(w->why), "connect: %s", tw_strerror_name(rc));
        goto out_fail;
    }
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < ITEMS; i++) {
            size_t len = (size_t)((w->id * 7919 + round * 104729 + i * 1299709) % MAXLEN);
            snprintf(names[i], sizeof(names[i]), "conc/t%d/i%d", w->id, i);
            for (size_t k = 0; k < len; k++)
                src[(size_t)i * MAXLEN + k] = pattern(w->id, round, i, k);
            items[i] = (struct tw_batch_item){
                .name = names[i], .buf = src + (size_t)i * MAXLEN, .len = len};
            items[i].desc.dtype = TW_U8;
            items[i].desc.ndim = 1;
            items[i].desc.shape[0] = len;
        }
        rc = tw_batch_put(c, items, ITEMS);
        if (rc) {
            snprintf(w->why, sizeof(w->why), "batch_put: %s: %s", tw_strerror_name(rc),
                     tw_client_last_error_message(c));
            goto out_fail;
        }
        for (int i = 0; i < ITEMS; i++) {
            items[i].buf = dst + (size_t)i * MAXLEN;
            items[i].len = MAXLEN;
        }
        memset(dst, 0, (size_t)ITEMS * MAXLEN);
        rc = tw_batch_get(c, items, ITEMS);
        if (rc) {
            snprintf(w->why, sizeof(w->why), "batch_get: %s: %s", tw_strerror_name(rc),
                     tw_client_last_error_message(c));
            goto out_fail;
        }
        for (int i = 0; i < ITEMS; i++) {
            size_t len = (size_t)items[i].desc.byte_length;
            if (memcmp(dst + (size_t)i * MAXLEN, src + (size_t)i * MAXLEN, len) != 0 ||
                len != (size_t)((w->id * 7919 + round * 104729 + i * 1299709) % MAXLEN)) {
                snprintf(w->why, sizeof(w->why), "round %d item %d: bytes differ", round, i);
                goto out_fail;
            }
        }
        /* The shared tensor: thread 0 rewrites it, the others read it. Every
         * version is one byte value repeated, so a mix means a torn read. */
        if (w->id == 0) {
            struct tw_tensor_desc d = {.dtype = TW_U8, .ndim = 1, .shape = {SHARED_LEN}};
            memset(shared, round + 1, SHARED_LEN);
            rc = tw_put(c, "conc/shared", &d, shared, SHARED_LEN);
        } else {
            rc = tw_get(c, "conc/shared", shared, SHARED_LEN, NULL);
            if (rc == TW_ENOTFOUND)
                rc = 0; /* not written yet */
            else if (rc == 0 && strncmp(tw_client_data_plane(c), tw_test_expected_plane(),
                                        strlen(tw_test_expected_plane())) != 0) {
                snprintf(w->why, sizeof(w->why), "conc/shared moved by %s, expected %s",
                         tw_client_data_plane(c), tw_test_expected_plane());
                goto out_fail;
            } else if (rc == 0)
                for (size_t k = 1; k < SHARED_LEN; k++)
                    if (shared[k] != shared[0]) {
                        snprintf(w->why, sizeof(w->why), "torn read of conc/shared at %zu", k);
                        goto out_fail;
                    }
        }
        if (rc) {
            snprintf(w->why, sizeof(w->why), "shared: %s: %s", tw_strerror_name(rc),
                     tw_client_last_error_message(c));
            goto out_fail;
        }
    }
    for (int i = 0; i < ITEMS; i++)
        if (tw_delete(c, names[i]) != 0) {
            snprintf(w->why, sizeof(w->why), "delete %.24s failed", names[i]);
            goto out_fail;
        }
    goto out_close;

out_fail:
    w->failed = 1;
out_close:
    tw_close(c);
    free(src);
    free(dst);
    free(shared);
    return NULL;
}

static void test_many_clients(void)
{
    pthread_t th[THREADS];
    struct worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){.id = i};
        TW_ASSERT_EQ(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < THREADS; i++)
        if (w[i].failed)
            TW_FAIL("thread %d: %s", i, w[i].why);
    tw_client *c = NULL;
    struct tw_tensor_info *list;
    size_t n;
    struct tw_client_options o;
    tw_test_client_options(&o);
    TW_ASSERT_OK(tw_client_connect(srv.addr, &o, &c));
    TW_ASSERT_OK(tw_list(c, "conc/t", &list, &n));
    TW_ASSERT_EQ(n, 0);
    tw_list_free(list);
    TW_ASSERT_OK(tw_delete(c, "conc/shared"));
    tw_close(c);
}

int main(void)
{
    tw_test_server_start(&srv, NULL);
    TW_RUN(test_many_clients);
    tw_test_server_stop(&srv);
    TW_DONE();
}
