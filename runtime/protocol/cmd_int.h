/*
 * cmd_int.h -- what the files of the RemotingCommand codec share (cmd.c, cmd_hashmap.c). Not
 * for use outside protocol/cmd*.c: everything else goes through cmd.h.
 * Threads: any, as cmd.h.
 */
#ifndef RMQ_CMD_INT_H
#define RMQ_CMD_INT_H

#include "cmd.h"

/*
 * Order in which a java.util.HashMap<String,String> created with the default capacity and filled
 * with the selected entries in c->ext order iterates them (see cmd_hashmap.c for the JDK facts
 * it relies on). sel[i] says whether entry i takes part (NULL: all); the chosen indexes are
 * written to order[] (room for c->n_ext) and their count is returned, or -1 when out of memory.
 */
int rmq__cmd_hashmap_order(const rmq_cmd_t *c, const uint8_t *sel, int *order);

#endif
