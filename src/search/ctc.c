/* ctc.c — CTC greedy and prefix beam search, bit-faithful to WeNet's search.py (see ctc.h).
 * Tests: tests/search/test_search.c
 *
 * Prefix beam data structures. A prefix is a node of a token trie (parent, token, depth); a
 * global hash of (parent, token) -> node keeps nodes canonical, so prefix equality is node
 * equality. Nodes are created only for prefixes that survive the beam (at most `beam` a frame).
 * Per frame, the candidate set (WeNet's next_hyps dict) is an array in first-insertion order plus a
 * small open-addressing hash keyed by the prefix's (parent, token) pair — an extension p+u that
 * has no node yet is keyed (p, u) too. Viterbi times are persistent cons lists (prev, t): WeNet's
 * list copies become shared pointers, and "copy, then set the last element" one new cell. The cell
 * pool is compacted between frames when it grows, keeping only the lists of the live beam.
 */
#include "search/ctc.h"

#include "core/alloc.h"
#include "hark.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- n-best snapshots ------------------------------------------------------------------------ */

void ctc_nbest_free(ctc_nbest_t *nb)
{
    if (!nb)
        return;
    hark_free(nb->mem_);
    memset(nb, 0, sizeof *nb);
}

/* One allocation holding scores (n), tokens/times pointer arrays (n each), lens (n), then the
 * token and time ints. Fills *nb's views; the caller writes through the returned mutable views. */
int ctc_nbest_alloc(ctc_nbest_t *nb, int n, const int *lens, int ***tok, int ***tim,
                    double **scores, hark_err_t *err)
{
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += (size_t)lens[i];
    size_t bytes = (size_t)n * sizeof(double) + 2 * (size_t)n * sizeof(int *) +
                   (size_t)n * sizeof(int) + 2 * total * sizeof(int);
    void *mem = hark_malloc(bytes ? bytes : 1);
    if (!mem)
        return err_set(err, HARK_ERR_NOMEM, "ctc n-best: out of memory (%zu bytes)", bytes);
    double *sc = mem;
    int **tk = (int **)(sc + n);
    int **tm = tk + n;
    int *ln = (int *)(tm + n);
    int *ints = ln + n;
    for (int i = 0; i < n; i++) {
        ln[i] = lens[i];
        tk[i] = ints;
        ints += lens[i];
        tm[i] = ints;
        ints += lens[i];
    }
    nb->n = n;
    nb->tokens = (const int *const *)tk;
    nb->times = (const int *const *)tm;
    nb->lens = ln;
    nb->scores = sc;
    nb->mem_ = mem;
    *tok = tk;
    *tim = tm;
    *scores = sc;
    return HARK_OK;
}

static int check_args(const float *logp, int T, int V, int blank, ctc_nbest_t *out, hark_err_t *err)
{
    if (!out)
        return err_set(err, HARK_ERR_INVALID_ARG, "ctc search: NULL output");
    memset(out, 0, sizeof *out);
    if (T < 0 || V < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "ctc search: bad shape (T=%d, V=%d)", T, V);
    if (blank < 0 || blank >= V)
        return err_set(err, HARK_ERR_INVALID_ARG, "ctc search: blank id %d outside [0, %d)", blank,
                       V);
    if (T > 0 && !logp)
        return err_set(err, HARK_ERR_INVALID_ARG, "ctc search: NULL log-probs with T=%d", T);
    return HARK_OK;
}

/* ---- greedy ---------------------------------------------------------------------------------- */

int ctc_greedy_from_argmax(const int *arg, int T, int blank, double score, ctc_nbest_t *out,
                           hark_err_t *err)
{
    if (!out)
        return err_set(err, HARK_ERR_INVALID_ARG, "ctc greedy: NULL output");
    memset(out, 0, sizeof *out);
    if (T < 0 || (T > 0 && !arg))
        return err_set(err, HARK_ERR_INVALID_ARG, "ctc greedy: bad arguments (T=%d)", T);
    int len = 0;
    for (int t = 0; t < T; t++)
        if (arg[t] != blank && (t == 0 || arg[t - 1] != arg[t]))
            len++;
    int **tk, **tm;
    double *sc;
    int rc = ctc_nbest_alloc(out, 1, &len, &tk, &tm, &sc, err);
    if (rc)
        return rc;
    /* remove_duplicates_and_blank; gen_ctc_peak_time: first frame of each non-blank run */
    int j = 0;
    for (int t = 0; t < T; t++) {
        if (arg[t] != blank && (t == 0 || arg[t - 1] != arg[t])) {
            tk[0][j] = arg[t];
            tm[0][j] = t;
            j++;
        }
    }
    sc[0] = score;
    return HARK_OK;
}

