// y = x @ w.T for a few bf16 rows of x and a bf16 weight, with AVX-512-BF16 dot products.
//
// An experiment (backend.rows_kernel on an AVX-512-BF16 CPU). In the paper runs on the Zen 5
// EPYC, scoring K+1 = 5 tokens with oneDNN's packed bf16 linear cost 1.3-1.5 one-token steps
// (results/paper_table1_zen5_int4step/theory.csv), where a memory-bound call should cost one.
// Measured on the Zen 4 EPYC (benchmarks/row_kernel.py --dot --step, results/dot_kernel_zen4):
// one row as fast as oneDNN's, five rows slower, so oneDNN stays the default there. Here each
// 32-element block of a weight row is loaded once and multiplied into every row of x with one
// dot-product instruction per row, so M <= 17 rows read the weight once at a few instructions
// per block. Each output keeps one 16-lane fp32 accumulator over its blocks in order, reduced
// the same way for any M (batch invariant), like the AVX2 kernel in bf16_gemm.cpp. Products of
// two bf16 values are exact in fp32; vdpbf16ps rounds each sum to nearest even and flushes
// denormals. Built with the rest of the extension (AVX2 flags): these functions carry their own
// target attribute, and Python calls them only where the CPU has avx512_bf16.
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "rows.h"

#define SPECBENCH_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512bf16")))

namespace {

using specbench::bf16_to_float;

constexpr int64_t PREFETCH = 16384;  // bf16 elements ahead of the load

// R weight rows (n .. n+R) times MR rows of x (m0 ..): y[m, n + r]
template <int R, int MR>
SPECBENCH_AVX512BF16 void dot_block(const uint16_t* x, const uint16_t* w, float* y, int64_t K,
                                    int64_t N, int64_t n, int64_t m0) {
  __m512 acc[R][MR];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MR; ++m) acc[r][m] = _mm512_setzero_ps();
  const int64_t K32 = K & ~int64_t(31);
  for (int64_t k = 0; k < K32; k += 32) {
    __m512bh wv[R];
    for (int r = 0; r < R; ++r) {
      const uint16_t* wr = w + (n + r) * K + k;
      _mm_prefetch(reinterpret_cast<const char*>(wr + PREFETCH), _MM_HINT_T0);
      wv[r] = (__m512bh)_mm512_loadu_si512(wr);
    }
    for (int m = 0; m < MR; ++m) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + (m0 + m) * K + k);
      for (int r = 0; r < R; ++r) acc[r][m] = _mm512_dpbf16_ps(acc[r][m], xv, wv[r]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MR; ++m) {
      float s = _mm512_reduce_add_ps(acc[r][m]);
      for (int64_t k = K32; k < K; ++k)
        s += bf16_to_float(w[(n + r) * K + k]) * bf16_to_float(x[(m0 + m) * K + k]);
      y[(m0 + m) * N + n + r] = s;
    }
}

// R weight rows times all M rows of x, MAXM rows of x per register block
template <int R, int MAXM>
void dot_rows(const uint16_t* x, const uint16_t* w, float* y, int64_t M, int64_t K, int64_t N,
              int64_t n) {
  specbench::for_x_rows<MAXM>(M, [&](auto mr, int64_t m0) {
    dot_block<R, decltype(mr)::value>(x, w, y, K, N, n, m0);
  });
}

}  // namespace

// x: (M, K) bf16 contiguous; weight: (N, K) bf16 contiguous; returns (M, N) fp32
at::Tensor bf16_dot_linear(const at::Tensor& x, const at::Tensor& weight) {
  specbench::check_linear(x, at::kBFloat16, weight);
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  auto y = at::empty({M, N}, x.options().dtype(at::kFloat));
  const auto* xp = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  const auto* wp = reinterpret_cast<const uint16_t*>(weight.data_ptr<at::BFloat16>());
  float* yp = y.data_ptr<float>();
  // 8 weight rows for one row of x, else 3 rows of weight x up to 6 rows of x (18 of the 32
  // registers accumulate)
  if (M == 1)
    specbench::for_weight_rows<8>(N, [&](int64_t n, auto r) {
      dot_rows<decltype(r)::value, 1>(xp, wp, yp, M, K, N, n);
    });
  else
    specbench::for_weight_rows<3>(N, [&](int64_t n, auto r) {
      dot_rows<decltype(r)::value, 6>(xp, wp, yp, M, K, N, n);
    });
  return y;
}

TORCH_LIBRARY_FRAGMENT(specbench, m) { m.def("bf16_dot_linear(Tensor x, Tensor weight) -> Tensor"); }

TORCH_LIBRARY_IMPL(specbench, CPU, m) { m.impl("bf16_dot_linear", &bf16_dot_linear); }
