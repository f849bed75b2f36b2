// SPDX-License-Identifier: GPL-2.0
/* The tracepoints of kdat_trace.h, defined once. */
#define CREATE_TRACE_POINTS
#include "kdat_base.h"
#include "kdat_trace.h"
