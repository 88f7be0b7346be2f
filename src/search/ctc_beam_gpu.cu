/* ctc_beam_gpu.cu — CTC prefix beam search on the GPU (ctc_beam_gpu.h).
 * CPU reference: ctc_prefix_beam_search (src/search/ctc.c). Tests: tests/search/test_ctc_beam_gpu.c
 *
 * Two kernels. topk_kernel: one warp per frame, each lane keeps a sorted top-k of its strided
 * share of the row in registers, then k warp-wide picks merge them. search_kernel: one block per
 * utterance walks its frames. Per frame, WeNet's candidate dict is laid out as slots: slot q < n
 * for the beam's own prefixes, n + ui·n + hi for the extension of prefix hi by the ui-th top token.
 * Only a beam prefix can receive several updates in a frame (its blank and repeat updates, and
 * the extension of its parent by its last token, when the parent is in the beam too), so each
 * slot's updates are applied by one thread in WeNet's order — (token rank, prefix rank, first
 * the prefix itself then its extension) — and its first update gives its insertion order, which
 * breaks score ties as Python's stable sort does. Prefixes are nodes of a trie kept canonical by
 * a per-utterance hash of (parent, token) -> node in global memory, so prefix equality is node
 * equality, as in ctc.c. Viterbi times are cons lists (prev, t) in a pool with fixed cells per
 * (frame, kept hypothesis), so no cell is ever freed or moved. The frame loop is latency-bound:
 * the next frame's top-k is loaded a frame ahead, the score of each kept prefix is carried
 * over, and list heads carry their previous cell so that nothing is read back from the pool.
 */
#include "search/ctc_beam_gpu.h"

#include "core/alloc.h"
#include "hark.h"

#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#define TOPK_WARPS 8
#define SEARCH_THREADS 128

enum { T_COPY = 0, T_APPEND, T_REPLACE }; /* how a candidate's time list derives from its source */

struct cbg_node {
    int parent, token; /* the root: (-1, -1) */
};

/* (parent, token) -> node: open addressing, key 0 = empty (pair keys are never 0) */
struct cbg_slot {
    unsigned long long key;
    int node, pad_;
};

/* A time list: its head cell and the cell before the head (-1 = none), so that "copy, then set
 * the last element" needs no read of the pool. */
struct tlist {
    int head, prev;
};

struct cbg_hyp {
    double s, ns, v_s, v_ns;
    double score;                  /* log_add(s, ns), from the sort that kept it */
    int node, parent, last, depth; /* its trie node, the node's parent, token and depth */
    tlist ts, tn;                  /* times_s, times_ns */
};

struct cbg_cand {
    double s, ns, v_s, v_ns, ctp; /* ctp: WeNet's cur_token_prob */
    double score;
    int first_e; /* its first update's position in WeNet's order, INT_MAX = no update (absent) */
    int rank;
    int ts_op, tn_op; /* times_s / times_ns: T_* applied to a source list */
    tlist ts_src, tn_src;
};

struct ctc_beam_gpu {
    int max_batch, max_frames, V, beam, k, blank;
    int *d_topk;      /* (max_batch, max_frames, k) token ids */
    float *d_topv;    /* (max_batch, max_frames, k) their log-probs */
    cbg_node *d_node; /* (max_batch, 1 + max_frames · beam) trie nodes */
    cbg_slot *d_hash; /* (max_batch, hash_cap) each utterance's trie index, cleared every run */
    int hash_cap;     /* a power of two >= 2 · (1 + max_frames · beam) */
    int2 *d_cell;     /* (max_batch, max_frames · 2 · beam) time cells (prev, t) */
    int *d_lens;      /* (max_batch) */
    int *d_out;       /* (max_batch) n, then (max_batch, beam) lens, then tokens and times */
    double *d_score;  /* (max_batch, beam) */
    int *h_out;       /* page-locked mirrors, same layout */
    double *h_score;
    int *h_lens;    /* (max_batch) the last run's lens (page-locked: the upload's source) */
    int last_batch; /* the last run's batch, t_stride and beam */
    int last_stride, last_beam;
};

static size_t out_ints(int batch, int beam, int t_stride)
{
    return (size_t)batch + (size_t)batch * beam + 2 * (size_t)batch * beam * (size_t)t_stride;
}

/* ---- top-k ----------------------------------------------------------------------------------- */

