/* Tests for the CPU references of src/ops/conv1d.c (the GPU launchers are checked against them in
 * test_conv1d_cuda.c): hand-worked cases of the mask, the padding, strides and dilation. */
#include "test.h"

#include "ops/conv1d.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

TEST(conv1d_len_keeps_length_at_stride_1)
{
    CHECK_EQ_INT(conv1d_len(37, 11, 1, 1), 37);
    CHECK_EQ_INT(conv1d_len(37, 29, 1, 2), 37);
    CHECK_EQ_INT(conv1d_len(37, 11, 2, 1), 19); /* ceil(37 / 2) */
    CHECK_EQ_INT(conv1d_len(1, 5, 2, 1), 1);
    CHECK_EQ_INT(conv1d_len(0, 5, 1, 1), 0);
}

TEST(conv1d_pad_mask_ref_zeroes_padding_and_masked_rows)
{
    /* batch 2, t 3, c 2 (ld_in 3, ld_out 4), pad 1 + 2, lens {2, 9} */
    float in[2 * 3 * 3], out[2 * 6 * 4];
    for (int i = 0; i < 18; i++)
        in[i] = (float)(i + 1);
    int lens[2] = {2, 9};
    conv1d_pad_mask_ref(out, in, lens, 2, 3, 2, 3, 4, 1, 2);
    float want0[6][4] = {{0}, {1, 2, 0, 0}, {4, 5, 0, 0}, {0}, {0}, {0}};
    float want1[6][4] = {{0}, {10, 11, 0, 0}, {13, 14, 0, 0}, {16, 17, 0, 0}, {0}, {0}};
    CHECK(!memcmp(out, want0, sizeof want0));
    CHECK(!memcmp(out + 24, want1, sizeof want1));
}

TEST(conv1d_ref_strided_dilated_taps)
{
    /* one channel in and out, k 3, dil 2, stride 2 over 9 padded frames x = 0..8: output s reads
     * x[2s], x[2s + 2], x[2s + 4]; t_out = (9 - 5) / 2 + 1 = 3 */
    float xp[9], w[3] = {1, 10, 100}, acc[3] = {1000, 1000, 1000};
    for (int i = 0; i < 9; i++)
        xp[i] = (float)i;
    conv1d_ref(acc, 1.0f, xp, w, 1, 9, 1, 1, 3, 2, 2);
    CHECK(acc[0] == 1000 + 0 + 20 + 400);
    CHECK(acc[1] == 1000 + 2 + 40 + 600);
    CHECK(acc[2] == 1000 + 4 + 60 + 800);
    conv1d_ref(acc, 0.0f, xp, w, 1, 9, 1, 1, 3, 2, 2);
    CHECK(acc[0] == 420);
}

TEST(conv1d_depthwise_ref_masks_input_and_output)
{
    /* one channel, k 3 (pad 1), t 5, lens 3: in' = 1 2 3 0 0; out rows >= 3 are 0 */
    float in[5] = {1, 2, 3, 4, 5}, w[3] = {1, 10, 100}, out[5];
    int lens[1] = {3};
    conv1d_depthwise_ref(out, in, w, lens, 1, 5, 1, 3, 1, 1);
    CHECK(out[0] == 0 * 1 + 1 * 10 + 2 * 100);
    CHECK(out[1] == 1 + 20 + 300);
    CHECK(out[2] == 2 + 30 + 0);
    CHECK(out[3] == 0 && out[4] == 0);
    /* no lens: every row valid */
    conv1d_depthwise_ref(out, in, w, NULL, 1, 5, 1, 3, 1, 1);
    CHECK(out[3] == 3 + 40 + 500 && out[4] == 4 + 50);
}

TEST(conv1d_act_ref_relu_hardtanh)
{
    float x[4] = {-2, -0.5f, 0.5f, 2}, b[2] = {0, 1}, y[4];
    conv1d_act_ref(y, x, b, 2, 2, CONV1D_ACT_RELU);
    CHECK(y[0] == 0 && y[1] == 0.5f && y[2] == 0.5f && y[3] == 3);
    conv1d_act_ref(y, x, b, 2, 2, CONV1D_ACT_HARDTANH);
    CHECK(y[0] == -1 && y[1] == 0.5f && y[2] == 0.5f && y[3] == 1);
    conv1d_act_ref(y, x, NULL, 2, 2, CONV1D_ACT_NONE);
    CHECK(y[0] == -2 && y[3] == 2);
}

TEST(conv1d_pad_mask_act_ref_bias_then_leaky_relu)
{
    /* batch 1, t 3, c 2, pad 1 + 1, lens {2}: rows lrelu(x + b), slope 0.5 */
    float in[6] = {1, -2, -3, 4, 5, 6}, b[2] = {0.5f, -1}, out[5 * 2];
    int lens[1] = {2};
    conv1d_pad_mask_act_ref(out, in, b, 0.5f, lens, 1, 3, 2, 2, 2, 1, 1);
    float want[10] = {0, 0, 1.5f, -1.5f, -1.25f, 3, 0, 0, 0, 0};
    CHECK(!memcmp(out, want, sizeof want));
}

