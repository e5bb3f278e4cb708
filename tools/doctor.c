/*
 * `tensorwire doctor`: prints why GPUDirect RDMA is or is not used here
 * (tw_doctor, include/tensorwire/doctor.h). Needs no server.
 *
 * Exit status (docs/gpudirect.md): 0 when GPUDirect is admitted for at least
 * one GPU, or when there is no GPU at all (nothing to admit); 3 when GPUs
 * exist and GPUDirect is admitted for none of them; 1 when the report could
 * not be made; 2 for a usage error.
 */
#include <stdio.h>
#include <string.h>

#include "tools/cli.h"

#define TW_CLI_NO_GPUDIRECT 3

static const char usage_doctor[] =
    "usage: tensorwire doctor [--json] [--fabric PROVIDERS] [--sysfs-root DIR]\n"
    "  Reports the CUDA driver and GPUs, libfabric and its providers, RDMA NICs,\n"
    "  and for each GPU and provider whether GPUDirect RDMA is admitted, predicate\n"
    "  by predicate, with what to change.\n"
    "  --json               one JSON object (schema in docs/gpudirect.md)\n"
    "  --fabric PROVIDERS   providers to probe (default verbs,efa,shm,tcp)\n"
    "  --sysfs-root DIR     read sysfs facts under DIR (tests)\n"
    "Exit status: 0 GPUDirect admitted for a GPU (or no GPU here), 3 GPUs but\n"
    "GPUDirect admitted for none, 1 failure, 2 usage error.\n";

int tw_cli_doctor(int argc, char **argv)
{
    const char *providers = NULL, *root = NULL;
    unsigned flags = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage_doctor, stdout);
            return TW_CLI_OK;
        } else if (strcmp(a, "--json") == 0) {
            flags |= TW_DOCTOR_JSON;
        } else if ((strcmp(a, "--fabric") == 0 || strcmp(a, "--sysfs-root") == 0) && i + 1 < argc) {
            *(a[2] == 'f' ? &providers : &root) = argv[++i];
        } else if (strncmp(a, "--fabric=", 9) == 0) {
            providers = a + 9;
        } else if (strncmp(a, "--sysfs-root=", 13) == 0) {
            root = a + 13;
        } else {
            fprintf(stderr, "tensorwire doctor: %s '%.64s' (see tensorwire doctor --help)\n",
                    a[0] == '-' && (strcmp(a, "--fabric") == 0 || strcmp(a, "--sysfs-root") == 0)
                        ? "missing value for"
                    : a[0] == '-' ? "unknown option"
                                  : "unexpected argument",
                    a);
            return TW_CLI_USAGE;
        }
    }
    if (providers && tw_cli_check_fabric("doctor", providers))
        return TW_CLI_USAGE;
    char *report = NULL;
    struct tw_doctor_result res;
    int rc = tw_doctor(providers, root, flags, &report, &res);
    if (rc) {
        fprintf(stderr, "tensorwire doctor: %s: %s\n", tw_strerror_name(rc), tw_strerror(rc));
        return TW_CLI_FAILED;
    }
    fputs(report, stdout);
    tw_free(report);
    if (res.gpus > 0 && res.admitted_gpus == 0)
        return TW_CLI_NO_GPUDIRECT;
    return TW_CLI_OK;
}
