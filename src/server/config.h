/*
 * tensorwired configuration: defaults, command line, and a "key = value"
 * config file with the same keys as the long options (without "--").
 * Command-line options override the file wherever they appear.
 *
 * Sizes follow tw_parse_size (include/tensorwire/size.h), the rules the CLI
 * uses too. Durations are seconds, with an optional
 * fraction ("0.5"); 0 disables a timeout.
 */
#ifndef TW_SERVER_CONFIG_H
#define TW_SERVER_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "tensorwire/size.h"
#include "proto/device.h"

#define TW_SRV_DEFAULT_LISTEN "127.0.0.1:7450"

/* The CPU plus every CUDA ordinal a tag can name (proto/device.h). */
#define TW_SRV_MAX_DEVICES (TW_DEVICE_MAX_CUDA_ORDINAL + 2)

/* One "--capacity TAG=SIZE" entry for a GPU. */
struct tw_srv_device_capacity {
    struct tw_device dev;
    uint64_t bytes; /* 0 = unlimited */
};

struct tw_srv_config {
    char listen[256];
    char token_file[4096];         /* "" = no authentication */
    int allow_insecure_token_file; /* accept a token file group or others can read */
    uint64_t capacity;             /* of cpu: bytes; 0 = unlimited; default 3/4 of RAM */
    /* --devices: where tensors may be stored; ndevices 0 = the default
     * (cpu plus every visible GPU, decided at startup: server/devices.h). */
    unsigned ndevices;
    struct tw_device devices[TW_SRV_MAX_DEVICES];
    /* --capacity cuda:N=SIZE entries (cpu's goes to `capacity`); a GPU
     * without one gets the default fraction of its free memory. */
    unsigned ncapacities;
    struct tw_srv_device_capacity capacities[TW_SRV_MAX_DEVICES];
    int log_level;  /* enum tw_log_level */
    int log_format; /* enum tw_log_format */
    uint32_t max_connections;
    /* Admission (src/server/admission.h): connections not yet through the
     * handshake, in all and per client address. */
    uint32_t max_handshakes;
    uint32_t max_handshakes_per_address;
    uint32_t max_inflight; /* per connection, announced in HELLO_ACK */
    uint32_t max_frame;    /* announced in HELLO_ACK */
    uint64_t handshake_timeout_ms;
    /* The handshake deadline of connections accepted while more than half
     * of max_handshakes are waiting (never longer than the normal one). */
    uint64_t handshake_timeout_busy_ms;
    uint64_t idle_timeout_ms;
    uint64_t transfer_timeout_ms;
    uint64_t shutdown_grace_ms; /* how long SIGTERM waits for peers to drain */
    /* RDMA data plane: "auto" (default: every usable provider, real NICs
     * first, then shm, then tcp), "none", or a provider list for
     * tw__fabric_open(). A plane that fails to open is logged and the server
     * runs inline-only. */
    char fabric[128];
    int push; /* enum tw_srv_push: who moves the bytes of an RDMA put */
    /* Gets and puts of fewer bytes move inline even when the client asked
     * for RDMA (0 = RDMA at every size). Default TW_DEFAULT_RDMA_MIN_BYTES,
     * which, while not set, applies to gets other than over shm only
     * (below). */
    uint64_t rdma_min_bytes;
    /* 0 until --rdma-min-bytes (or its config key) set it: until then shm
     * connections' gets use TW_DEFAULT_RDMA_MIN_BYTES_SHM and every
     * connection's puts TW_DEFAULT_RDMA_MIN_BYTES_PUT
     * (tw__srv_rdma_min_bytes). */
    int rdma_min_bytes_set;
    /* --metrics HOST:PORT: serve Prometheus text on /metrics ("" = off). */
    char metrics[256];
    /* --gpudirect auto|off|require (enum tw_gdr_mode, gdr/policy.h) and
     * --gpudirect-max-distance (enum tw_pcie_dist, default PXB): GPUDirect
     * admission of the served GPUs on the plane's provider
     * (docs/gpudirect.md). require refuses to start unless some served GPU
     * is admitted. */
    int gpudirect;
    int gpudirect_max_distance;
};

/* --push: destination policy (applied by tw__path_decide, proto/path.c).
 * AUTO pushes into GPU destinations admitted for GPUDirect (served GPUs
 * whose verdict is admitted on the plane's provider, src/gdr/admission.h) and lets the client write
 * a put over shm; ALWAYS pushes whenever bit 3 was negotiated; NEVER does not announce bit 3 at
 * all. */
enum tw_srv_push { TW_SRV_PUSH_AUTO = 0, TW_SRV_PUSH_ALWAYS = 1, TW_SRV_PUSH_NEVER = 2 };

void tw__srv_config_defaults(struct tw_srv_config *c);
/* 3/4 of physical memory (0 when it cannot be determined). */
uint64_t tw__srv_default_capacity(void);

/*
 * Applies argv. Returns 0, 1 when --help was given (usage is printed on
 * stdout, the caller exits 0), or TW_EINVAL with errbuf saying which option
 * and why (the caller prints it with the usage hint and exits 2).
 */
int tw__srv_config_from_args(struct tw_srv_config *c, int argc, char **argv, char *errbuf,
                             size_t errlen);
/* Applies one key (a long option name without "--") and its value. */
int tw__srv_config_set(struct tw_srv_config *c, const char *key, const char *value, char *errbuf,
                       size_t errlen);
/* Reads a config file: "key = value" lines, '#' comments, blank lines. */
int tw__srv_config_load_file(struct tw_srv_config *c, const char *path, char *errbuf,
                             size_t errlen);
/* Prints --help text to stdout. */
void tw__srv_config_usage(const char *argv0);
/* Prints "tensorwired VERSION (protocol N)" and the libfabric and CUDA
 * driver versions found (src/server/version_info.c). */
void tw__srv_print_version(void);

/*
 * "--devices" value: comma-separated device tags ("cpu,cuda:0,cuda:1"),
 * each through tw__device_parse, no duplicates, no empty entries. Fills
 * out[0..*n). Returns 0 or TW_EINVAL with the reason in err.
 */
int tw__srv_parse_devices(const char *s, struct tw_device *out, unsigned max, unsigned *n,
                          char *err, size_t errlen);
/*
 * "--capacity" value: a bare SIZE (the CPU's, as before) or a list
 * "cpu=64Gi,cuda:0=40Gi". Sets c->capacity for cpu and replaces
 * c->capacities with the GPU entries given. Returns 0 or TW_EINVAL with the
 * reason in err (c unchanged then).
 */
int tw__srv_parse_capacity(const char *s, struct tw_srv_config *c, char *err, size_t errlen);

/* "2.5" -> 2500 (milliseconds). Returns 0 or TW_EINVAL. */
int tw__parse_seconds(const char *s, uint64_t *out_ms);

#endif
