/* ctc_beam_gpu.cu — CTC prefix beam search on the GPU (ctc_beam_gpu.h).
 * CPU reference: ctc_prefix_beam_search (src/search/ctc.c). Tests: tests/search/test_ctc_beam_gpu.c
 *
 * Two kernels. topk_kernel: one warp per frame, each lane keeps a sorted top-k of its strided
 * share of the row, then k warp-wide picks merge them. search_kernel: one block per utterance
 * walks its frames. Per frame, WeNet's candidate dict is laid out as slots: slot q < n for the
 * beam's own prefixes, n + ui·n + hi for the extension of prefix hi by the ui-th top token.
 * Only a beam prefix can receive several updates in a frame (its blank and repeat updates, and
 * the extension of its parent by its last token, when the parent is in the beam too), so each
 * slot's updates are applied by one thread in WeNet's order — (token rank, prefix rank, first
 * the prefix itself then its extension) — and its first update gives its insertion order, which
 * breaks score ties as Python's stable sort does. Prefixes are nodes of a trie kept canonical
 * (a node's children are a list walked before a child is created), so prefix equality is node
 * equality, as in ctc.c. Viterbi times are cons lists (prev, t) in a pool with fixed cells per
 * (frame, kept hypothesis), so no cell is ever freed or moved.
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
    int child;         /* first child, -1 = none */
    int sibling;       /* next child of the parent, -1 = last */
};

struct cbg_hyp {
    double s, ns, v_s, v_ns;
    int node, parent, last; /* its trie node, the node's parent and token (cached) */
    int times_s, times_ns;  /* heads of cons lists in the cell pool, -1 = empty */
};

struct cbg_cand {
    double s, ns, v_s, v_ns, ctp; /* ctp: WeNet's cur_token_prob */
    double score;
    int first_e; /* its first update's position in WeNet's order, INT_MAX = no update (absent) */
    int ts_op, ts_src, tn_op, tn_src; /* times_s / times_ns: T_* applied to a list head */
    int rank;
};

struct ctc_beam_gpu {
    int max_batch, max_frames, V, beam, k, blank;
    size_t smem; /* search_kernel's dynamic shared memory for `beam` */
    int *d_topk;      /* (max_batch, max_frames, k) token ids */
    float *d_topv;    /* (max_batch, max_frames, k) their log-probs */
    cbg_node *d_node; /* (max_batch, 1 + max_frames · beam) trie nodes */
    int *d_depth;     /* (max_batch, 1 + max_frames · beam) */
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
 * NaN counts as -inf. Rows at or past their utterance's length are skipped. */
__global__ void topk_kernel(int *idx, float *val, const float *logp, const int *lens, int batch,
                            int t_stride, int V, int k)
{
    int row = blockIdx.x * TOPK_WARPS + (int)(threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= batch * t_stride || row % t_stride >= lens[row / t_stride])
        return;
    const float *x = logp + (size_t)row * V;
    float lv[CTC_GPU_MAX_BEAM];
    int li[CTC_GPU_MAX_BEAM];
    int n = 0;
    for (int v = lane; v < V; v += 32) {
        float f = x[v];
        if (f != f)
            f = -INFINITY;
        if (n == k && !(f > lv[k - 1]))
            continue;
        int j = n < k ? n++ : k - 1;
        while (j > 0 && f > lv[j - 1]) {
            lv[j] = lv[j - 1];
            li[j] = li[j - 1];
            j--;
        }
        lv[j] = f;
        li[j] = v;
    }
    int head = 0;
    for (int r = 0; r < k; r++) {
        float bv = head < n ? lv[head] : -INFINITY;
        int bi = head < n ? li[head] : INT_MAX;
        int mine = bi;
        for (int o = 16; o; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ov > bv || (ov == bv && oi < bi)) {
                bv = ov;
                bi = oi;
            }
        }
        if (bi == mine && head < n) /* ids are unique: exactly one lane advances */
            head++;
        if (lane == 0) {
            idx[(size_t)row * k + r] = bi;
            val[(size_t)row * k + r] = bv;
        }
    }
}

/* ---- search ---------------------------------------------------------------------------------- */

/* WeNet's log_add (ctc.c): max + log(sum(exp(x - max))), -inf when both are -inf */
__device__ __forceinline__ double log_add(double a, double b)
{
    if (a == -INFINITY && b == -INFINITY)
        return -INFINITY;
    double m = b > a ? b : a;
    return m + log(exp(a - m) + exp(b - m));
}

__device__ __forceinline__ double hyp_viterbi(const cbg_hyp &h)
{
    return h.v_s > h.v_ns ? h.v_s : h.v_ns;
}