/* (idx, val) (rows, k): the k largest of each valid row, descending, lower id first on ties; a
 * NaN counts as -inf. Rows at or past their utterance's length are skipped. Each lane keeps its
 * share's best k in registers (KP >= k slots, a predicated insertion pass: no local memory, no
 * divergence beyond the pass itself); then k warp-wide picks merge the 32 lists. */
template <int KP>
__global__ void topk_kernel(int *idx, float *val, const float *logp, const int *lens, int batch,
                            int t_stride, int V, int k)
{
    int row = blockIdx.x * TOPK_WARPS + (int)(threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= batch * t_stride || row % t_stride >= lens[row / t_stride])
        return;
    const float *x = logp + (size_t)row * V;
    float lv[KP];
    int li[KP];
#pragma unroll
    for (int j = 0; j < KP; j++) { /* empty slots lose to every element; slots >= k never fill */
        lv[j] = j < k ? -INFINITY : INFINITY;
        li[j] = INT_MAX;
    }
    /* A first pass bounds the k-th largest value from below: the k-th largest of the 32 lane
     * maxima (k lanes hold an element at least that large). Only elements reaching it are
     * offered to the lists, so the insertion passes stay rare. */
    float mx = -INFINITY;
    for (int v = lane; v < V; v += 32) {
        float f = x[v];
        mx = f > mx ? f : mx; /* NaN never wins */
    }
    for (int w = 2; w <= 32; w <<= 1) /* bitonic sort of the 32 maxima, descending by lane */
        for (int o = w >> 1; o; o >>= 1) {
            float other = __shfl_xor_sync(0xffffffffu, mx, o);
            bool lower = (lane & o) == 0, desc = (lane & w) == 0 || w == 32;
            bool take = lower == desc ? other > mx : other < mx;
            mx = take ? other : mx;
        }
    const float bound = __shfl_sync(0xffffffffu, mx, k - 1);
    float thr = bound; /* an element enters only if it beats the k-th slot and reaches the bound */
    int thr_i = INT_MAX;
    for (int v0 = lane; v0 < V; v0 += 4 * 32) {
        float f4[4]; /* four loads in flight, then taken in index order */
#pragma unroll
        for (int q = 0; q < 4; q++)
            f4[q] = v0 + 32 * q < V ? x[v0 + 32 * q] : -INFINITY;
#pragma unroll
        for (int q = 0; q < 4; q++) {
            int v = v0 + 32 * q;
            float f = f4[q] != f4[q] ? -INFINITY : f4[q];
            if (v >= V || !(f > thr || (f == thr && v < thr_i)))
                continue;
            float cv = f;
            int ci = v;
#pragma unroll
            for (int j = 0; j < KP; j++) {
                bool sw = cv > lv[j] || (cv == lv[j] && ci < li[j]);
                float tv = sw ? lv[j] : cv;
                int ti = sw ? li[j] : ci;
                lv[j] = sw ? cv : lv[j];
                li[j] = sw ? ci : li[j];
                cv = tv;
                ci = ti;
            }
            thr = lv[0]; /* the last of the k filled slots: the list's minimum (the slots
                            past k hold +inf), found without a dynamic index */
            thr_i = li[0];
#pragma unroll
            for (int j = 1; j < KP; j++) {
                bool lt = lv[j] < thr || (lv[j] == thr && li[j] > thr_i);
                thr = lt ? lv[j] : thr;
                thr_i = lt ? li[j] : thr_i;
            }
            if (thr < bound) {
                thr = bound;
                thr_i = INT_MAX;
            }
        }
    }
#pragma unroll
    for (int j = 0; j < KP; j++)
        if (j >= k) {
            lv[j] = -INFINITY;
            li[j] = INT_MAX;
        }
    for (int r = 0; r < k; r++) {
        float bv = lv[0];
        int bi = li[0];
        for (int o = 16; o; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ov > bv || (ov == bv && oi < bi)) {
                bv = ov;
                bi = oi;
            }
        }
        if (bi == li[0]) { /* ids are unique: exactly one lane pops its head */
#pragma unroll
            for (int j = 0; j + 1 < KP; j++) {
                lv[j] = lv[j + 1];
                li[j] = li[j + 1];
            }
            lv[KP - 1] = -INFINITY;
            li[KP - 1] = INT_MAX;
        }
        if (lane == 0) {
            idx[(size_t)row * k + r] = bi;
            val[(size_t)row * k + r] = bv;
        }
    }
}

/* ---- search ---------------------------------------------------------------------------------- */

