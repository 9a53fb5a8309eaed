/*
 * cmd_hashmap.c -- the order in which Java 4.9.4 writes a RemotingCommand's extFields: that of
 * a java.util.HashMap<String,String> (cmd.c's encoders ask rmq__cmd_hashmap_order for it).
 *
 * Ownership: nothing is kept; the scratch memory of one call is freed before it returns.
 * Threads: any (no shared state).
 */
#include "cmd_int.h"

#include <stdlib.h>
#include <string.h>

/*
 * Order in which a java.util.HashMap<String,String> created with the default capacity and filled
 * with the selected entries in c->ext order iterates them. HashMap facts used (JDK 8+):
 *   - hash = h ^ (h >>> 16) with h = String.hashCode(); bucket = hash & (capacity - 1);
 *   - capacity starts at 16 and doubles when size exceeds 0.75 * capacity;
 *   - a bucket that already holds 8 entries when a 9th arrives triggers treeifyBin, which only
 *     resizes while capacity < 64;
 *   - a bucket is a list in insertion order, and a resize splits it keeping relative order, so
 *     iteration = buckets in index order, insertion order within a bucket.
 * That fast path covers every real header. When a bucket of a 64+ table would get a 9th key, it
 * becomes a red-black tree whose root is moved to the front of the bucket's list: hm_sim then
 * replays the JDK's HashMap/TreeNode code step by step (spec/fixtures/codec/hashmap_order.json).
 * sel[i] says whether entry i takes part; the chosen indexes are written to order[] and their
 * count is returned, or -1 when out of memory.
 */

typedef struct hnode {
    uint32_t hash;
    int idx;                             /* entry index in c->ext */
    int next, prev, left, right, parent; /* node indexes, -1 for null */
    uint8_t red, tree;
} hnode_t;

typedef struct hsim {
    const rmq_cmd_t *c;
    hnode_t *n;
    int *tab;
    size_t cap;
} hsim_t;

/* Next UTF-16 code unit of a UTF-8 string (as rmq_java_hash decodes it), or -1 at the end. */
static int utf16_next(const unsigned char **sp, const unsigned char *end, unsigned *low)
{
    const unsigned char *s = *sp;
    unsigned c, cp;
    size_t left;
    if (*low) {
        cp = *low;
        *low = 0;
        return (int)cp;
    }
    if (s >= end) return -1;
    c = s[0];
    left = (size_t)(end - s);
    if (c < 0x80)
        cp = c, s += 1;
    else if ((c & 0xe0) == 0xc0 && left > 1)
        cp = ((c & 0x1fu) << 6) | (s[1] & 0x3fu), s += 2;
    else if ((c & 0xf0) == 0xe0 && left > 2)
        cp = ((c & 0x0fu) << 12) | ((s[1] & 0x3fu) << 6) | (s[2] & 0x3fu), s += 3;
    else if ((c & 0xf8) == 0xf0 && left > 3)
        cp = ((c & 0x07u) << 18) | ((s[1] & 0x3fu) << 12) | ((s[2] & 0x3fu) << 6) | (s[3] & 0x3fu),
        s += 4;
    else
        cp = 0xfffd, s += 1;
    *sp = s;
    if (cp >= 0x10000) {
        cp -= 0x10000;
        *low = 0xdc00 + (cp & 0x3ff);
        return (int)(0xd800 + (cp >> 10));
    }
    return (int)cp;
}

/* String.compareTo: UTF-16 code units, then length. */
static int java_strcmp(const char *a, const char *b)
{
    const unsigned char *pa = (const unsigned char *)a, *ea = pa + strlen(a);
    const unsigned char *pb = (const unsigned char *)b, *eb = pb + strlen(b);
    unsigned la = 0, lb = 0;
    for (;;) {
        int ua = utf16_next(&pa, ea, &la), ub = utf16_next(&pb, eb, &lb);
        if (ua != ub) return ua < ub ? -1 : 1; /* -1 (end) sorts first */
        if (ua < 0) return 0;
    }
}

