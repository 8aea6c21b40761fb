/* io.h: the I/O module's declarations live in include/remat.h (section "data
 * and files"); this header only gathers what the module's files include. */
#ifndef REMAT_IO_H
#define REMAT_IO_H

#include "remat.h"

#endif
