/*
 * tensorwired --version: the server's version and protocol version, and the
 * libfabric and CUDA driver this process finds (each only when found), so a
 * bug report says which data planes were possible.
 */
#include "server/config.h"

#include <stdio.h>

#include "fabric/fi_api.h"
#include "gpu/cuda.h"
#include "tensorwire/version.h"

void tw__srv_print_version(void)
{
    const struct tw_cuda_api *cu = NULL;
    char why[256] = "";
    int drv = 0;

    printf("tensorwired %s (protocol %d)\n", TW_VERSION_STRING, TW_PROTOCOL_VERSION);
    char fab[256];
    printf("%s\n", tw__fabric_lib_describe(fab, sizeof(fab)));
    if (tw__cuda_get(&cu, why, sizeof(why)) == 0 && cu->cuDriverGetVersion(&drv) == CUDA_SUCCESS)
        printf("cuda driver %d.%d\n", drv / 1000, drv % 1000 / 10);
    else
        printf("cuda: not found (%s)\n", why[0] ? why : "no driver version");
}