/* TreeNode comparison of node x against p: hash (signed), then compareTo. */
static int hs_dir(const hsim_t *m, int x, int p)
{
    int32_t h = (int32_t)m->n[x].hash, ph = (int32_t)m->n[p].hash;
    if (ph > h) return -1;
    if (ph < h) return 1;
    return java_strcmp(m->c->ext[m->n[x].idx].key, m->c->ext[m->n[p].idx].key);
}

static int hs_rotate_left(hnode_t *n, int root, int p)
{
    int r, pp, rl;
    if (p >= 0 && (r = n[p].right) >= 0) {
        if ((rl = n[p].right = n[r].left) >= 0) n[rl].parent = p;
        if ((pp = n[r].parent = n[p].parent) < 0)
            (root = r), n[r].red = 0;
        else if (n[pp].left == p)
            n[pp].left = r;
        else
            n[pp].right = r;
        n[r].left = p;
        n[p].parent = r;
    }
    return root;
}

static int hs_rotate_right(hnode_t *n, int root, int p)
{
    int l, pp, lr;
    if (p >= 0 && (l = n[p].left) >= 0) {
        if ((lr = n[p].left = n[l].right) >= 0) n[lr].parent = p;
        if ((pp = n[l].parent = n[p].parent) < 0)
            (root = l), n[l].red = 0;
        else if (n[pp].right == p)
            n[pp].right = l;
        else
            n[pp].left = l;
        n[l].right = p;
        n[p].parent = l;
    }
    return root;
}

/* HashMap.TreeNode.balanceInsertion. */
static int hs_balance(hnode_t *n, int root, int x)
{
    n[x].red = 1;
    for (;;) {
        int xp, xpp, xppl, xppr;
        if ((xp = n[x].parent) < 0) {
            n[x].red = 0;
            return x;
        }
        if (!n[xp].red || (xpp = n[xp].parent) < 0) return root;
        if (xp == (xppl = n[xpp].left)) {
            if ((xppr = n[xpp].right) >= 0 && n[xppr].red) {
                n[xppr].red = 0;
                n[xp].red = 0;
                n[xpp].red = 1;
                x = xpp;
            } else {
                if (x == n[xp].right) {
                    root = hs_rotate_left(n, root, x = xp);
                    xpp = (xp = n[x].parent) < 0 ? -1 : n[xp].parent;
                }
                if (xp >= 0) {
                    n[xp].red = 0;
                    if (xpp >= 0) {
                        n[xpp].red = 1;
                        root = hs_rotate_right(n, root, xpp);
                    }
                }
            }
        } else {
            if (xppl >= 0 && n[xppl].red) {
                n[xppl].red = 0;
                n[xp].red = 0;
                n[xpp].red = 1;
                x = xpp;
            } else {
                if (x == n[xp].left) {
                    root = hs_rotate_right(n, root, x = xp);
                    xpp = (xp = n[x].parent) < 0 ? -1 : n[xp].parent;
                }
                if (xp >= 0) {
                    n[xp].red = 0;
                    if (xpp >= 0) {
                        n[xpp].red = 1;
                        root = hs_rotate_left(n, root, xpp);
                    }
                }
            }
        }
    }
}

/* HashMap.TreeNode.moveRootToFront. */
static void hs_root_front(hsim_t *m, int root)
{
    hnode_t *n = m->n;
    size_t index = n[root].hash & (m->cap - 1);
    int first = m->tab[index];
    if (root != first) {
        int rn = n[root].next, rp = n[root].prev;
        m->tab[index] = root;
        if (rn >= 0) n[rn].prev = rp;
        if (rp >= 0) n[rp].next = rn;
        if (first >= 0) n[first].prev = root;
        n[root].next = first;
        n[root].prev = -1;
    }
}

/* HashMap.TreeNode.treeify of the list starting at head. */
static void hs_treeify(hsim_t *m, int head)
{
    hnode_t *n = m->n;
    int root = -1, x, next;
    for (x = head; x >= 0; x = next) {
        next = n[x].next;
        n[x].left = n[x].right = -1;
        n[x].tree = 1;
        if (root < 0) {
            n[x].parent = -1;
            n[x].red = 0;
            root = x;
        } else {
            int p = root;
            for (;;) {
                int dir = hs_dir(m, x, p), xp = p;
                if ((p = dir <= 0 ? n[p].left : n[p].right) < 0) {
                    n[x].parent = xp;
                    if (dir <= 0)
                        n[xp].left = x;
                    else
                        n[xp].right = x;
                    root = hs_balance(n, root, x);
                    break;
                }
            }
        }
    }
    hs_root_front(m, root);
}