/* WeNet's log_add (ctc.c): max + log(sum(exp(x - max))), -inf when both are -inf. With one
 * argument -inf the formula returns the other exactly (NaN for +inf), so that case skips it. */
__device__ __forceinline__ double log_add(double a, double b)
{
    if (a == -INFINITY)
        return b == INFINITY ? NAN : b;
    if (b == -INFINITY)
        return a == INFINITY ? NAN : a;
    double m = b > a ? b : a;
    return m + log(exp(a - m) + exp(b - m));
}

__device__ __forceinline__ double hyp_viterbi(const cbg_hyp &h)
{
    return h.v_s > h.v_ns ? h.v_s : h.v_ns;
}

__device__ __forceinline__ tlist hyp_times(const cbg_hyp &h)
{
    return h.v_s > h.v_ns ? h.ts : h.tn;
}

/* The update kinds of ctc.c's beam_step, applied to candidate c from prefix p with prob. */
enum { U_BLANK = 0, U_REPEAT, U_EXT_REPEAT, U_EXT };

__device__ void cand_update(cbg_cand &c, const cbg_hyp &p, int kind, double prob)
{
    if (kind == U_BLANK) {
        c.s = log_add(c.s, p.score + prob);
        c.v_s = hyp_viterbi(p) + prob;
        c.ts_op = T_COPY;
        c.ts_src = hyp_times(p);
    } else if (kind == U_REPEAT) { /* *uu -> *u */
        c.ns = log_add(c.ns, p.ns + prob);
        if (c.v_ns < p.v_ns + prob) {
            c.v_ns = p.v_ns + prob;
            if (c.ctp < prob) {
                c.ctp = prob;
                c.tn_op = T_REPLACE;
                c.tn_src = p.tn;
            }
        }
    } else if (kind == U_EXT_REPEAT) { /* *u-u -> *uu */
        c.ns = log_add(c.ns, p.s + prob);
        if (c.v_ns < p.v_s + prob) {
            c.v_ns = p.v_s + prob;
            c.ctp = prob;
            c.tn_op = T_APPEND;
            c.tn_src = p.ts;
        }
    } else {
        c.ns = log_add(c.ns, p.score + prob);
        double vit = hyp_viterbi(p);
        if (c.v_ns < vit + prob) {
            c.v_ns = vit + prob;
            c.ctp = prob;
            c.tn_op = T_APPEND;
            c.tn_src = hyp_times(p);
        }
    }
}

__device__ __forceinline__ void cand_init(cbg_cand &c, int first_e)
{
    c.s = c.ns = c.v_s = c.v_ns = c.ctp = -INFINITY;
    c.first_e = first_e;
    c.ts_op = c.tn_op = T_COPY;
    c.ts_src = c.tn_src = tlist{-1, -1};
}

/* A candidate's time list, written to `cell` when it needs a new one. */
__device__ tlist times_make(int2 *cells, int op, tlist src, int cell, int t)
{
    if (op == T_COPY)
        return src;
    if (op == T_REPLACE) {
        if (src.head < 0)
            return tlist{-1, -1}; /* unreachable, as in ctc.c: a finite v_ns has times */
        cells[cell] = make_int2(src.prev, t);
        return tlist{cell, src.prev};
    }
    cells[cell] = make_int2(src.head, t);
    return tlist{cell, src.head};
}

/* An unsigned key that orders scores as the stable descending sort does, larger first: NaN
 * lowest (0), -0.0 equal to +0.0; equal keys then go by first insertion. */
__device__ __forceinline__ unsigned long long score_order(double x)
{
    if (x != x)
        return 0;
    if (x == 0.0)
        x = 0.0;
    unsigned long long u = (unsigned long long)__double_as_longlong(x);
    return (u >> 63) ? ~u : u | (1ull << 63);
}

/* Never 0 (the empty-slot marker): parent >= 0, token >= 0. */
__device__ __forceinline__ unsigned long long pair_key(int parent, int token)
{
    return ((unsigned long long)(unsigned)(parent + 2) << 32) | (unsigned)(token + 1);
}

__device__ __forceinline__ unsigned hash_pair(unsigned long long x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (unsigned)x;
}

/* One block per utterance. Dynamic shared memory: hyps (2, beam), cands (beam·(k + 1)), child
 * table (beam, k), par / uil (beam), top-k ids and values (k). Writes the n-best to out. The
 * trie index is read through L2 (__ldcg): it changes by atomics within the kernel. */
