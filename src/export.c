/*
 * Export of statistics to uslabinfo (USLAB_OPTIONS=export): being written
 * (issue 6). Until then export stays off and the slow-path hook is idle.
 */
#include "slab.h"

_Atomic bool export_active;

void export_poll(void)
{
}