int ctc_argmax_topk(const int *idx, const float *val, int k, int T, int *arg, double *score)
{
    double total = score ? *score : 0.0;
    for (int t = 0; t < T; t++) {
        arg[t] = idx[(size_t)t * (size_t)k];
        total += (double)val[(size_t)t * (size_t)k];
    }
    if (score)
        *score = total;
    return T;
}

int ctc_argmax_rows(const float *logp, int T, int V, int *arg, double *score)
{
    double total = score ? *score : 0.0; /* one running sum: the same in any split */
    for (int t = 0; t < T; t++) {
        const float *row = logp + (size_t)t * (size_t)V;
        int best = 0;
        float bv = row[0];
        for (int v = 1; v < V; v++) {
            if (row[v] > bv) {
                bv = row[v];
                best = v;
            }
        }
        arg[t] = best;
        total += (double)bv;
    }
    if (score)
        *score = total;
    return T;
}

int ctc_greedy_search(const float *logp, int T, int V, int blank, ctc_nbest_t *out, hark_err_t *err)
{
    int rc = check_args(logp, T, V, blank, out, err);
    if (rc)
        return rc;
    int *arg = hark_malloc((size_t)(T ? T : 1) * sizeof(int));
    if (!arg)
        return err_set(err, HARK_ERR_NOMEM, "ctc greedy: out of memory (T=%d)", T);
    double total = 0.0;
    ctc_argmax_rows(logp, T, V, arg, &total);
    rc = ctc_greedy_from_argmax(arg, T, blank, total, out, err);
    hark_free(arg);
    return rc;
}

/* ---- prefix beam search ---------------------------------------------------------------------- */

/* WeNet's log_add(a, b): max + log(sum(exp(x - max))), -inf when both are -inf. Python's max()
 * keeps the first of equals; sum() adds left to right from 0. */
static inline double log_add(double a, double b)
{
    if (a == -INFINITY && b == -INFINITY)
        return -INFINITY;
    double m = b > a ? b : a;
    return m + log(exp(a - m) + exp(b - m));
}

typedef struct {
    int prev; /* earlier cell, -1 at the list head */
    int t;
} tcell_t;

typedef struct {
    int node; /* trie node of the prefix */
    double s, ns, v_s, v_ns;
    int times_s, times_ns; /* cons lists (tcell index, -1 = empty) */
} hyp_t;

typedef struct {
    int parent, token; /* key: the prefix is node(parent, token); root = (-1, -1) */
    int node;          /* its trie node, -1 while it has none */
    int slot;          /* its slot in the frame hash */
    double s, ns, v_s, v_ns, cur_token_prob;
    int times_s, times_ns;
} cand_t;

typedef struct {
    double score;
    int idx; /* insertion order */
} skey_t;

typedef struct {
    int parent, token, depth; /* the root: (-1, -1, 0) */
} node_t;

typedef struct {
    uint64_t key; /* pair_key(parent, token); 0 = empty */
    int val;      /* node */
} tslot_t;

struct ctc_beam {
    int V, beam, k, blank;
    int frames;
    node_t *nodes; /* (cap_nodes) the trie; node 0 is the empty prefix */
    int n_nodes, cap_nodes;
    /* (parent, token) -> node; open addressing, key 0 = empty slot */
    tslot_t *th;
    size_t th_cap; /* power of two */
    /* time cells */
    tcell_t *cells;
    int n_cells, cap_cells;
    int compact_at;  /* compact when n_cells reaches this */
    int compact_min; /* 16 frames' worst case (2 * k * beam cells a frame), less for big beams */
    /* beam */
    hyp_t *cur; /* (beam) */
    int n_cur;
    /* per frame scratch */
    cand_t *cand; /* (k * beam + beam) */
    int n_cand, cap_cand;
    int *fh;         /* frame hash slots -> cand index, -1 empty */
    size_t fh_cap;   /* power of two >= 2 * cap_cand */
    skey_t *order;   /* (cap_cand) sort keys */
    int *topk;       /* (k) */
    float *topk_val; /* (k) */
    int *walk;       /* (max depth) scratch for compaction */
    int cap_walk;
};