__device__ __forceinline__ int hyp_times(const cbg_hyp &h)
{
    return h.v_s > h.v_ns ? h.times_s : h.times_ns;
}

__device__ __forceinline__ void cand_clear(cbg_cand &c)
{
    c.s = c.ns = c.v_s = c.v_ns = c.ctp = -INFINITY;
    c.first_e = INT_MAX;
    c.ts_op = c.tn_op = T_COPY;
    c.ts_src = c.tn_src = -1;
}

/* The update kinds of ctc.c's beam_step, applied to candidate c from prefix p with prob. */
enum { U_BLANK = 0, U_REPEAT, U_EXT_REPEAT, U_EXT };

__device__ void cand_update(cbg_cand &c, const cbg_hyp &p, int kind, double prob, int e)
{
    if (e < c.first_e)
        c.first_e = e;
    if (kind == U_BLANK) {
        c.s = log_add(c.s, log_add(p.s, p.ns) + prob);
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
                c.tn_src = p.times_ns;
            }
        }
    } else if (kind == U_EXT_REPEAT) { /* *u-u -> *uu */
        c.ns = log_add(c.ns, p.s + prob);
        if (c.v_ns < p.v_s + prob) {
            c.v_ns = p.v_s + prob;
            c.ctp = prob;
            c.tn_op = T_APPEND;
            c.tn_src = p.times_s;
        }
    } else {
        c.ns = log_add(c.ns, log_add(p.s, p.ns) + prob);
        double vit = hyp_viterbi(p);
        if (c.v_ns < vit + prob) {
            c.v_ns = vit + prob;
            c.ctp = prob;
            c.tn_op = T_APPEND;
            c.tn_src = hyp_times(p);
        }
    }
}

/* Materialises a candidate's time list into `cell` (when it needs a new one); returns the head. */
__device__ int times_make(int2 *cells, int op, int src, int cell, int t)
{
    if (op == T_COPY)
        return src;
    if (op == T_REPLACE) {
        if (src < 0)
            return -1; /* unreachable, as in ctc.c: a finite v_ns has times */
        cells[cell] = make_int2(cells[src].x, t);
    } else {
        cells[cell] = make_int2(src, t);
    }
    return cell;
}

/* Slot i beats slot j in the stable descending sort (NaN last, then first insertion). */
__device__ __forceinline__ bool cand_before(const cbg_cand &a, const cbg_cand &b)
{
    bool na = a.score != a.score, nb = b.score != b.score;
    if (na != nb)
        return nb;
    if (!na && a.score != b.score)
        return a.score > b.score;
    return a.first_e < b.first_e;
}

/* One block per utterance. Dynamic shared memory: hyps (2, beam), cands (beam·(k + 1)), child
 * table (beam, k), par / uil (beam), top-k ids and values (k). Writes the n-best to out. */
