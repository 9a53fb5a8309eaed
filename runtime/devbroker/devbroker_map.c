/*
 * devbroker_map.c -- the small string-keyed hash map the development broker keeps its tables in
 * (topics, groups, offsets, locks, filters, ...).
 *
 * Ownership: the map owns its keys (copied on insert); values belong to the caller, who frees
 * them (rmq__dbmap_free's free_val). Threads: one map is used by one thread at a time (the
 * broker thread for every broker table).
 */
#include "devbroker_int.h"

#include <stdlib.h>
#include <string.h>

static size_t hash_str(const char *s)
{
    size_t h = 1469598103934665603ull;
    while (*s)
        h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

void *rmq__dbmap_get(const db_map_t *m, const char *key)
{
    if (!m->nb) return NULL;
    for (db_ent_t *e = m->b[hash_str(key) % m->nb]; e; e = e->next)
        if (strcmp(e->key, key) == 0) return e->val;
    return NULL;
}

static void map_grow(db_map_t *m)
{
    size_t nb = m->nb ? m->nb * 2 : 16;
    db_ent_t **b = rmq__xcalloc(nb, sizeof(*b));
    for (size_t i = 0; i < m->nb; i++) {
        for (db_ent_t *e = m->b[i], *n; e; e = n) {
            n = e->next;
            size_t k = hash_str(e->key) % nb;
            e->next = b[k];
            b[k] = e;
        }
    }
    free(m->b);
    m->b = b;
    m->nb = nb;
}

void *rmq__dbmap_put(db_map_t *m, const char *key, void *val)
{
    if (m->nb) {
        for (db_ent_t *e = m->b[hash_str(key) % m->nb]; e; e = e->next) {
            if (strcmp(e->key, key) == 0) {
                void *old = e->val;
                e->val = val;
                return old;
            }
        }
    }
    if (m->n + 1 > m->nb) map_grow(m);
    db_ent_t *e = rmq__xmalloc(sizeof(*e));
    e->key = rmq__xstrdup(key);
    e->val = val;
    size_t k = hash_str(key) % m->nb;
    e->next = m->b[k];
    m->b[k] = e;
    m->n++;
    return NULL;
}

void *rmq__dbmap_del(db_map_t *m, const char *key)
{
    if (!m->nb) return NULL;
    for (db_ent_t **pe = &m->b[hash_str(key) % m->nb]; *pe; pe = &(*pe)->next) {
        db_ent_t *e = *pe;
        if (strcmp(e->key, key) == 0) {
            void *v = e->val;
            *pe = e->next;
            free(e->key);
            free(e);
            m->n--;
            return v;
        }
    }
    return NULL;
}

void rmq__dbmap_each(const db_map_t *m, void (*fn)(const char *key, void *val, void *ud), void *ud)
{
    for (size_t i = 0; i < m->nb; i++)
        for (db_ent_t *e = m->b[i]; e; e = e->next)
            fn(e->key, e->val, ud);
}

void rmq__dbmap_free(db_map_t *m, void (*free_val)(void *))
{
    for (size_t i = 0; i < m->nb; i++) {
        for (db_ent_t *e = m->b[i], *n; e; e = n) {
            n = e->next;
            if (free_val) free_val(e->val);
            free(e->key);
            free(e);
        }
    }
    free(m->b);
    memset(m, 0, sizeof(*m));
}