__global__ void __launch_bounds__(SEARCH_THREADS)
    search_kernel(int *out, double *score, cbg_node *nodes_all, cbg_slot *hash_all, int2 *cells_all,
                  const int *topk, const float *topv, const int *lens, int batch, int t_stride,
                  int beam, int k, int blank, int node_cap, int hash_cap, int cell_cap)
{
    extern __shared__ double smem_d[];
    const int b = blockIdx.x, tid = threadIdx.x;
    const int S = beam * (k + 1);
    cbg_hyp *hyps = (cbg_hyp *)smem_d; /* (2, beam) */
    cbg_cand *cand = (cbg_cand *)(hyps + 2 * beam);
    unsigned long long *kord = (unsigned long long *)(cand + S); /* (S) sort keys: score... */
    int *kfe = (int *)(kord + S);                                /* (S) ...then first_e */
    int *child = kfe + S;                                        /* (beam, k) */
    int *par = child + beam * k;                                 /* (beam) */
    int *uil = par + beam;                                       /* (beam) */
    int *tk = uil + beam;                                        /* (k) */
    float *tv = (float *)(tk + k);                               /* (k) */
    __shared__ int n_cur, n_valid, ui_blank;

    cbg_node *nodes = nodes_all + (size_t)b * node_cap;
    cbg_slot *hash = hash_all + (size_t)b * hash_cap;
    const unsigned hmask = (unsigned)hash_cap - 1;
    int2 *cells = cells_all + (size_t)b * cell_cap;
    const int T = lens[b];
    const size_t row0 = (size_t)b * t_stride * k;
    if (tid == 0) {
        nodes[0] = {-1, -1};
        hyps[0] = {0.0, -INFINITY, 0.0, 0.0, 0.0, 0, -1, -1, 0, {-1, -1}, {-1, -1}};
        n_cur = 1;
    }
    int pk = 0; /* the next frame's top-k entry of this thread (tid < k), loaded a frame ahead */
    float pv = 0.0f;
    if (tid < k && T > 0) {
        pk = topk[row0 + tid];
        pv = topv[row0 + tid];
    }
    __syncthreads();
    int cur = 0;
    for (int t = 0; t < T; t++) {
        cbg_hyp *H = hyps + cur * beam, *N = hyps + (1 - cur) * beam;
        const int n = n_cur, ns = n * (k + 1);
        if (tid < k) {
            tk[tid] = pk;
            tv[tid] = pv;
            if (t + 1 < T) {
                pk = topk[row0 + (size_t)(t + 1) * k + tid];
                pv = topv[row0 + (size_t)(t + 1) * k + tid];
            }
        }
        if (tid == 0)
            n_valid = 0;
        for (int i = tid; i < n * k; i += SEARCH_THREADS)
            child[i] = -1;
        __syncthreads();
        if (tid == SEARCH_THREADS - 1) {
            int ub = -1;
            for (int ui = 0; ui < k; ui++)
                if (tk[ui] == blank)
                    ub = ui;
            ui_blank = ub;
        }
        /* the beam prefix that is this one's parent, and the rank of its last token */
        if (tid < n) {
            int p = -1, u = -1;
            for (int j = 0; j < n; j++)
                if (H[j].node == H[tid].parent)
                    p = j;
            for (int ui = 0; ui < k; ui++)
                if (tk[ui] == H[tid].last)
                    u = ui;
            par[tid] = p;
            uil[tid] = u;
            if (p >= 0 && u >= 0) /* this prefix is the parent's extension by that token */
                child[p * k + u] = tid;
        }
        __syncthreads();
        for (int j = tid; j < ns; j += SEARCH_THREADS) {
            cbg_cand &c = cand[j];
            c.rank = 0;
            kord[j] = 0;
            kfe[j] = INT_MAX; /* absent: never before anything */
            if (j < n) {
                /* a beam prefix: its blank and repeat updates, and the extension of its parent
                 * by its last token, in WeNet's order (token rank, prefix rank, sub-step) */
                int ev[3] = {INT_MAX, INT_MAX, INT_MAX}, kind[3] = {0, 0, 0}, src[3] = {0, 0, 0};
                if (ui_blank >= 0) {
                    ev[0] = (ui_blank * n + j) * 2;
                    kind[0] = U_BLANK;
                    src[0] = j;
                }
                if (uil[j] >= 0) {
                    ev[1] = (uil[j] * n + j) * 2;
                    kind[1] = U_REPEAT;
                    src[1] = j;
                    int p = par[j];
                    if (p >= 0) {
                        int rep = H[p].last == H[j].last; /* "…aa" from "…a": the parent's c2 */
                        ev[2] = (uil[j] * n + p) * 2 + rep;
                        kind[2] = rep ? U_EXT_REPEAT : U_EXT;
                        src[2] = p;
                    }
                }
                /* by position: a three-element sorting network on constant indices (registers) */
#define CBG_SWAP(a, b_)                                                                            \
    if (ev[b_] < ev[a]) {                                                                          \
        int x_ = ev[a];                                                                            \
        ev[a] = ev[b_];                                                                            \
        ev[b_] = x_;                                                                               \
        x_ = kind[a];                                                                              \
        kind[a] = kind[b_];                                                                        \
        kind[b_] = x_;                                                                             \
        x_ = src[a];                                                                               \
        src[a] = src[b_];                                                                          \
        src[b_] = x_;                                                                              \
    }
                CBG_SWAP(0, 1)
                CBG_SWAP(1, 2)
                CBG_SWAP(0, 1)
#undef CBG_SWAP
                cand_init(c, ev[0]);
#pragma unroll
                for (int i = 0; i < 3; i++)
                    if (ev[i] != INT_MAX)
                        cand_update(c, H[src[i]], kind[i], (double)tv[ev[i] / 2 / n]);
            } else { /* an extension that is not a beam prefix: one update */
                int i = j - n, ui = i / n, hi = i % n, u = tk[ui];
                if (u == blank || child[hi * k + ui] >= 0) {
                    c.first_e = INT_MAX;
                    continue;
                }
                int rep = u == H[hi].last;
                cand_init(c, (ui * n + hi) * 2 + rep);
                cand_update(c, H[hi], rep ? U_EXT_REPEAT : U_EXT, (double)tv[ui]);
            }
            if (c.first_e != INT_MAX) {
                c.score = log_add(c.s, c.ns);
                kord[j] = score_order(c.score);
                kfe[j] = c.first_e;
                atomicAdd(&n_valid, 1);
            }
        }
        __syncthreads();
        /* rank = how many candidates come before it. Up to 256 candidates (beam <= 15): the
         * four warps split the candidates compared against, each lane counts for four candidates
         * at once, then adds its counts. More: each thread counts for its own candidates and
         * stops once past the beam (most stop early; all-pairs would be quadratic). */
        if (ns > 256) {
            for (int i = tid; i < ns; i += SEARCH_THREADS) {
                if (kfe[i] == INT_MAX)
                    continue;
                const unsigned long long oi = kord[i];
                const int fi = kfe[i];
                int r = 0;
                for (int j0 = 0; j0 < ns && r < beam; j0 += 8) {
#pragma unroll
                    for (int j = j0; j < j0 + 8; j++) {
                        unsigned long long oj = j < ns ? kord[j] : 0;
                        int fj = j < ns ? kfe[j] : INT_MAX;
                        r += (oj > oi) | ((oj == oi) & (fj < fi));
                    }
                }
                cand[i].rank = r;
            }
        } else {
            const int warp = tid >> 5, lane = tid & 31, jw = (ns + 3) / 4;
            const int ja = warp * jw, jb = ja + jw < ns ? ja + jw : ns;
            for (int g = 0; g < ns; g += 128) {
                unsigned long long oi[4];
                int fi[4], cnt[4];
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    int i = g + lane + 32 * q;
                    oi[q] = i < ns ? kord[i] : ~0ull;
                    fi[q] = i < ns ? kfe[i] : 0;
                    cnt[q] = 0;
                }
#pragma unroll 4
                for (int j = ja; j < jb; j++) {
                    unsigned long long oj = kord[j];
                    int fj = kfe[j];
#pragma unroll
                    for (int q = 0; q < 4; q++)
                        cnt[q] += (oj > oi[q]) | ((oj == oi[q]) & (fj < fi[q]));
                }
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    int i = g + lane + 32 * q;
                    if (i < ns && cnt[q])
                        atomicAdd(&cand[i].rank, cnt[q]);
                }
            }
        }
        __syncthreads();
        /* the kept, in rank order; an extension looks for its node (created after the sync) */
        const int cell0 = t * 2 * beam;
        for (int i = tid; i < ns; i += SEARCH_THREADS) {
            const cbg_cand &c = cand[i];
            if (c.first_e == INT_MAX || c.rank >= beam)
                continue;
            cbg_hyp &h = N[c.rank];
            h.s = c.s;
            h.ns = c.ns;
            h.v_s = c.v_s;
            h.v_ns = c.v_ns;
            h.score = c.score;
            h.ts = times_make(cells, c.ts_op, c.ts_src, cell0 + 2 * c.rank, t);
            h.tn = times_make(cells, c.tn_op, c.tn_src, cell0 + 2 * c.rank + 1, t);
            if (i < n) {
                h.node = H[i].node;
                h.parent = H[i].parent;
                h.last = H[i].last;
                h.depth = H[i].depth;
            } else {
                int hi = (i - n) % n, u = tk[(i - n) / n], pn = H[hi].node;
                const unsigned long long key = pair_key(pn, u);
                int nd = -1;
                for (unsigned x = hash_pair(key) & hmask;; x = (x + 1) & hmask) {
                    unsigned long long kx = __ldcg(&hash[x].key);
                    if (kx == key) {
                        nd = __ldcg(&hash[x].node);
                        break;
                    }
                    if (kx == 0)
                        break;
                }
                h.node = nd; /* -1: created below */
                h.parent = pn;
                h.last = u;
                h.depth = H[hi].depth + 1;
            }
        }
        __syncthreads();
        /* new nodes, after every lookup: node 1 + t·beam + rank is this frame's own */
        for (int r = tid; r < beam && r < n_valid; r += SEARCH_THREADS) {
            cbg_hyp &h = N[r];
            if (h.node >= 0)
                continue;
            int id = 1 + t * beam + r;
            nodes[id] = {h.parent, h.last};
            const unsigned long long key = pair_key(h.parent, h.last);
            unsigned x = hash_pair(key) & hmask;
            while (atomicCAS(&hash[x].key, 0ull, key) != 0ull)
                x = (x + 1) & hmask;
            hash[x].node = id;
            h.node = id;
        }
        if (tid == 0)
            n_cur = n_valid < beam ? n_valid : beam;
        cur = 1 - cur;
        __syncthreads();
    }
    /* the n-best: lens, scores, tokens (root-ward walk) and times (padded -1 where the list is
     * shorter than the prefix, as ctc_beam_nbest) */
    const cbg_hyp *H = hyps + cur * beam;
    const int n = n_cur;
    int *o_n = out, *o_len = out + batch, *o_tok = out + batch + (size_t)batch * beam;
    int *o_tim = o_tok + (size_t)batch * beam * t_stride;
    if (tid == 0)
        o_n[b] = n;
    for (int i = tid; i < n; i += SEARCH_THREADS) {
        const cbg_hyp &h = H[i];
        int len = h.depth;
        size_t base = ((size_t)b * beam + i) * t_stride;
        o_len[(size_t)b * beam + i] = len;
        score[(size_t)b * beam + i] = h.score;
        int j = len;
        for (int nd = h.node; nd > 0; nd = nodes[nd].parent)
            o_tok[base + --j] = nodes[nd].token;
        int tl = hyp_times(h).head, ln = 0;
        for (int c = tl; c >= 0; c = cells[c].x)
            ln++;
        for (j = len - 1; j >= ln; j--)
            o_tim[base + j] = -1;
        for (int c = tl; c >= 0 && j >= 0; c = cells[c].x)
            o_tim[base + j--] = cells[c].y;
    }
}

