// What specbench's CPU kernels share (bf16_gemm.cpp, bf16_dot.cpp, int4_decode.cpp): bf16
// widening, horizontal sums, argument checks, and the two loops every row kernel runs: blocks
// of weight rows in parallel, and each block over the rows of x a few at a time with the row
// count a compile-time constant (so a block's accumulators live in registers).
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace specbench {

// one bf16 value (its 16 bits) as fp32
inline float bf16_to_float(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

// the sum of 8 fp32 lanes, always in the same order
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// x: (M, K) of x_type, contiguous; weight: (N, K) bf16, contiguous
inline void check_linear(const at::Tensor& x, at::ScalarType x_type, const at::Tensor& weight) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == x_type && x.is_contiguous(), "x: (M, K) ",
              x_type == at::kBFloat16 ? "bf16" : "fp32", ", contiguous");
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kBFloat16 && weight.is_contiguous(),
              "weight: (N, K) bf16, contiguous");
  TORCH_CHECK(x.size(1) == weight.size(1), "x and weight disagree on K");
}

template <int V>
using Int = std::integral_constant<int, V>;

// block(Int<MR>{}, m0) for the M rows of x in blocks of at most MAXM (<= 8) rows from m0
template <int MAXM, class Block>
inline void for_x_rows(int64_t M, Block&& block) {
  static_assert(MAXM >= 1 && MAXM <= 8, "for_x_rows: 1..8 rows of x per block");
  for (int64_t m0 = 0; m0 < M; m0 += MAXM) {
    switch (std::min<int64_t>(M - m0, MAXM)) {
#define SPECBENCH_ROWS(c) \
  case c:                 \
    if constexpr (c <= MAXM) block(Int<c>{}, m0); \
    break;
      SPECBENCH_ROWS(1) SPECBENCH_ROWS(2) SPECBENCH_ROWS(3) SPECBENCH_ROWS(4)
      SPECBENCH_ROWS(5) SPECBENCH_ROWS(6) SPECBENCH_ROWS(7) SPECBENCH_ROWS(8)
#undef SPECBENCH_ROWS
    }
  }
}

// rows(n, Int<R>{}) for the N weight rows in blocks of R from n, in parallel, then each row
// left over (N % R) with Int<1>
template <int R, class Rows>
inline void for_weight_rows(int64_t N, Rows&& rows) {
  const int64_t blocks = N / R;
  at::parallel_for(0, blocks, 16, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) rows(b * R, Int<R>{});
  });
  for (int64_t n = blocks * R; n < N; ++n) rows(n, Int<1>{});
}

}  // namespace specbench