/* Never 0 (the empty-slot marker): parent >= -1, token >= -1. */
static inline uint64_t pair_key(int parent, int token)
{
    return ((uint64_t)(uint32_t)(parent + 2) << 32) | (uint32_t)(token + 1);
}

static inline size_t hash64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return (size_t)x;
}

static int trie_find(const ctc_beam_t *b, int parent, int token)
{
    uint64_t key = pair_key(parent, token);
    size_t mask = b->th_cap - 1;
    for (size_t i = hash64(key) & mask;; i = (i + 1) & mask) {
        if (b->th[i].key == key)
            return b->th[i].val;
        if (b->th[i].key == 0)
            return -1;
    }
}

static void trie_insert_slot(tslot_t *th, size_t cap, uint64_t key, int val)
{
    size_t mask = cap - 1;
    size_t i = hash64(key) & mask;
    while (th[i].key != 0)
        i = (i + 1) & mask;
    th[i].key = key;
    th[i].val = val;
}

/* Makes room for `more` new nodes (arrays and hash at <= 50 % load) so that a frame cannot fail
 * half way. */
static int trie_reserve(ctc_beam_t *b, int more, hark_err_t *err)
{
    int need = b->n_nodes + more;
    if (need > b->cap_nodes) {
        int cap = b->cap_nodes * 2 > need ? b->cap_nodes * 2 : need;
        node_t *p = hark_realloc(b->nodes, (size_t)cap * sizeof(node_t));
        if (!p)
            goto oom;
        b->nodes = p;
        b->cap_nodes = cap;
    }
    if ((size_t)need * 2 > b->th_cap) {
        size_t cap = b->th_cap * 2;
        while ((size_t)need * 2 > cap)
            cap *= 2;
        tslot_t *th = hark_calloc(cap, sizeof(tslot_t));
        if (!th)
            goto oom;
        for (size_t i = 0; i < b->th_cap; i++)
            if (b->th[i].key)
                trie_insert_slot(th, cap, b->th[i].key, b->th[i].val);
        hark_free(b->th);
        b->th = th;
        b->th_cap = cap;
    }
    return HARK_OK;
oom:
    return err_set(err, HARK_ERR_NOMEM, "ctc prefix beam: out of memory (%d prefixes)", need);
}

/* After trie_reserve: never fails. */
static int trie_add(ctc_beam_t *b, int parent, int token)
{
    int id = b->n_nodes++;
    b->nodes[id].parent = parent;
    b->nodes[id].token = token;
    b->nodes[id].depth = parent < 0 ? 0 : b->nodes[parent].depth + 1;
    trie_insert_slot(b->th, b->th_cap, pair_key(parent, token), id);
    return id;
}

static int cells_reserve(ctc_beam_t *b, int more, hark_err_t *err)
{
    int need = b->n_cells + more;
    if (need <= b->cap_cells)
        return HARK_OK;
    int cap = b->cap_cells * 2 > need ? b->cap_cells * 2 : need;
    tcell_t *c = hark_realloc(b->cells, (size_t)cap * sizeof(tcell_t));
    if (!c)
        return err_set(err, HARK_ERR_NOMEM, "ctc prefix beam: out of memory (%d time cells)", need);
    b->cells = c;
    b->cap_cells = cap;
    return HARK_OK;
}

static inline int cell_push(ctc_beam_t *b, int prev, int t)
{
    int id = b->n_cells++;
    b->cells[id].prev = prev;
    b->cells[id].t = t;
    return id;
}