static size_t search_smem(int beam, int k)
{
    size_t S = (size_t)beam * (k + 1);
    return 2 * beam * sizeof(cbg_hyp) + S * sizeof(cbg_cand) +
           S * (sizeof(unsigned long long) + sizeof(int)) +
           ((size_t)beam * k + 2 * beam + k) * sizeof(int) + k * sizeof(float);
}

/* ---- host ------------------------------------------------------------------------------------ */

static int cuda_fail(hark_err_t *err, cudaError_t e, const char *what)
{
    cudaGetLastError();
    return err_set(err, HARK_ERR_CUDA, "ctc beam (gpu): %s: %s", what, cudaGetErrorString(e));
}

extern "C" int ctc_beam_gpu_beam_limit(int device)
{
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
        cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    int b = CTC_GPU_MAX_BEAM;
    while (b > 0 && search_smem(b, b) > (size_t)optin)
        b--;
    return b;
}

extern "C" int ctc_beam_gpu_create(int max_batch, int max_frames, int V, int beam, int blank,
                                   ctc_beam_gpu_t **out, hark_err_t *err)
{
    *out = NULL;
    if (max_batch < 1 || max_frames < 1 || V < 1 || beam < 1 || blank < 0 || blank >= V)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "ctc beam (gpu): batch %d, frames %d, vocabulary %d, beam %d, blank %d",
                       max_batch, max_frames, V, beam, blank);
    int dev = 0;
    cudaGetDevice(&dev);
    int limit = ctc_beam_gpu_beam_limit(dev);
    if (beam > limit)
        return err_set(err, HARK_ERR_TOO_LARGE,
                       "ctc beam (gpu): beam %d > %d (this GPU's shared memory per block)", beam,
                       limit);
    ctc_beam_gpu_t *g = (ctc_beam_gpu_t *)hark_calloc(1, sizeof *g);
    if (!g)
        return err_set(err, HARK_ERR_NOMEM, "ctc beam (gpu): out of memory");
    g->max_batch = max_batch;
    g->max_frames = max_frames;
    g->V = V;
    g->beam = beam;
    g->k = beam < V ? beam : V;
    g->blank = blank;
    size_t B = (size_t)max_batch, rows = B * max_frames, nodes = 1 + (size_t)max_frames * beam;
    size_t cells = (size_t)max_frames * 2 * beam, outs = out_ints(max_batch, beam, max_frames);
    g->hash_cap = 16;
    while ((size_t)g->hash_cap < 2 * nodes)
        g->hash_cap *= 2;
    cudaError_t e;
    if ((e = cudaMalloc((void **)&g->d_topk, sizeof(int) * rows * g->k)) ||
        (e = cudaMalloc((void **)&g->d_topv, sizeof(float) * rows * g->k)) ||
        (e = cudaMalloc((void **)&g->d_node, sizeof(cbg_node) * B * nodes)) ||
        (e = cudaMalloc((void **)&g->d_hash, sizeof(cbg_slot) * B * g->hash_cap)) ||
        (e = cudaMalloc((void **)&g->d_cell, sizeof(int2) * B * cells)) ||
        (e = cudaMalloc((void **)&g->d_lens, sizeof(int) * B)) ||
        (e = cudaMalloc((void **)&g->d_out, sizeof(int) * outs)) ||
        (e = cudaMalloc((void **)&g->d_score, sizeof(double) * B * beam)) ||
        (e = cudaMallocHost((void **)&g->h_out, sizeof(int) * outs)) ||
        (e = cudaMallocHost((void **)&g->h_score, sizeof(double) * B * beam)) ||
        (e = cudaMallocHost((void **)&g->h_lens, sizeof(int) * B)) ||
        /* the cap is one per kernel and device, shared by every search of the process: set
         * for the widest beam the device takes (sm_86 / sm_89 hold beam 31, not 32, in their
         * 99 KiB), so that creating a narrower one (another worker's) never lowers it under a
         * wider one's launches */
        (e = cudaFuncSetAttribute(search_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)search_smem(limit, limit)))) {
        int rc = cuda_fail(err, e, "scratch");
        ctc_beam_gpu_destroy(g);
        return rc;
    }
    *out = g;
    return HARK_OK;
}

