/* zipformer_cuda.cu — the Zipformer2 encoder's own kernels (zipformer_ops.h), float32: the
 * streams' cache gathers, CompactRelPositionalEncoding, the shifted masked softmax of the
 * attention weights, the chunk-causal depthwise conv, down/upsampling with the bypasses, the
 * NonlinAttention gates and encoder_embed's ConvNeXt layout ops. Each is the CPU reference of
 * zipformer_ops.c with the same float operations in the same order (the softmax's sum in float
 * per block, the reference's in double).
 * Tests: tests/ops/test_zipformer_ops.c */
#include "core/error.h"
#include "hark.h"
#include "ops/ops.h"
#include "ops/ops_cuda_impl.h"
#include "ops/zipformer_ops.h"

#include <stdint.h>

#define GRID_STRIDE(e, n)                                                                          \
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < (n);                        \
         e += (size_t)gridDim.x * blockDim.x)

static int bad(hark_err_t *err, const char *what)
{
    return err_set(err, HARK_ERR_INVALID_ARG, "%s: bad sizes", what);
}

/* ---- stream caches -------------------------------------------------------------------------- */

__global__ void cache_concat_kernel(float *kv, const float *pool, const int *slot, long long ss,
                                    long long off, const float *x, int ldx, int lc, int t, int w,
                                    size_t n)
{
    const int rows = lc + t;
    GRID_STRIDE(e, n)
    {
        const int c = (int)(e % w);
        const size_t rr = e / w;
        const int r = (int)(rr % rows), j = (int)(rr / rows);
        float v;
        if (r < lc)
            v = pool ? pool[(long long)slot[j] * ss + off + (long long)r * w + c] : 0.0f;
        else
            v = x[((size_t)j * t + (r - lc)) * ldx + c];
        kv[e] = v;
    }
}

extern "C" int cuda_zf_cache_concat(float *kv, const float *pool, const int *slot,
                                    long long slot_stride, long long off, const float *x, int ldx,
                                    int n, int lc, int t, int w, void *stream, hark_err_t *err)
{
    if (n < 0 || lc < 0 || t < 0 || w < 0 || (t > 0 && ldx < w) || (pool && lc > 0 && !slot))
        return bad(err, "zf_cache_concat");
    const size_t total = (size_t)n * (lc + t) * w;
    if (!total)
        return HARK_OK;
    cache_concat_kernel<<<ops_grid_for(total, 256), 256, 0, (cudaStream_t)stream>>>(
        kv, pool, slot, slot_stride, off, x, ldx, lc, t, w, total);
    return ops_launched(err, "zf_cache_concat");
}

__global__ void cache_store_kernel(float *pool, const int *slot, long long ss, long long off,
                                   const float *kv, int kv_rows, int src0, int lc, int w, size_t n)
{
    GRID_STRIDE(e, n)
    {
        const int c = (int)(e % w);
        const size_t rr = e / w;
        const int r = (int)(rr % lc), j = (int)(rr / lc);
        pool[(long long)slot[j] * ss + off + (long long)r * w + c] =
            kv[((size_t)j * kv_rows + src0 + r) * w + c];
    }
}

extern "C" int cuda_zf_cache_store(float *pool, const int *slot, long long slot_stride,
                                   long long off, const float *kv, int kv_rows, int src0, int n,
                                   int lc, int w, void *stream, hark_err_t *err)
{
    if (n < 0 || lc < 0 || w < 0 || src0 < 0 || src0 + lc > kv_rows || !pool || !slot)
        return bad(err, "zf_cache_store");
    const size_t total = (size_t)n * lc * w;
    if (!total)
        return HARK_OK;
    cache_store_kernel<<<ops_grid_for(total, 256), 256, 0, (cudaStream_t)stream>>>(
        pool, slot, slot_stride, off, kv, kv_rows, src0, lc, w, total);
    return ops_launched(err, "zf_cache_store");
}

/* ---- CompactRelPositionalEncoding ------------------------------------------------------------ */