/* HashMap.TreeNode.putTreeVal for a new key x in the tree bin whose first node is first. */
static void hs_put_tree(hsim_t *m, int first, int x)
{
    hnode_t *n = m->n;
    int root = first, p;
    while (n[root].parent >= 0)
        root = n[root].parent;
    for (p = root;;) {
        int dir = hs_dir(m, x, p), xp = p;
        if ((p = dir <= 0 ? n[p].left : n[p].right) < 0) {
            int xpn = n[xp].next;
            n[x].next = xpn;
            n[x].tree = 1;
            n[x].left = n[x].right = -1;
            if (dir <= 0)
                n[xp].left = x;
            else
                n[xp].right = x;
            n[xp].next = x;
            n[x].parent = n[x].prev = xp;
            if (xpn >= 0) n[xpn].prev = x;
            hs_root_front(m, hs_balance(n, root, x));
            return;
        }
    }
}

/* HashMap.resize (doubling) with list splits and TreeNode.split. */
static void hs_resize(hsim_t *m, int *newtab)
{
    hnode_t *n = m->n;
    size_t old = m->cap, j;
    int *oldtab = m->tab;
    m->tab = newtab;
    m->cap = old * 2;
    for (j = 0; j < m->cap; j++)
        newtab[j] = -1;
    for (j = 0; j < old; j++) {
        int e = oldtab[j], lo = -1, lot = -1, hi = -1, hit = -1, lc = 0, hc = 0, next;
        if (e < 0) continue;
        if (n[e].next < 0) {
            newtab[n[e].hash & (m->cap - 1)] = e;
            continue;
        }
        for (; e >= 0; e = next) {
            next = n[e].next;
            n[e].next = -1;
            if (!(n[e].hash & old)) {
                if ((n[e].prev = lot) < 0)
                    lo = e;
                else
                    n[lot].next = e;
                lot = e;
                lc++;
            } else {
                if ((n[e].prev = hit) < 0)
                    hi = e;
                else
                    n[hit].next = e;
                hit = e;
                hc++;
            }
        }
        if (!n[oldtab[j]].tree) {
            newtab[j] = lo;
            newtab[j + old] = hi;
            continue;
        }
        /* TreeNode.split: untreeify small halves, re-treeify a half when the other exists. */
        if (lo >= 0) {
            newtab[j] = lo;
            if (lc <= 6) {
                for (e = lo; e >= 0; e = n[e].next)
                    n[e].tree = 0;
            } else if (hi >= 0) {
                hs_treeify(m, lo);
            }
        }
        if (hi >= 0) {
            newtab[j + old] = hi;
            if (hc <= 6) {
                for (e = hi; e >= 0; e = n[e].next)
                    n[e].tree = 0;
            } else if (lo >= 0) {
                hs_treeify(m, hi);
            }
        }
    }
}