extern "C" void ctc_beam_gpu_destroy(ctc_beam_gpu_t *g)
{
    if (!g)
        return;
    cudaFree(g->d_topk);
    cudaFree(g->d_topv);
    cudaFree(g->d_node);
    cudaFree(g->d_hash);
    cudaFree(g->d_cell);
    cudaFree(g->d_lens);
    cudaFree(g->d_out);
    cudaFree(g->d_score);
    cudaFreeHost(g->h_out);
    cudaFreeHost(g->h_score);
    cudaFreeHost(g->h_lens);
    hark_free(g);
}

extern "C" int ctc_beam_gpu_max_beam(const ctc_beam_gpu_t *g)
{
    return g ? g->beam : 0;
}

extern "C" int ctc_beam_gpu_run(ctc_beam_gpu_t *g, const float *d_logp, const int *lens, int batch,
                                int t_stride, int beam, void *stream, hark_err_t *err)
{
    if (!g || batch < 1 || batch > g->max_batch || t_stride < 1 || t_stride > g->max_frames ||
        beam < 1 || beam > g->beam || !d_logp || !lens)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "ctc beam (gpu): batch %d x %d frames, beam %d (scratch: %d x %d, beam %d)",
                       batch, t_stride, beam, g ? g->max_batch : 0, g ? g->max_frames : 0,
                       g ? g->beam : 0);
    for (int b = 0; b < batch; b++)
        if (lens[b] < 0 || lens[b] > t_stride)
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "ctc beam (gpu): utterance %d: %d frames of %d", b, lens[b], t_stride);
    cudaStream_t s = (cudaStream_t)stream;
    /* the previous run has drained (ctc_beam_gpu.h), so h_lens is free to rewrite */
    memcpy(g->h_lens, lens, sizeof(int) * (size_t)batch);
    int k = beam < g->V ? beam : g->V;
    cudaError_t e =
        cudaMemcpyAsync(g->d_lens, g->h_lens, sizeof(int) * batch, cudaMemcpyHostToDevice, s);
    if (e)
        return cuda_fail(err, e, "upload");
    if ((e = cudaMemsetAsync(g->d_hash, 0, sizeof(cbg_slot) * batch * g->hash_cap, s)))
        return cuda_fail(err, e, "clear");
    int rows = batch * t_stride;
    dim3 tg((rows + TOPK_WARPS - 1) / TOPK_WARPS), tb(32 * TOPK_WARPS);
    if (k <= 4)
        topk_kernel<4>
            <<<tg, tb, 0, s>>>(g->d_topk, g->d_topv, d_logp, g->d_lens, batch, t_stride, g->V, k);
    else if (k <= 8)
        topk_kernel<8>
            <<<tg, tb, 0, s>>>(g->d_topk, g->d_topv, d_logp, g->d_lens, batch, t_stride, g->V, k);
    else if (k <= 16)
        topk_kernel<16>
            <<<tg, tb, 0, s>>>(g->d_topk, g->d_topv, d_logp, g->d_lens, batch, t_stride, g->V, k);
    else
        topk_kernel<32>
            <<<tg, tb, 0, s>>>(g->d_topk, g->d_topv, d_logp, g->d_lens, batch, t_stride, g->V, k);
    int node_cap = 1 + g->max_frames * g->beam, cell_cap = g->max_frames * 2 * g->beam;
    search_kernel<<<batch, SEARCH_THREADS, search_smem(beam, k), s>>>(
        g->d_out, g->d_score, g->d_node, g->d_hash, g->d_cell, g->d_topk, g->d_topv, g->d_lens,
        batch, t_stride, beam, k, g->blank, node_cap, g->hash_cap, cell_cap);
    if ((e = cudaGetLastError()))
        return cuda_fail(err, e, "launch");
    size_t outs = out_ints(batch, beam, t_stride);
    if ((e = cudaMemcpyAsync(g->h_out, g->d_out, sizeof(int) * outs, cudaMemcpyDeviceToHost, s)) ||
        (e = cudaMemcpyAsync(g->h_score, g->d_score, sizeof(double) * batch * beam,
                             cudaMemcpyDeviceToHost, s)))
        return cuda_fail(err, e, "download");
    g->last_batch = batch;
    g->last_stride = t_stride;
    g->last_beam = beam;
    return HARK_OK;
}