__global__ void pos_emb_kernel(float *pe, int t, int lc, int e, float cl, float lcl, float ls,
                               size_t n)
{
    GRID_STRIDE(i, n)
    {
        const int r = (int)(i / (size_t)(e / 2)), k = (int)(i % (size_t)(e / 2));
        float x = (float)(r - (t + lc - 1)), sg = x > 0 ? 1.0f : (x < 0 ? -1.0f : 0.0f);
        float xc = cl * sg * (logf(fabsf(x) + cl) - lcl);
        float xa = atanf(xc / ls);
        float arg = xa * (float)(k + 1);
        float *o = pe + (size_t)r * e;
        o[2 * k] = cosf(arg);
        o[2 * k + 1] = k == e / 2 - 1 ? 1.0f : sinf(arg);
    }
}

extern "C" int cuda_zf_pos_emb(float *pe, int t, int lc, int e, void *stream, hark_err_t *err)
{
    if (t < 1 || lc < 0 || e < 2 || e % 2)
        return bad(err, "zf_pos_emb");
    const size_t total = (size_t)(2 * t - 1 + lc) * (e / 2);
    const float cl = (float)sqrt((double)e), lcl = (float)log(sqrt((double)e));
    const float ls = (float)(e / (2.0 * M_PI));
    pos_emb_kernel<<<ops_grid_for(total, 256), 256, 0, (cudaStream_t)stream>>>(pe, t, lc, e, cl,
                                                                               lcl, ls, total);
    return ops_launched(err, "zf_pos_emb");
}

/* ---- the attention weights' softmax ---------------------------------------------------------- */

/* a block per row (stream j, head, query i) */
__global__ void rel_softmax_kernel(float *sc, const float *bd, const int *lo, const int *hi, int h,
                                   int t, int k, int p)
{
    __shared__ float red[32];
    const size_t row = blockIdx.x;
    const int i = (int)(row % t), j = (int)(row / ((size_t)t * h));
    float *x = sc + row * k;
    const float *b = bd + row * p + (t - 1 - i);
    int a = lo ? lo[(size_t)j * t + i] : 0, e = hi ? hi[(size_t)j * t + i] : k;
    a = a < 0 ? 0 : a;
    e = e > k ? k : e;
    float mx = -INFINITY;
    for (int c = a + threadIdx.x; c < e; c += blockDim.x)
        mx = fmaxf(mx, x[c] + b[c]);
    mx = ops_block_max(mx, red);
    float s = 0.0f;
    for (int c = a + threadIdx.x; c < e; c += blockDim.x)
        s += expf(x[c] + b[c] - mx);
    s = ops_block_sum(s, red);
    const float inv = a < e ? 1.0f / s : 0.0f;
    for (int c = threadIdx.x; c < k; c += blockDim.x)
        x[c] = c >= a && c < e ? expf(x[c] + b[c] - mx) * inv : 0.0f;
}

extern "C" int cuda_zf_rel_softmax(float *sc, const float *bd, const int *lo, const int *hi, int n,
                                   int h, int t, int k, int p, void *stream, hark_err_t *err)
{
    if (n < 0 || h < 1 || t < 0 || k < 1 || p < k + t - 1)
        return bad(err, "zf_rel_softmax");
    const size_t rows = (size_t)n * h * t;
    if (!rows)
        return HARK_OK;
    if (rows > 0x7fffffffu)
        return bad(err, "zf_rel_softmax");
    const int th = k >= 256 ? 256 : (k >= 128 ? 128 : (k > 32 ? 64 : 32));
    rel_softmax_kernel<<<(unsigned)rows, th, 0, (cudaStream_t)stream>>>(sc, bd, lo, hi, h, t, k, p);
    return ops_launched(err, "zf_rel_softmax");
}

/* ---- the chunk-causal depthwise conv --------------------------------------------------------- */