/* Copies one live list into the fresh pool `dst` (capacity already sufficient). */
static int cells_copy(ctc_beam_t *b, tcell_t *dst, int *n_dst, int list)
{
    int len = 0;
    for (int c = list; c >= 0; c = b->cells[c].prev)
        b->walk[len++] = b->cells[c].t;
    int prev = -1;
    for (int i = len - 1; i >= 0; i--) {
        dst[*n_dst].prev = prev;
        dst[*n_dst].t = b->walk[i];
        prev = (*n_dst)++;
    }
    return prev;
}

static int list_len(const ctc_beam_t *b, int list)
{
    int n = 0;
    for (int c = list; c >= 0; c = b->cells[c].prev)
        n++;
    return n;
}

/* Between frames: when the pool has grown past compact_at, rebuild it from the beam's lists
 * (best effort: without memory for the new pool, it simply keeps growing). */
static void cells_maybe_compact(ctc_beam_t *b)
{
    if (b->n_cells < b->compact_at)
        return;
    int live = 0, maxlen = 0;
    for (int i = 0; i < b->n_cur; i++) {
        int a = list_len(b, b->cur[i].times_s), c = list_len(b, b->cur[i].times_ns);
        live += a + c;
        maxlen = a > maxlen ? a : maxlen;
        maxlen = c > maxlen ? c : maxlen;
    }
    if (maxlen > b->cap_walk) {
        int *w = hark_realloc(b->walk, (size_t)maxlen * sizeof(int));
        if (!w)
            return;
        b->walk = w;
        b->cap_walk = maxlen;
    }
    int next_at = 4 * live > b->compact_min ? 4 * live : b->compact_min;
    int cap = next_at + 2 * b->k * b->beam; /* one frame past the next threshold */
    tcell_t *dst = hark_malloc((size_t)cap * sizeof(tcell_t));
    if (!dst)
        return;
    int n = 0;
    for (int i = 0; i < b->n_cur; i++) {
        b->cur[i].times_s = cells_copy(b, dst, &n, b->cur[i].times_s);
        b->cur[i].times_ns = cells_copy(b, dst, &n, b->cur[i].times_ns);
    }
    hark_free(b->cells);
    b->cells = dst;
    b->n_cells = n;
    b->cap_cells = cap;
    b->compact_at = next_at;
}

/* The candidate for key (parent, token) in this frame, created in insertion order if new
 * (WeNet's defaultdict access). */
static cand_t *cand_get(ctc_beam_t *b, int parent, int token, int node)
{
    uint64_t key = pair_key(parent, token);
    size_t mask = b->fh_cap - 1;
    size_t i = hash64(key) & mask;
    for (;; i = (i + 1) & mask) {
        int ci = b->fh[i];
        if (ci < 0)
            break;
        cand_t *c = &b->cand[ci];
        if (c->parent == parent && c->token == token)
            return c;
    }
    int ci = b->n_cand++;
    b->fh[i] = ci;
    cand_t *c = &b->cand[ci];
    c->parent = parent;
    c->token = token;
    c->node = node >= 0 ? node : trie_find(b, parent, token);
    c->slot = (int)i;
    c->s = c->ns = c->v_s = c->v_ns = c->cur_token_prob = -INFINITY;
    c->times_s = c->times_ns = -1;
    return c;
}

static inline double hyp_viterbi(const hyp_t *h)
{
    return h->v_s > h->v_ns ? h->v_s : h->v_ns;
}

static inline int hyp_times(const hyp_t *h)
{
    return h->v_s > h->v_ns ? h->times_s : h->times_ns;
}

/* Descending score, then insertion order (Python's stable sort); NaN sorts last. */
static int skey_cmp(const void *pa, const void *pb)
{
    const skey_t *a = pa, *b = pb;
    int na = isnan(a->score), nb = isnan(b->score);
    if (na != nb)
        return na - nb;
    if (!na && a->score != b->score)
        return a->score > b->score ? -1 : 1;
    return a->idx - b->idx;
}

/* Top-k of one row: descending, lower id first on equal values. */
void ctc_row_topk(const float *row, int V, int k, int *idx, float *val)
{
    int n = 0;
    for (int v = 0; v < V; v++) {
        float x = row[v];
        if (n == k && !(x > val[k - 1]))
            continue;
        int j = n < k ? n++ : k - 1;
        while (j > 0 && x > val[j - 1]) {
            val[j] = val[j - 1];
            idx[j] = idx[j - 1];
            j--;
        }
        val[j] = x;
        idx[j] = v;
    }
}

