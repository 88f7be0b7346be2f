/* Tests for the CPU references of src/ops/conv1d.c (the GPU launchers are checked against them in
 * test_conv1d_cuda.c): hand-worked cases of the mask, the padding, strides and dilation. */
#include "test.h"

#include "ops/conv1d.h"

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