__global__ void __launch_bounds__(SEARCH_THREADS)
    search_kernel(int *out, double *score, cbg_node *nodes_all, int *depth_all, int2 *cells_all,
                  const int *topk, const float *topv, const int *lens, int batch, int t_stride,
                  int beam, int k, int blank, int node_cap, int cell_cap)
{
    extern __shared__ double smem_d[];
    const int b = blockIdx.x, tid = threadIdx.x;
    const int S = beam * (k + 1);
    cbg_hyp *hyps = (cbg_hyp *)smem_d; /* (2, beam) */
    cbg_cand *cand = (cbg_cand *)(hyps + 2 * beam);
    int *child = (int *)(cand + S); /* (beam, k) */
    int *par = child + beam * k;    /* (beam) */
    int *uil = par + beam;          /* (beam) */
    int *tk = uil + beam;           /* (k) */
    float *tv = (float *)(tk + k);  /* (k) */
    __shared__ int n_cur, n_valid, ui_blank;

    cbg_node *nodes = nodes_all + (size_t)b * node_cap;
    int *depth = depth_all + (size_t)b * node_cap;
    int2 *cells = cells_all + (size_t)b * cell_cap;
    const int T = lens[b];
    if (tid == 0) {
        nodes[0] = {-1, -1, -1, -1};
        depth[0] = 0;
        hyps[0] = {0.0, -INFINITY, 0.0, 0.0, 0, -1, -1, -1, -1};
        n_cur = 1;
    }
    __syncthreads();
    int cur = 0;
    for (int t = 0; t < T; t++) {
        cbg_hyp *H = hyps + cur * beam, *N = hyps + (1 - cur) * beam;
        const int n = n_cur;
        const size_t row = ((size_t)b * t_stride + t) * k;
        if (tid < k) {
            tk[tid] = topk[row + tid];
            tv[tid] = topv[row + tid];
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
        if (tid < n) { /* the beam prefix that is this one's parent, and the rank of its last token */
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
        /* the beam's own slots: their blank and repeat updates, and the extension of their
         * parent, in WeNet's order */
        for (int q = tid; q < n; q += SEARCH_THREADS) {
            cbg_cand &c = cand[q];
            cand_clear(c);
            int ev[3], kind[3], src[3], m = 0;
            if (ui_blank >= 0) {
                ev[m] = (ui_blank * n + q) * 2;
                kind[m] = U_BLANK;
                src[m++] = q;
            }
            if (uil[q] >= 0) {
                ev[m] = (uil[q] * n + q) * 2;
                kind[m] = U_REPEAT;
                src[m++] = q;
                int p = par[q];
                if (p >= 0) {
                    int rep = H[p].last == H[q].last; /* "…aa" from "…a": the parent's c2 */
                    ev[m] = (uil[q] * n + p) * 2 + rep;
                    kind[m] = rep ? U_EXT_REPEAT : U_EXT;
                    src[m++] = p;
                }
            }
            for (int i = 1; i < m; i++) /* at most three: insertion sort by position */
                for (int j = i; j > 0 && ev[j] < ev[j - 1]; j--) {
                    int x = ev[j];
                    ev[j] = ev[j - 1];
                    ev[j - 1] = x;
                    x = kind[j];
                    kind[j] = kind[j - 1];
                    kind[j - 1] = x;
                    x = src[j];
                    src[j] = src[j - 1];
                    src[j - 1] = x;
                }
            for (int i = 0; i < m; i++) {
                int ui = ev[i] / 2 / n;
                cand_update(c, H[src[i]], kind[i], (double)tv[ui], ev[i]);
            }
        }
        /* extensions that are not beam prefixes: one update each */
        for (int i = tid; i < n * k; i += SEARCH_THREADS) {
            int ui = i / n, hi = i % n;
            cbg_cand &c = cand[n + i];
            cand_clear(c);
            int u = tk[ui];
            if (u == blank || child[hi * k + ui] >= 0)
                continue;
            int rep = u == H[hi].last;
            cand_update(c, H[hi], rep ? U_EXT_REPEAT : U_EXT, (double)tv[ui], (ui * n + hi) * 2 + rep);
        }
        __syncthreads();
        const int ns = n * (k + 1);
        for (int i = tid; i < ns; i += SEARCH_THREADS)
            if (cand[i].first_e != INT_MAX) {
                cand[i].score = log_add(cand[i].s, cand[i].ns);
                atomicAdd(&n_valid, 1);
            }
        __syncthreads();
        for (int i = tid; i < ns; i += SEARCH_THREADS) {
            cbg_cand &c = cand[i];
            if (c.first_e == INT_MAX)
                continue;
            int r = 0;
            for (int j = 0; j < ns && r < beam; j++)
                if (j != i && cand[j].first_e != INT_MAX && cand_before(cand[j], c))
                    r++;
            c.rank = r;
        }
        __syncthreads();
        /* the kept: new beam in rank order; an extension first looks for its existing node */
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
            h.times_s = times_make(cells, c.ts_op, c.ts_src, cell0 + 2 * c.rank, t);
            h.times_ns = times_make(cells, c.tn_op, c.tn_src, cell0 + 2 * c.rank + 1, t);
            if (i < n) {
                h.node = H[i].node;
                h.parent = H[i].parent;
                h.last = H[i].last;
            } else {
                int hi = (i - n) % n, u = tk[(i - n) / n], pn = H[hi].node, nd = nodes[pn].child;
                while (nd >= 0 && nodes[nd].token != u)
                    nd = nodes[nd].sibling;
                h.node = nd; /* -1: created below */
                h.parent = pn;
                h.last = u;
            }
        }
        __syncthreads();
        /* new nodes, after every lookup: slot 1 + t·beam + rank is this frame's own */
        for (int r = tid; r < beam && r < n_valid; r += SEARCH_THREADS) {
            cbg_hyp &h = N[r];
            if (h.node >= 0)
                continue;
            int id = 1 + t * beam + r;
            nodes[id].parent = h.parent;
            nodes[id].token = h.last;
            nodes[id].child = -1;
            nodes[id].sibling = atomicExch(&nodes[h.parent].child, id);
            depth[id] = depth[h.parent] + 1;
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
        int len = depth[h.node];
        size_t base = ((size_t)b * beam + i) * t_stride;
        o_len[(size_t)b * beam + i] = len;
        score[(size_t)b * beam + i] = log_add(h.s, h.ns);
        int j = len;
        for (int nd = h.node; nd > 0; nd = nodes[nd].parent)
            o_tok[base + --j] = nodes[nd].token;
        int tl = hyp_times(h), ln = 0;
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
           ((size_t)beam * k + 2 * beam + k) * sizeof(int) + k * sizeof(float);
}

/* ---- host ------------------------------------------------------------------------------------ */

static int cuda_fail(hark_err_t *err, cudaError_t e, const char *what)
{
    cudaGetLastError();
    return err_set(err, HARK_ERR_CUDA, "ctc beam (gpu): %s: %s", what, cudaGetErrorString(e));
}

extern "C" int ctc_beam_gpu_create(int max_batch, int max_frames, int V, int beam, int blank,
                                   ctc_beam_gpu_t **out, hark_err_t *err)
{
    *out = NULL;
    if (max_batch < 1 || max_frames < 1 || V < 1 || beam < 1 || blank < 0 || blank >= V)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "ctc beam (gpu): batch %d, frames %d, vocabulary %d, beam %d, blank %d",
                       max_batch, max_frames, V, beam, blank);
    if (beam > CTC_GPU_MAX_BEAM)
        return err_set(err, HARK_ERR_TOO_LARGE, "ctc beam (gpu): beam %d > %d", beam,
                       CTC_GPU_MAX_BEAM);
    ctc_beam_gpu_t *g = (ctc_beam_gpu_t *)hark_calloc(1, sizeof *g);
    if (!g)
        return err_set(err, HARK_ERR_NOMEM, "ctc beam (gpu): out of memory");
    g->max_batch = max_batch;
    g->max_frames = max_frames;
    g->V = V;
    g->beam = beam;
    g->k = beam < V ? beam : V;
    g->blank = blank;
    g->smem = search_smem(beam, g->k);
    size_t B = (size_t)max_batch, rows = B * max_frames, nodes = 1 + (size_t)max_frames * beam;
    size_t cells = (size_t)max_frames * 2 * beam, outs = out_ints(max_batch, beam, max_frames);
    cudaError_t e;
    if ((e = cudaMalloc((void **)&g->d_topk, sizeof(int) * rows * g->k)) ||
        (e = cudaMalloc((void **)&g->d_topv, sizeof(float) * rows * g->k)) ||
        (e = cudaMalloc((void **)&g->d_node, sizeof(cbg_node) * B * nodes)) ||
        (e = cudaMalloc((void **)&g->d_depth, sizeof(int) * B * nodes)) ||
        (e = cudaMalloc((void **)&g->d_cell, sizeof(int2) * B * cells)) ||
        (e = cudaMalloc((void **)&g->d_lens, sizeof(int) * B)) ||
        (e = cudaMalloc((void **)&g->d_out, sizeof(int) * outs)) ||
        (e = cudaMalloc((void **)&g->d_score, sizeof(double) * B * beam)) ||
        (e = cudaMallocHost((void **)&g->h_out, sizeof(int) * outs)) ||
        (e = cudaMallocHost((void **)&g->h_score, sizeof(double) * B * beam)) ||
        (e = cudaMallocHost((void **)&g->h_lens, sizeof(int) * B)) ||
        (e = cudaFuncSetAttribute(search_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)g->smem))) {
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
    cudaFree(g->d_depth);
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
            return err_set(err, HARK_ERR_INVALID_ARG, "ctc beam (gpu): utterance %d: %d frames of %d",
                           b, lens[b], t_stride);
    cudaStream_t s = (cudaStream_t)stream;
    /* the previous run has drained (ctc_beam_gpu.h), so h_lens is free to rewrite */
    memcpy(g->h_lens, lens, sizeof(int) * (size_t)batch);
    int k = beam < g->V ? beam : g->V;
    cudaError_t e = cudaMemcpyAsync(g->d_lens, g->h_lens, sizeof(int) * batch,
                                    cudaMemcpyHostToDevice, s);
    if (e)
        return cuda_fail(err, e, "upload");
    int rows = batch * t_stride;
    topk_kernel<<<(rows + TOPK_WARPS - 1) / TOPK_WARPS, 32 * TOPK_WARPS, 0, s>>>(
        g->d_topk, g->d_topv, d_logp, g->d_lens, batch, t_stride, g->V, k);
    int node_cap = 1 + g->max_frames * g->beam, cell_cap = g->max_frames * 2 * g->beam;
    search_kernel<<<batch, SEARCH_THREADS, search_smem(beam, k), s>>>(
        g->d_out, g->d_score, g->d_node, g->d_depth, g->d_cell, g->d_topk, g->d_topv, g->d_lens,
        batch, t_stride, beam, k, g->blank, node_cap, cell_cap);
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