__global__ void chunk_conv_kernel(float *out, const float *ext, const float *cw, const float *cb,
                                  const float *kw, const float *kb, const float *scale, int t,
                                  int d, int kk, int c, int act, size_t n)
{
    const int lp = kk / 2;
    GRID_STRIDE(e, n)
    {
        const int ch = (int)(e % d);
        const size_t rr = e / d;
        const int r = (int)(rr % t), j = (int)(rr / t);
        const float *x = ext + (size_t)j * (lp + t) * d + ch; /* row s of ext: x[s · d] */
        /* causal part: rows r .. r + lp of ext (the frame and the lp before it) */
        float acc = cb[ch];
        for (int q = 0; q <= lp; q++)
            acc += cw[(size_t)ch * (lp + 1) + q] * x[(size_t)(r + q) * d];
        /* chunkwise part: the frame's chunk [c0, c0 + len), symmetric kernel */
        const int c0 = r / c * c, len = t - c0 < c ? t - c0 : c, rp = r - c0;
        float y = kb[ch];
        for (int q = 0; q < kk; q++) {
            int s = rp + q - lp;
            if (s < 0 || s >= len)
                continue;
            y += kw[(size_t)ch * kk + q] * x[(size_t)(lp + c0 + s) * d];
        }
        const float *l = scale + (size_t)ch * kk, *rt = scale + (size_t)(d + ch) * kk;
        float sc = 1.0f;
        if (c < kk) {
            sc += l[rp] + rt[kk - c + rp];
        } else {
            if (rp < kk)
                sc += l[rp];
            if (rp >= c - kk)
                sc += rt[rp - (c - kk)];
        }
        acc += y * sc;
        out[e] = act_f(acc, act);
    }
}

extern "C" int cuda_zf_chunk_conv(float *out, const float *ext, const float *cw, const float *cb,
                                  const float *kw, const float *kb, const float *scale, int n,
                                  int t, int d, int kk, int c, int act, void *stream,
                                  hark_err_t *err)
{
    if (n < 0 || t < 0 || d < 1 || kk < 1 || kk % 2 == 0)
        return bad(err, "zf_chunk_conv");
    if (c <= 0 || c > t)
        c = t;
    const size_t total = (size_t)n * t * d;
    if (!total)
        return HARK_OK;
    chunk_conv_kernel<<<ops_grid_for(total, 256), 256, 0, (cudaStream_t)stream>>>(
        out, ext, cw, cb, kw, kb, scale, t, d, kk, c, act, total);
    return ops_launched(err, "zf_chunk_conv");
}

/* ---- down / upsampling, bypass, gates -------------------------------------------------------- */

__global__ void downsample_kernel(float *out, const float *in, int ld, const float *w, int te,
                                  int td, int ds, int d, size_t n)
{
    GRID_STRIDE(e, n)
    {
        const int c = (int)(e % d);
        const size_t rr = e / d;
        const int r = (int)(rr % td), j = (int)(rr / td);
        const float *x = in + (size_t)j * te * ld + c;
        float v;
        if (ds == 1) {
            v = x[(size_t)r * ld];
        } else {
            v = 0.0f;
            for (int k = 0; k < ds; k++) {
                const int src = r * ds + k < te ? r * ds + k : te - 1;
                v += x[(size_t)src * ld] * w[k];
            }
        }
        out[e] = v;
    }
}

extern "C" int cuda_zf_downsample(float *out, const float *in, int ld, const float *w, int n,
                                  int te, int ds, int d, void *stream, hark_err_t *err)
{
    if (n < 0 || te < 0 || ds < 1 || d < 1 || ld < d || (ds > 1 && !w))
        return bad(err, "zf_downsample");
    const int td = (te + ds - 1) / ds;
    const size_t total = (size_t)n * td * d;
    if (!total)
        return HARK_OK;
    downsample_kernel<<<ops_grid_for(total, 256), 256, 0, (cudaStream_t)stream>>>(
        out, in, ld, w, te, td, ds, d, total);
    return ops_launched(err, "zf_downsample");
}

