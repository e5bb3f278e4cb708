/*
 * tensorwire public API, umbrella header.
 *
 * Only what is declared under include/tensorwire/ is exported from
 * libtensorwire; everything else is internal and may change.
 */
#ifndef TENSORWIRE_H
#define TENSORWIRE_H

#include "tensorwire/error.h"
#include "tensorwire/mem.h"
#include "tensorwire/version.h"
#include "tensorwire/client.h"
#include "tensorwire/size.h"
#include "tensorwire/doctor.h"

#endif