/* ConvTranspose1d as the polyphase conv (zero-pad J-1 / pad_r, conv with the re-laid weights,
 * crop + bias) == the direct scatter, on awkward sizes: odd channels, kernels that are and are not
 * multiples of the stride, odd crops, a batch of 3 with per-item lengths masked */
TEST(conv1d_transpose_as_polyphase_conv_matches_scatter)
{
    const int cases[][5] = {/* cin, cout, k, stride, pad */
                            {13, 11, 16, 8, 4}, {5, 7, 4, 2, 1}, {9, 3, 7, 3, 2},
                            {8, 16, 8, 4, 2},   {3, 5, 5, 1, 2}, {6, 4, 11, 5, 3}};
    unsigned seed = 7;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int cin = cases[ci][0], cout = cases[ci][1], k = cases[ci][2], u = cases[ci][3],
            pad = cases[ci][4];
        const int batch = 3, tl = 9, lens[3] = {9, 4, 1};
        int cin_p = (cin + 7) & ~7, cout_p = (cout + 7) & ~7, J = conv1d_transpose_taps(k, u),
            R = conv1d_transpose_pad_r(pad, u), nq = tl + R, t_out = (tl - 1) * u - 2 * pad + k;
        float *x = malloc(sizeof(float) * batch * tl * cin),
              *wt = malloc(sizeof(float) * cin * cout * k);
        float *b = malloc(sizeof(float) * cout_p);
        for (int i = 0; i < batch * tl * cin; i++)
            x[i] = test_randf(&seed);
        for (int i = 0; i < cin * cout * k; i++)
            wt[i] = test_randf(&seed);
        memset(b, 0, sizeof(float) * cout_p);
        for (int i = 0; i < cout; i++)
            b[i] = test_randf(&seed);
        /* the reference: each item alone, its own length, zero past it */
        float *ref = calloc((size_t)batch * t_out * cout, sizeof(float));
        for (int bb = 0; bb < batch; bb++)
            conv1d_transpose_ref(ref + (size_t)bb * t_out * cout, x + (size_t)bb * tl * cin, wt, b,
                                 1, lens[bb], cin, cout, k, u, pad);
        float *w = malloc(sizeof(float) * u * cout_p * J * cin_p);
        conv1d_transpose_weights(w, wt, cin, cout, k, u, cin_p, cout_p);
        int tp = J - 1 + tl + R;
        float *xp = malloc(sizeof(float) * batch * tp * cin_p);
        float *yp = malloc(sizeof(float) * batch * nq * u * cout_p);
        float *y = malloc(sizeof(float) * batch * tl * u * cout_p);
        conv1d_pad_mask_act_ref(xp, x, NULL, 1.0f, lens, batch, tl, cin, cin, cin_p, J - 1, R);
        conv1d_ref(yp, 0.0f, xp, w, batch, tp, cin_p, u * cout_p, J, 1, 1);
        conv1d_crop_bias_ref(y, yp, b, batch, tl * u, cout_p, cout_p, (long long)nq * u * cout_p,
                             pad);
        /* every item's own output length is lens·u when k - 2·pad = u; compare that span */
        double worst = 0;
        for (int bb = 0; bb < batch; bb++) {
            int lo = (lens[bb] - 1) * u - 2 * pad + k;
            for (int p = 0; p < lo && p < tl * u; p++)
                for (int o = 0; o < cout; o++) {
                    double d = fabs(y[((size_t)bb * tl * u + p) * cout_p + o] -
                                    ref[((size_t)bb * t_out + p) * cout + o]);
                    worst = d > worst ? d : worst;
                }
        }
        free(x);
        free(wt);
        free(b);
        free(ref);
        free(w);
        free(xp);
        free(yp);
        free(y);
        CHECKF(worst < 1e-5, "case %zu (cin %d cout %d k %d u %d pad %d): max diff %g", ci, cin,
               cout, k, u, pad, worst);
    }
}

TEST(conv1d_sum_and_post_tanh_refs)
{
    float y[4] = {1, 2, 3, 4}, x[4] = {1, 1, 1, 1}, b[2] = {1, 2};
    conv1d_sum_ref(y, x, b, 0, 2.0f, 2, 2); /* ((y + x + b) / 2 */
    float want[4] = {1.5f, 2.5f, 2.5f, 3.5f};
    CHECK(!memcmp(y, want, sizeof want));
    conv1d_sum_ref(y, x, NULL, 1, 1.0f, 2, 2);
    CHECK(y[0] == 1 && y[3] == 1);
    /* conv_post: 3 taps over 4 channels, only channel 0 weighted (1, 2, 3), slope 0.5; row 2 is
     * past the length: never read */
    float px[3 * 4] = {1, 0, 0, 0, -2, 0, 0, 0, 9, 9, 9, 9}, w[3 * 4] = {0}, audio[3], pre[3];
    w[0] = 1, w[4] = 2, w[8] = 3;
    int lens[1] = {2};
    conv1d_post_tanh_ref(audio, pre, px, w, 0.25f, 0.5f, lens, 1, 3, 4, 3);
    CHECK(pre[0] == -0.75f && pre[1] == -0.75f && pre[2] == 0.0f); /* 2·1 + 3·(-1); 1·1 + 2·(-1) */
    CHECK(audio[0] == tanhf(-0.75f) && audio[1] == tanhf(-0.75f) && audio[2] == 0.0f);
}
