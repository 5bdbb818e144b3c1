// y = x @ w.T (+ bias) for a few rows of x and a bf16 weight, with AVX2 + FMA (issue 23).
//
// On CPUs without native bf16 dot products, eager bf16 GEMMs are compute-bound from two rows
// on. This kernel widens each 8-element block of a weight row to fp32 once and multiplies it
// into every row of x (fp32) in registers, so M rows read the weight once: memory-bound like a
// single row. Each output is the same 8-lane fp32 accumulation in the same order for any M, so
// the result for a row does not depend on how many rows are in the call (batch invariant).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace {

inline __m256 load_bf16(const uint16_t* p) {
  // 8 bf16 -> 8 fp32: zero-extend to 32 bits and shift into the high half
  __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float bf16_to_float(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

// R weight rows (n .. n+R) times MR rows of x (m0 ..): y[m, n + r]
template <int R, int MR>
void block(const float* x, const uint16_t* w, float* y, int64_t K, int64_t N, int64_t n,
           int64_t m0) {
  __m256 acc[R][MR];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MR; ++m) acc[r][m] = _mm256_setzero_ps();
  const int64_t K8 = K & ~int64_t(7);
  for (int64_t k = 0; k < K8; k += 8) {
    __m256 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load_bf16(w + (n + r) * K + k);
    for (int m = 0; m < MR; ++m) {
      __m256 xv = _mm256_loadu_ps(x + (m0 + m) * K + k);
      for (int r = 0; r < R; ++r) acc[r][m] = _mm256_fmadd_ps(wv[r], xv, acc[r][m]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MR; ++m) {
      float s = hsum(acc[r][m]);
      for (int64_t k = K8; k < K; ++k) s += bf16_to_float(w[(n + r) * K + k]) * x[(m0 + m) * K + k];
      y[(m0 + m) * N + n + r] = s;
    }
}

template <int R>
void rows(const float* x, const uint16_t* w, float* y, int64_t M, int64_t K, int64_t N,
          int64_t n) {
  constexpr int MAXM = R == 2 ? 6 : 12;  // accumulators + weights + one x in 16 registers
  for (int64_t m0 = 0; m0 < M; m0 += MAXM) {
    switch (std::min<int64_t>(M - m0, MAXM)) {
#define CASE(c) case c: if constexpr (c <= MAXM) block<R, c>(x, w, y, K, N, n, m0); break;
      CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6)
      CASE(7) CASE(8) CASE(9) CASE(10) CASE(11) CASE(12)
#undef CASE
    }
  }
}

}  // namespace

// x: (M, K) fp32 contiguous; weight: (N, K) bf16 contiguous; returns (M, N) fp32
at::Tensor bf16_linear(const at::Tensor& x, const at::Tensor& weight) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(), "x: (M, K) fp32");
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kBFloat16 && weight.is_contiguous(),
              "weight: (N, K) bf16");
  TORCH_CHECK(x.size(1) == weight.size(1), "x and weight disagree on K");
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  auto y = at::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  const auto* wp = reinterpret_cast<const uint16_t*>(weight.data_ptr<at::BFloat16>());
  float* yp = y.data_ptr<float>();
  const bool pairs = M <= 6;
  const int64_t step = pairs ? 2 : 1, blocks = N / step;
  at::parallel_for(0, blocks, 16, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      if (pairs) rows<2>(xp, wp, yp, M, K, N, b * 2);
      else rows<1>(xp, wp, yp, M, K, N, b);
    }
  });
  if (pairs && N % 2) rows<1>(xp, wp, yp, M, K, N, N - 1);
  return y;
}

TORCH_LIBRARY(specbench, m) {
  m.def("bf16_linear(Tensor x, Tensor weight) -> Tensor");
}

TORCH_LIBRARY_IMPL(specbench, CPU, m) {
  m.impl("bf16_linear", &bf16_linear);
}
