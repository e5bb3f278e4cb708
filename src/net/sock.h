/*
 * TCP socket helpers. Every function returns 0 (or an fd count) or a negated
 * errno, converted right at the failing system call. File descriptors handed
 * out belong to the caller, who closes them.
 */
#ifndef TW_NET_SOCK_H
#define TW_NET_SOCK_H

#include <sys/socket.h>

/* Socket buffer size requested for data connections (the kernel may clamp it
 * to net.core.{r,w}mem_max). */
#define TW_NET_SOCKBUF_BYTES (4 << 20)

/*
 * The most bytes one send or receive system call of a data connection asks
 * for (tensor payloads are moved in pieces of this size; frames are
 * gathered up to it). One call per 256 KiB instead of one per socket
 * buffer or whole payload: on the 2-core VM a loopback stream of 256 MiB
 * ran 6384-6844 MiB/s in 256 KiB calls on both sides against 5546-5932 in
 * 256 MiB calls; as the cap on our own calls, 128 KiB and 1 MiB were
 * slower than 256 KiB and 512 KiB about equal; inline puts of 256 MiB ran
 * 13-24% faster with it, gets 25-27% (docs/performance.md, "Why
 * libfabric's tcp outran our socket loops"). Our reading, not measured:
 * a large call holds the socket through a long copy, smaller ones let the
 * acknowledgements and the other side's progress in between.
 */
#define TW_NET_IO_MAX ((size_t)256 << 10)

/* A listening socket: nonblocking, close-on-exec, SO_REUSEADDR, bound to
 * sa, with the given backlog. *out_fd receives it. */
int tw__net_listen(const struct sockaddr *sa, socklen_t len, int backlog, int *out_fd);

/*
 * Accepts one connection from a nonblocking listener. The new socket is
 * nonblocking, close-on-exec, TCP_NODELAY and has large buffers. Returns 0,
 * -EAGAIN when no connection is pending, or another negated errno (-EMFILE
 * and friends are the caller's to handle: they do not break the listener).
 * peer / peer_len may be NULL.
 */
int tw__net_accept(int lfd, int *out_fd, struct sockaddr_storage *peer, socklen_t *peer_len);

/* A blocking connect (close-on-exec, TCP_NODELAY, large buffers). */
int tw__net_connect(const struct sockaddr *sa, socklen_t len, int *out_fd);

int tw__net_set_nonblocking(int fd, int on);
int tw__net_set_nodelay(int fd);
/* Sets SO_SNDBUF / SO_RCVBUF to bytes where net.core.wmem_max / rmem_max
 * allow that much (otherwise autotuning does better than a clamped size);
 * failures are ignored (the kernel default still works). Thread-safe. */
void tw__net_set_bufsizes(int fd, int bytes);
/* The locally bound address of fd (to learn an ephemeral port). */
int tw__net_local_addr(int fd, struct sockaddr_storage *out, socklen_t *out_len);

#endif