/* one frame, given its top b->k tokens (idx) and their log-probs (val) */
static void beam_step(ctc_beam_t *b, const int *idx, const float *val, int t)
{
    b->n_cand = 0;
    for (int ui = 0; ui < b->k; ui++) {
        int u = idx[ui];
        double prob = (double)val[ui];
        for (int hi = 0; hi < b->n_cur; hi++) {
            const hyp_t *p = &b->cur[hi];
            int node = p->node;
            int last = node > 0 ? b->nodes[node].token : -1;
            if (u == b->blank) {
                cand_t *c = cand_get(b, b->nodes[node].parent, b->nodes[node].token, node);
                c->s = log_add(c->s, log_add(p->s, p->ns) + prob);
                c->v_s = hyp_viterbi(p) + prob;
                c->times_s = hyp_times(p);
            } else if (u == last) {
                /* *uu -> *u */
                cand_t *c1 = cand_get(b, b->nodes[node].parent, b->nodes[node].token, node);
                c1->ns = log_add(c1->ns, p->ns + prob);
                if (c1->v_ns < p->v_ns + prob) {
                    c1->v_ns = p->v_ns + prob;
                    if (c1->cur_token_prob < prob) {
                        c1->cur_token_prob = prob;
                        /* copy of p's times_ns with its last element set to t */
                        c1->times_ns = p->times_ns >= 0
                                           ? cell_push(b, b->cells[p->times_ns].prev, t)
                                           : -1; /* unreachable: a finite v_ns has times */
                    }
                }
                /* *u-u -> *uu */
                cand_t *c2 = cand_get(b, node, u, -1);
                c2->ns = log_add(c2->ns, p->s + prob);
                if (c2->v_ns < p->v_s + prob) {
                    c2->v_ns = p->v_s + prob;
                    c2->cur_token_prob = prob;
                    c2->times_ns = cell_push(b, p->times_s, t);
                }
            } else {
                cand_t *c = cand_get(b, node, u, -1);
                c->ns = log_add(c->ns, log_add(p->s, p->ns) + prob);
                double vit = hyp_viterbi(p);
                if (c->v_ns < vit + prob) {
                    c->v_ns = vit + prob;
                    c->cur_token_prob = prob;
                    c->times_ns = cell_push(b, hyp_times(p), t);
                }
            }
        }
    }
    /* stable sort by logadd(s, ns), keep the beam */
    for (int i = 0; i < b->n_cand; i++) {
        b->order[i].score = log_add(b->cand[i].s, b->cand[i].ns);
        b->order[i].idx = i;
    }
    qsort(b->order, (size_t)b->n_cand, sizeof(skey_t), skey_cmp);
    int keep = b->n_cand < b->beam ? b->n_cand : b->beam;
    for (int i = 0; i < keep; i++) {
        cand_t *c = &b->cand[b->order[i].idx];
        hyp_t *h = &b->cur[i];
        h->node = c->node >= 0 ? c->node : trie_add(b, c->parent, c->token);
        h->s = c->s;
        h->ns = c->ns;
        h->v_s = c->v_s;
        h->v_ns = c->v_ns;
        h->times_s = c->times_s;
        h->times_ns = c->times_ns;
    }
    b->n_cur = keep;
    for (int i = 0; i < b->n_cand; i++)
        b->fh[b->cand[i].slot] = -1;
}

void ctc_beam_reset(ctc_beam_t *b)
{
    if (!b)
        return;
    /* keep the root (node 0) only */
    memset(b->th, 0, b->th_cap * sizeof(tslot_t));
    b->n_nodes = 0;
    trie_add(b, -1, -1);
    b->n_cells = 0;
    b->compact_at = b->compact_min;
    b->frames = 0;
    b->n_cur = 1;
    b->cur[0] = (hyp_t){.node = 0,
                        .s = 0.0,
                        .ns = -INFINITY,
                        .v_s = 0.0,
                        .v_ns = 0.0,
                        .times_s = -1,
                        .times_ns = -1};
}