/* Replay HashMap.put for each selected entry; write the iteration order. */
static int hm_sim(const rmq_cmd_t *c, const uint8_t *sel, int *order, size_t maxcap)
{
    hsim_t m;
    int *t1, *t2, i, k = 0, cnt = 0;
    size_t size = 0, j;
    m.c = c;
    m.n = malloc((size_t)c->n_ext * sizeof(*m.n) + 1);
    t1 = malloc(maxcap * sizeof(int));
    t2 = malloc(maxcap * sizeof(int));
    if (!m.n || !t1 || !t2) {
        free(m.n);
        free(t1);
        free(t2);
        return -1;
    }
    m.tab = t1;
    m.cap = 16;
    for (j = 0; j < m.cap; j++)
        m.tab[j] = -1;
    for (i = 0; i < c->n_ext; i++) {
        uint32_t h;
        size_t b;
        int x;
        if (sel && !sel[i]) continue;
        h = (uint32_t)rmq_java_hash(c->ext[i].key, strlen(c->ext[i].key));
        h ^= h >> 16;
        x = cnt++;
        m.n[x].hash = h;
        m.n[x].idx = i;
        m.n[x].next = m.n[x].prev = m.n[x].left = m.n[x].right = m.n[x].parent = -1;
        m.n[x].red = m.n[x].tree = 0;
        b = h & (m.cap - 1);
        if (m.tab[b] < 0) {
            m.tab[b] = x;
        } else if (m.n[m.tab[b]].tree) {
            hs_put_tree(&m, m.tab[b], x);
        } else {
            int p = m.tab[b], bin = 0;
            while (m.n[p].next >= 0)
                p = m.n[p].next, bin++;
            m.n[p].next = x;
            m.n[x].prev = p;
            if (bin >= 7) { /* treeifyBin */
                if (m.cap < 64) {
                    int *spare = m.tab == t1 ? t2 : t1;
                    hs_resize(&m, spare);
                } else {
                    hs_treeify(&m, m.tab[b]);
                }
            }
        }
        if (++size > m.cap * 3 / 4) hs_resize(&m, m.tab == t1 ? t2 : t1);
    }
    for (j = 0; j < m.cap; j++) {
        int e;
        for (e = m.tab[j]; e >= 0; e = m.n[e].next)
            order[k++] = m.n[e].idx;
    }
    free(m.n);
    free(t1);
    free(t2);
    return k;
}

int rmq__cmd_hashmap_order(const rmq_cmd_t *c, const uint8_t *sel, int *order)
{
    uint32_t hs_stack[32];
    unsigned cnt_stack[64];
    uint32_t *hs = hs_stack;
    unsigned *cnt = cnt_stack;
    size_t cap = 16, maxcap = 64, size = 0, b;
    unsigned sum = 0;
    int i, j;

    while (maxcap < (size_t)c->n_ext * 2 + 2)
        maxcap *= 2;
    if (c->n_ext > (int)RMQ_ARRAY_SIZE(hs_stack)) hs = malloc((size_t)c->n_ext * sizeof(*hs));
    if (maxcap > RMQ_ARRAY_SIZE(cnt_stack)) cnt = malloc(maxcap * sizeof(*cnt));
    if (!hs || !cnt) {
        if (hs != hs_stack) free(hs);
        if (cnt != cnt_stack) free(cnt);
        return -1;
    }
    memset(cnt, 0, cap * sizeof(*cnt));
    for (i = 0; i < c->n_ext; i++) {
        uint32_t h;
        size_t old = cap;
        int treeify;
        if (sel && !sel[i]) continue;
        h = (uint32_t)rmq_java_hash(c->ext[i].key, strlen(c->ext[i].key));
        h ^= h >> 16;
        hs[i] = h;
        treeify = cnt[h & (cap - 1)] >= 8; /* the bucket already holds 8: treeifyBin */
        if (treeify && cap >= 64) {
            /* A real tree bin: replay the JDK's code instead. */
            if (hs != hs_stack) free(hs);
            if (cnt != cnt_stack) free(cnt);
            return hm_sim(c, sel, order, maxcap);
        }
        cnt[h & (cap - 1)]++;
        size++;
        if (treeify && cap < 64) cap *= 2; /* treeifyBin resizes small tables instead */
        if (size > cap * 3 / 4) cap *= 2;
        if (cap != old) {
            memset(cnt, 0, cap * sizeof(*cnt));
            for (j = 0; j <= i; j++)
                if (!sel || sel[j]) cnt[hs[j] & (cap - 1)]++;
        }
    }
    /* Iteration order: stable counting sort by bucket index. */
    memset(cnt, 0, cap * sizeof(*cnt));
    for (i = 0; i < c->n_ext; i++)
        if (!sel || sel[i]) cnt[hs[i] & (cap - 1)]++;
    for (b = 0; b < cap; b++) {
        unsigned t = cnt[b];
        cnt[b] = sum;
        sum += t;
    }
    for (i = 0; i < c->n_ext; i++)
        if (!sel || sel[i]) order[cnt[hs[i] & (cap - 1)]++] = i;
    if (hs != hs_stack) free(hs);
    if (cnt != cnt_stack) free(cnt);
    return (int)sum;
}
