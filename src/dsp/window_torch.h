/* window_torch.h — symmetric hann(^power) windows bit-identical to PyTorch's float32 ones.
 * Tests: tests/dsp/test_features.c */
#ifndef HARK_DSP_WINDOW_TORCH_H
#define HARK_DSP_WINDOW_TORCH_H

/* w[i] = hann_window(n, periodic=False)[i] ** power, as torch's AVX2 kernels compute it
 * (power 0.85: povey). Call only when the CPU has AVX2 and FMA; returns -1 if not compiled in. */
int window_torch_hann_pow_avx2(float *w, int n, float power);

#endif