extern "C" int ctc_beam_gpu_nbest(const ctc_beam_gpu_t *g, int b, ctc_nbest_t *out, hark_err_t *err)
{
    memset(out, 0, sizeof *out);
    if (!g || b < 0 || b >= g->last_batch)
        return err_set(err, HARK_ERR_INVALID_ARG, "ctc beam (gpu): no result for utterance %d", b);
    const int B = g->last_batch, beam = g->last_beam, ts = g->last_stride;
    const int *o_len = g->h_out + B, *o_tok = o_len + (size_t)B * beam;
    const int *o_tim = o_tok + (size_t)B * beam * ts;
    int n = g->h_out[b];
    int **tk, **tm;
    double *sc;
    int rc = ctc_nbest_alloc(out, n, o_len + (size_t)b * beam, &tk, &tm, &sc, err);
    if (rc)
        return rc;
    for (int i = 0; i < n; i++) {
        size_t base = ((size_t)b * beam + i) * ts;
        int len = o_len[(size_t)b * beam + i];
        memcpy(tk[i], o_tok + base, sizeof(int) * (size_t)len);
        memcpy(tm[i], o_tim + base, sizeof(int) * (size_t)len);
        sc[i] = g->h_score[(size_t)b * beam + i];
    }
    return HARK_OK;
}