int ctc_beam_create(int V, int beam, int blank, ctc_beam_t **out, hark_err_t *err)
{
    if (!out)
        return err_set(err, HARK_ERR_INVALID_ARG, "ctc prefix beam: NULL output");
    *out = NULL;
    if (V < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "ctc prefix beam: vocabulary size %d < 1", V);
    if (beam < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "ctc prefix beam: beam size %d < 1", beam);
    if (beam > CTC_MAX_BEAM)
        return err_set(err, HARK_ERR_TOO_LARGE, "ctc prefix beam: beam size %d > %d", beam,
                       CTC_MAX_BEAM);
    if (blank < 0 || blank >= V)
        return err_set(err, HARK_ERR_INVALID_ARG, "ctc prefix beam: blank id %d outside [0, %d)",
                       blank, V);
    ctc_beam_t *b = hark_calloc(1, sizeof *b);
    if (!b)
        return err_set(err, HARK_ERR_NOMEM, "ctc prefix beam: out of memory");
    b->V = V;
    b->beam = beam;
    b->blank = blank;
    b->k = beam < V ? beam : V;
    b->cap_cand = b->k * beam + beam;
    b->fh_cap = 16;
    while (b->fh_cap < 2 * (size_t)b->cap_cand)
        b->fh_cap *= 2;
    b->cap_nodes = 256;
    b->th_cap = 512;
    b->cap_cells = 1024;
    b->cap_walk = 64;
    b->compact_min = 32 * b->k * beam;
    if (b->compact_min > (1 << 16))
        b->compact_min = 4 * b->k * beam > (1 << 16) ? 4 * b->k * beam : (1 << 16);
    b->cur = hark_malloc((size_t)beam * sizeof(hyp_t));
    b->cand = hark_malloc((size_t)b->cap_cand * sizeof(cand_t));
    b->order = hark_malloc((size_t)b->cap_cand * sizeof(skey_t));
    b->fh = hark_malloc(b->fh_cap * sizeof(int));
    b->topk = hark_malloc((size_t)b->k * sizeof(int));
    b->topk_val = hark_malloc((size_t)b->k * sizeof(float));
    b->nodes = hark_malloc((size_t)b->cap_nodes * sizeof(node_t));
    b->th = hark_calloc(b->th_cap, sizeof(tslot_t));
    b->cells = hark_malloc((size_t)b->cap_cells * sizeof(tcell_t));
    b->walk = hark_malloc((size_t)b->cap_walk * sizeof(int));
    if (!b->cur || !b->cand || !b->order || !b->fh || !b->topk || !b->topk_val || !b->nodes ||
        !b->th || !b->cells || !b->walk) {
        ctc_beam_destroy(b);
        return err_set(err, HARK_ERR_NOMEM, "ctc prefix beam: out of memory (beam %d)", beam);
    }
    for (size_t i = 0; i < b->fh_cap; i++)
        b->fh[i] = -1;
    ctc_beam_reset(b);
    *out = b;
    return HARK_OK;
}

void ctc_beam_destroy(ctc_beam_t *b)
{
    if (!b)
        return;
    hark_free(b->cur);
    hark_free(b->cand);
    hark_free(b->order);
    hark_free(b->fh);
    hark_free(b->topk);
    hark_free(b->topk_val);
    hark_free(b->nodes);
    hark_free(b->th);
    hark_free(b->cells);
    hark_free(b->walk);
    hark_free(b);
}

int ctc_beam_frames(const ctc_beam_t *b)
{
    return b ? b->frames : 0;
}

/* frames of dense rows (logp) or of top-k rows (idx, val, k) */
static int beam_advance(ctc_beam_t *b, const float *logp, const int *idx, const float *val, int k,
                        int T, hark_err_t *err)
{
    for (int t = 0; t < T; t++) {
        if (b->frames == INT32_MAX)
            return err_set(err, HARK_ERR_TOO_LARGE, "ctc prefix beam: too many frames");
        /* everything a frame may need, before the frame: at most `beam` new nodes and two new
         * time cells per (token, prefix) pair */
        int rc = trie_reserve(b, b->beam, err);
        if (!rc)
            rc = cells_reserve(b, 2 * b->k * b->n_cur, err);
        if (rc)
            return rc;
        if (logp) {
            ctc_row_topk(logp + (size_t)t * (size_t)b->V, b->V, b->k, b->topk, b->topk_val);
            beam_step(b, b->topk, b->topk_val, b->frames);
        } else {
            beam_step(b, idx + (size_t)t * (size_t)k, val + (size_t)t * (size_t)k, b->frames);
        }
        b->frames++;
        cells_maybe_compact(b);
    }
    return HARK_OK;
}