__global__ void upsample_kernel(float *cur, int ldc, float *outs, const float *xs,
                                const float *comb, int te, int td, int ds, int d, size_t n)
{
    GRID_STRIDE(e, n)
    {
        const int c = (int)(e % d);
        const size_t rr = e / d; /* stream j's row r: rr = j te + r */
        const int r = (int)(rr % te), j = (int)(rr / te);
        const float u = xs[((size_t)j * td + r / ds) * d + c];
        float *o = cur + rr * ldc + c;
        const float v = ds == 1 ? u : *o + (u - *o) * comb[c];
        *o = v;
        if (outs)
            outs[e] = v;
    }
}

extern "C" int cuda_zf_upsample_combine(float *cur, int ldc, float *outs, const float *xs,
                                        const float *comb, int n, int te, int ds, int d,
                                        void *stream, hark_err_t *err)
{
    if (n < 0 || te < 0 || ds < 1 || d < 1 || ldc < d || (ds > 1 && !comb))
        return bad(err, "zf_upsample_combine");
    const size_t total = (size_t)n * te * d;
    if (!total)
        return HARK_OK;
    upsample_kernel<<<ops_grid_for(total, 256), 256, 0, (cudaStream_t)stream>>>(
        cur, ldc, outs, xs, comb, te, (te + ds - 1) / ds, ds, d, total);
    return ops_launched(err, "zf_upsample_combine");
}

__global__ void bypass_kernel(float *x, const float *orig, const float *scale, int d, size_t n)
{
    GRID_STRIDE(e, n)
    {
        const float o = orig[e];
        x[e] = o + (x[e] - o) * scale[e % d];
    }
}

extern "C" int cuda_zf_bypass(float *x, const float *orig, const float *scale, int n, int d,
                              void *stream, hark_err_t *err)
{
    if (n < 0 || d < 1)
        return bad(err, "zf_bypass");
    const size_t total = (size_t)n * d;
    if (!total)
        return HARK_OK;
    bypass_kernel<<<ops_grid_for(total, 256), 256, 0, (cudaStream_t)stream>>>(x, orig, scale, d,
                                                                              total);
    return ops_launched(err, "zf_bypass");
}

__global__ void gate_kernel(float *o, const float *a, int lda, const float *b, int ldb, int w,
                            int tanh_b, size_t n)
{
    GRID_STRIDE(e, n)
    {
        const size_t r = e / w;
        const int j = (int)(e % w);
        const float g = b[r * ldb + j];
        o[e] = a[r * lda + j] * (tanh_b ? tanhf(g) : g);
    }
}

extern "C" int cuda_zf_gate(float *o, const float *a, int lda, const float *b, int ldb, int n,
                            int w, int tanh_b, void *stream, hark_err_t *err)
{
    if (n < 0 || w < 1 || lda < w || ldb < w)
        return bad(err, "zf_gate");
    const size_t total = (size_t)n * w;
    if (!total)
        return HARK_OK;
    gate_kernel<<<ops_grid_for(total, 256), 256, 0, (cudaStream_t)stream>>>(o, a, lda, b, ldb, w,
                                                                            tanh_b, total);
    return ops_launched(err, "zf_gate");
}

/* ---- encoder_embed's ConvNeXt ---------------------------------------------------------------- */

__global__ void convnext_dw_kernel(float *out, const float *ext, const float *w, const float *b,
                                   int t, int w2, int c, int kk, size_t n)
{
    const int pad = kk / 2;
    const size_t row = (size_t)w2 * c;
    GRID_STRIDE(e, n)
    {
        const int ch = (int)(e % c);
        const size_t r1 = e / c;
        const int q = (int)(r1 % w2);
        const size_t r2 = r1 / w2;
        const int i = (int)(r2 % t), j = (int)(r2 / t);
        const float *x = ext + (size_t)j * (t + kk - 1) * row;
        float acc = b[ch];
        for (int a = 0; a < kk; a++)
            for (int k = 0; k < kk; k++) {
                const int qq = q + k - pad;
                if (qq < 0 || qq >= w2)
                    continue;
                acc += w[((size_t)ch * kk + a) * kk + k] * x[(size_t)(i + a) * row + qq * c + ch];
            }
        out[e] = acc;
    }
}

extern "C" int cuda_zf_convnext_dw(float *out, const float *ext, const float *w, const float *b,
                                   int n, int t, int w2, int c, int kk, void *stream,
                                   hark_err_t *err)
{
    if (n < 0 || t < 0 || w2 < 1 || c < 1 || kk < 1 || kk % 2 == 0)
        return bad(err, "zf_convnext_dw");
    const size_t total = (size_t)n * t * w2 * c;
    if (!total)
        return HARK_OK;
    convnext_dw_kernel<<<ops_grid_for(total, 256), 256, 0, (cudaStream_t)stream>>>(
        out, ext, w, b, t, w2, c, kk, total);
    return ops_launched(err, "zf_convnext_dw");
}

/* e indexes the output (n, t, c, w2) */
__global__ void convnext_out_kernel(float *out, const float *y, const float *ext, int ext_rows,
                                    int r0, int t, int w2, int c, size_t n)
{
    GRID_STRIDE(e, n)
    {
        const int q = (int)(e % w2);
        const size_t r1 = e / w2;
        const int ch = (int)(r1 % c);
        const size_t r2 = r1 / c;
        const int i = (int)(r2 % t), j = (int)(r2 / t);
        const size_t s = (((size_t)j * t + i) * w2 + q) * c + ch;
        const size_t rs = (((size_t)j * ext_rows + r0 + i) * w2 + q) * c + ch;
        out[e] = y[s] + ext[rs];
    }
}

extern "C" int cuda_zf_convnext_out(float *out, const float *y, const float *ext, int ext_rows,
                                    int r0, int n, int t, int w2, int c, void *stream,
                                    hark_err_t *err)
{
    if (n < 0 || t < 0 || w2 < 1 || c < 1 || r0 < 0 || r0 + t > ext_rows)
        return bad(err, "zf_convnext_out");
    const size_t total = (size_t)n * t * c * w2;
    if (!total)
        return HARK_OK;
    convnext_out_kernel<<<ops_grid_for(total, 256), 256, 0, (cudaStream_t)stream>>>(
        out, y, ext, ext_rows, r0, t, w2, c, total);
    return ops_launched(err, "zf_convnext_out");
}

/* e indexes ext (n, rows, w2, c) */
__global__ void embed_ext_kernel(float *ext, const float *conv, const float *pool, const int *slot,
                                 long long ss, long long off, int tc, int c, int wf, int w2,
                                 int pad, int rows, size_t n)
{
    const size_t row = (size_t)w2 * c;
    GRID_STRIDE(e, n)
    {
        const size_t within = e % row, rr = e / row;
        const int r = (int)(rr % rows), j = (int)(rr / rows);
        const int q = (int)(within / c), ch = (int)(within % c);
        float v = 0.0f;
        if (r < pad) {
            if (pool)
                v = pool[(long long)slot[j] * ss + off + (long long)r * (long long)row +
                         (long long)within];
        } else if (r < pad + tc) {
            v = conv[(((size_t)j * tc + (r - pad)) * c + ch) * wf + 2 * q];
        }
        ext[e] = v;
    }
}

extern "C" int cuda_zf_embed_ext(float *ext, const float *conv, const float *pool, const int *slot,
                                 long long slot_stride, long long off, int n, int tc, int c, int wf,
                                 int pad, int tail, void *stream, hark_err_t *err)
{
    if (n < 0 || tc < 0 || c < 1 || wf < 1 || pad < 0 || tail < 0 || (pool && pad > 0 && !slot))
        return bad(err, "zf_embed_ext");
    const int w2 = (wf + 1) / 2, rows = pad + tc + tail;
    const size_t total = (size_t)n * rows * w2 * c;
    if (!total)
        return HARK_OK;
    embed_ext_kernel<<<ops_grid_for(total, 256), 256, 0, (cudaStream_t)stream>>>(
        ext, conv, pool, slot, slot_stride, off, tc, c, wf, w2, pad, rows, total);
    return ops_launched(err, "zf_embed_ext");
}