int ctc_beam_advance(ctc_beam_t *b, const float *logp, int T, hark_err_t *err)
{
    if (!b || T < 0 || (T > 0 && !logp))
        return err_set(err, HARK_ERR_INVALID_ARG, "ctc prefix beam: bad arguments (T=%d)", T);
    return beam_advance(b, logp, NULL, NULL, 0, T, err);
}

int ctc_beam_advance_topk(ctc_beam_t *b, const int *idx, const float *val, int k, int T,
                          hark_err_t *err)
{
    if (!b || T < 0 || (T > 0 && (!idx || !val)) || k < b->k)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "ctc prefix beam: bad arguments (T=%d, %d entries a frame for a top %d)", T,
                       k, b ? b->k : 0);
    for (size_t i = 0; i < (size_t)T * (size_t)k; i++)
        if (idx[i] < 0 || idx[i] >= b->V)
            return err_set(err, HARK_ERR_INVALID_ARG, "ctc prefix beam: token id %d of %d", idx[i],
                           b->V);
    return beam_advance(b, NULL, idx, val, k, T, err);
}

int ctc_beam_best_len(const ctc_beam_t *b)
{
    return b && b->n_cur > 0 ? b->nodes[b->cur[0].node].depth : 0;
}

int ctc_beam_nbest(const ctc_beam_t *b, ctc_nbest_t *out, hark_err_t *err)
{
    if (!out)
        return err_set(err, HARK_ERR_INVALID_ARG, "ctc prefix beam: NULL output");
    memset(out, 0, sizeof *out);
    if (!b)
        return err_set(err, HARK_ERR_INVALID_ARG, "ctc prefix beam: NULL state");
    int *lens = hark_malloc((size_t)b->n_cur * sizeof(int));
    if (!lens)
        return err_set(err, HARK_ERR_NOMEM, "ctc prefix beam: out of memory");
    for (int i = 0; i < b->n_cur; i++)
        lens[i] = b->nodes[b->cur[i].node].depth;
    int **tk, **tm;
    double *sc;
    int rc = ctc_nbest_alloc(out, b->n_cur, lens, &tk, &tm, &sc, err);
    if (rc) {
        hark_free(lens);
        return rc;
    }
    for (int i = 0; i < b->n_cur; i++) {
        const hyp_t *h = &b->cur[i];
        int j = lens[i];
        for (int nd = h->node; nd > 0; nd = b->nodes[nd].parent)
            tk[i][--j] = b->nodes[nd].token;
        /* times(): a list as long as the prefix (shorter only on -inf paths: then padded -1) */
        int tl = hyp_times(h);
        int n = list_len(b, tl);
        for (j = lens[i] - 1; j >= n; j--)
            tm[i][j] = -1;
        for (int c = tl; c >= 0 && j >= 0; c = b->cells[c].prev)
            tm[i][j--] = b->cells[c].t;
        sc[i] = log_add(h->s, h->ns);
    }
    hark_free(lens);
    return HARK_OK;
}

int ctc_prefix_beam_search(const float *logp, int T, int V, int beam, int blank, ctc_nbest_t *out,
                           hark_err_t *err)
{
    int rc = check_args(logp, T, V, blank, out, err);
    if (rc)
        return rc;
    if (beam < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "ctc prefix beam: beam size %d < 1", beam);
    ctc_beam_t *b = NULL;
    rc = ctc_beam_create(V, beam, blank, &b, err);
    if (!rc)
        rc = ctc_beam_advance(b, logp, T, err);
    if (!rc)
        rc = ctc_beam_nbest(b, out, err);
    ctc_beam_destroy(b);
    return rc;
}
