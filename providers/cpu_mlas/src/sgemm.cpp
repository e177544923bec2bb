// The float32 GEMM driver: variant choice, operand packing and the tiling over threads.
#include "sgemm.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cpu_features.h"
#include "conv_pack_impl.h"
#include "dwconv.h"
#include "parallel.h"

namespace onnxplex::mlas {

namespace {

size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }
size_t ceil_div(size_t x, size_t m) { return (x + m - 1) / m; }

// Rows of A per task at most (a multiple of kSgemmMr): the task's A block (kMaxTaskRows x
// kSgemmKc floats, 240 KiB) stays in L2 while the task walks its B panels.
constexpr size_t kMaxTaskRows = 240;
// The same when A is prepacked and B packed per task: 1020 x 256 floats (1 MiB, half an L2).
constexpr size_t kMaxTaskRowsPackedA = 1020;
// B is read in place (not packed) for GEMMs of at most this many rows. Measured at one thread
// on an AVX-512 machine: with the AVX-512 kernel reading in place was 3-11% faster up to 512
// rows (attention's 128 x 128 x 64, 1x1 convs with 96-256 output channels, 512^3); with the
// AVX2 kernel packing stayed faster past 48 rows (512^3: 99 against 78 GFLOP/s).
constexpr size_t kDirectBMaxRows = 48;
constexpr size_t kDirectBMaxRowsAvx512 = 512;
// Columns of B per task at most (a multiple of kSgemmNr).
constexpr size_t kMaxTaskCols = 512;
// Tasks per thread wanted: a late thread then costs a fraction of the call.
constexpr size_t kTasksPerThread = 3;
// A task's B panels up to this many bytes are read from L2 by each A panel in turn (C's rows
// written whole); past it each B panel is kept in L1 and meets every A panel (C written 32
// columns at a time). The short-K 1x1 convs of a ResNet bottleneck's expansion (K 64 or 128,
// with the residual Z read alongside C) ran 3-6% faster in alternating runs with the bound at
// 256 KiB instead of 32.
constexpr size_t kBPanelsInL2Bytes = 256u << 10;
// Tasks per thread from which their count need not be a multiple of the threads.
constexpr size_t kEvenTasksPerThread = 8;

float* aligned_floats(size_t count) {
  void* p = std::aligned_alloc(64, round_up(std::max<size_t>(count, 1) * sizeof(float), 64));
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<float*>(p);
}

// A per-thread scratch buffer (packed blocks of the operand that is not prepacked).
class Scratch {
 public:
  float* get(size_t count) {
    if (count > size_) {
      data_.reset(aligned_floats(count));
      size_ = count;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<float[], void (*)(void*)> data_{nullptr, std::free};
  size_t size_ = 0;
};

// rows [r0, r0 + nr) x k [k0, k0 + kc) of A into [kc][kSgemmMr] (rows past nr zero).
void pack_a_panel(const MatrixView& a, size_t r0, size_t nr, size_t k0, size_t kc, float* dst) {
  if (nr < kSgemmMr) std::memset(dst, 0, kc * kSgemmMr * sizeof(float));
  for (size_t r = 0; r < nr; ++r) {
    const float* src = a.data + static_cast<std::ptrdiff_t>(r0 + r) * a.rs +
                       static_cast<std::ptrdiff_t>(k0) * a.cs;
    if (a.cs == 1) {
      for (size_t k = 0; k < kc; ++k) dst[k * kSgemmMr + r] = src[k];
    } else {
      for (size_t k = 0; k < kc; ++k) dst[k * kSgemmMr + r] = src[static_cast<std::ptrdiff_t>(k) * a.cs];
    }
  }
}

// k [k0, k0 + kc) x columns [c0, c0 + nc) of B into [kc][kSgemmNr] (columns past nc zero).
void pack_b_panel(const MatrixView& b, size_t k0, size_t kc, size_t c0, size_t nc, float* dst) {
  if (b.rs == 1 && b.cs != 1) {
    // A transposed B (its columns are contiguous): the panel is the transpose of nc rows of
    // kc floats, in register tiles. (Element by element, every k read a float from each of
    // the panel's columns: ~3.5 ns per element on a 1024 x 1024 weight; in 16 x 16 blocks
    // through a stack tile, still ~1.7 ms per 1024 x 1024.)
    if (nc < kSgemmNr) std::memset(dst, 0, kc * kSgemmNr * sizeof(float));
    transpose_f32(b.data + static_cast<std::ptrdiff_t>(c0) * b.cs + static_cast<std::ptrdiff_t>(k0),
                  nc, kc, static_cast<size_t>(b.cs), dst, kSgemmNr, false, -__builtin_inff(),
                  __builtin_inff());
    return;
  }
  for (size_t k = 0; k < kc; ++k) {
    const float* src = b.data + static_cast<std::ptrdiff_t>(k0 + k) * b.rs +
                       static_cast<std::ptrdiff_t>(c0) * b.cs;
    float* d = dst + k * kSgemmNr;
    if (b.cs == 1) {
      std::memcpy(d, src, nc * sizeof(float));
    } else {
      for (size_t j = 0; j < nc; ++j) d[j] = src[static_cast<std::ptrdiff_t>(j) * b.cs];
    }
    if (nc < kSgemmNr) std::memset(d + nc, 0, (kSgemmNr - nc) * sizeof(float));
  }
}

using TileFn = void (*)(const SgemmTile&);

TileFn tile_fn(SgemmIsa isa) {
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
  if (isa == SgemmIsa::kAvx512) return sgemm_tile_avx512;
  if (isa == SgemmIsa::kAvx2) return sgemm_tile_avx2;
#endif
  (void)isa;
  return sgemm_tile_scalar;
}

bool isa_available(SgemmIsa isa) {
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
  if (isa == SgemmIsa::kAvx512) return cpu_features().avx512f;
  if (isa == SgemmIsa::kAvx2) return cpu_features().avx2;
#endif
  return isa == SgemmIsa::kScalar;
}

}  // namespace

const char* sgemm_isa_name(SgemmIsa isa) {
  switch (isa) {
    case SgemmIsa::kAvx512: return "avx512";
    case SgemmIsa::kAvx2: return "avx2";
    default: return "scalar";
  }
}

SgemmIsa sgemm_parse_isa(const std::string& name) {
  SgemmIsa isa;
  if (name == "scalar") {
    isa = SgemmIsa::kScalar;
  } else if (name == "avx2") {
    isa = SgemmIsa::kAvx2;
  } else if (name == "avx512") {
    isa = SgemmIsa::kAvx512;
  } else {
    throw std::invalid_argument("unknown sgemm variant '" + name +
                                "' (expected scalar, avx2 or avx512)");
  }
  if (!isa_available(isa)) {
    throw std::invalid_argument("sgemm variant '" + name + "' is not available on this CPU/build");
  }
  return isa;
}

SgemmIsa sgemm_best_isa() {
  static const SgemmIsa best = [] {
    if (const char* forced = std::getenv("ONNXPLEX_MLAS_SGEMM_ISA")) {
      try {
        return sgemm_parse_isa(forced);
      } catch (const std::invalid_argument&) {
        // An unavailable request falls through to the best available variant.
      }
    }
    for (SgemmIsa isa : {SgemmIsa::kAvx512, SgemmIsa::kAvx2}) {
      if (isa_available(isa)) return isa;
    }
    return SgemmIsa::kScalar;
  }();
  return best;
}

const float* SgemmPacked::panel(size_t p) const {
  return data.get() + p * k * (is_a ? kSgemmMr : kSgemmNr);
}

namespace {

// A constant operand packed whole: `outer` rows (A) or columns (B) in panels of `width`.
std::shared_ptr<SgemmPacked> pack_whole(const MatrixView& x, bool is_a, size_t rows,
                                        size_t cols, size_t threads) {
  auto out = std::make_shared<SgemmPacked>();
  out->is_a = is_a;
  out->rows = rows;
  out->cols = cols;
  out->k = is_a ? cols : rows;
  const size_t outer = is_a ? rows : cols, width = is_a ? kSgemmMr : kSgemmNr;
  const size_t panels = ceil_div(outer, width);
  out->data = {aligned_floats(panels * out->k * width), std::free};
  // Panels are independent: on the session's threads (a weight's first touch of its packed
  // pages and, for a transposed B, the transposition are most of a session's packing time).
  parallel_for(panels, threads, [&](size_t p) {
    float* dst = out->data.get() + p * out->k * width;
    const size_t used = std::min(width, outer - p * width);
    if (is_a) {
      pack_a_panel(x, p * width, used, 0, out->k, dst);
    } else {
      pack_b_panel(x, 0, out->k, p * width, used, dst);
    }
  });
  return out;
}

}  // namespace

std::shared_ptr<SgemmPacked> sgemm_pack_a(const MatrixView& a, size_t m, size_t k,
                                          size_t threads) {
  return pack_whole(a, true, m, k, threads);
}

std::shared_ptr<SgemmPacked> sgemm_pack_b(const MatrixView& b, size_t k, size_t n,
                                          size_t threads) {
  return pack_whole(b, false, k, n, threads);
}

void MatrixSource::pack(size_t k0, size_t kc, size_t c0, size_t nc, float* dst) const {
  if (b_.cs != 1) {  // a transposed B: panel by panel (its columns are the contiguous axis)
    for (size_t p = 0; p * kSgemmNr < nc; ++p) {
      pack_b_panel(b_, k0, kc, c0 + p * kSgemmNr, std::min(kSgemmNr, nc - p * kSgemmNr),
                   dst + p * kc * kSgemmNr);
    }
    return;
  }
  for (size_t k = 0; k < kc; ++k) {
    const float* src = b_.data + static_cast<std::ptrdiff_t>(k0 + k) * b_.rs +
                       static_cast<std::ptrdiff_t>(c0);
    for (size_t p = 0; p * kSgemmNr < nc; ++p) {
      float* d = dst + (p * kc + k) * kSgemmNr;
      const size_t w = std::min(kSgemmNr, nc - p * kSgemmNr);
      std::memcpy(d, src + p * kSgemmNr, w * sizeof(float));
      if (w < kSgemmNr) std::memset(d + w, 0, (kSgemmNr - w) * sizeof(float));
    }
  }
}

void Conv2dSource::pack(size_t k0, size_t kc, size_t c0, size_t nc, float* dst) const {
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
  if (isa_ == SgemmIsa::kAvx512) return conv2d_pack_avx512(x_, g_, k0, kc, c0, nc, dst);
  if (isa_ == SgemmIsa::kAvx2) return conv2d_pack_avx2(x_, g_, k0, kc, c0, nc, dst);
#endif
  detail::conv2d_pack(x_, g_, k0, kc, c0, nc, dst);
}

#if defined(__SSE2__)
namespace {

// A 16 x 16 byte transpose: row c of the result, (rows[0][c], ..., rows[15][c]), at
// dst + c * stride (SSE2 unpacks of bytes, then 2-, 4- and 8-byte units).
inline void transpose16x16_u8(const uint8_t* const* rows, uint8_t* dst, size_t stride) {
  __m128i a[16], b[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i]));
  // b[8h + p]: rows 2p, 2p+1 interleaved, columns 8h..8h+7 (2-byte units)
  for (int p = 0; p < 8; ++p) {
    b[p] = _mm_unpacklo_epi8(a[2 * p], a[2 * p + 1]);
    b[8 + p] = _mm_unpackhi_epi8(a[2 * p], a[2 * p + 1]);
  }
  // a[8h + 2q + k]: rows 4q..4q+3, columns 8h + 4k .. 8h + 4k + 3 (4-byte units)
  for (int h = 0; h < 2; ++h)
    for (int q = 0; q < 4; ++q) {
      a[8 * h + 2 * q] = _mm_unpacklo_epi16(b[8 * h + 2 * q], b[8 * h + 2 * q + 1]);
      a[8 * h + 2 * q + 1] = _mm_unpackhi_epi16(b[8 * h + 2 * q], b[8 * h + 2 * q + 1]);
    }
  // b[8h + 4k + 2o + m]: rows 8o..8o+7, columns 8h + 4k + 2m .. +1 (8-byte units)
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 2; ++k)
      for (int o = 0; o < 2; ++o) {
        const __m128i x = a[8 * h + 2 * (2 * o) + k], y = a[8 * h + 2 * (2 * o + 1) + k];
        b[8 * h + 4 * k + 2 * o] = _mm_unpacklo_epi32(x, y);
        b[8 * h + 4 * k + 2 * o + 1] = _mm_unpackhi_epi32(x, y);
      }
  // column c = 8h + 4k + 2m + s: rows 0..7 from b[8h + 4k + m] (o = 0), rows 8..15 from
  // b[8h + 4k + 2 + m] (o = 1), its 8-byte half s
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 2; ++k)
      for (int m = 0; m < 2; ++m) {
        const __m128i x = b[8 * h + 4 * k + m], y = b[8 * h + 4 * k + 2 + m];
        const int c = 8 * h + 4 * k + 2 * m;
        auto* out = reinterpret_cast<__m128i*>(dst + c * stride);
        _mm_storeu_si128(out, _mm_unpacklo_epi64(x, y));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (c + 1) * stride),
                         _mm_unpackhi_epi64(x, y));
      }
}

}  // namespace
#endif

size_t SgemmNBits4::nbytes() const {
  const size_t panels = ceil_div(n, kSgemmNr);
  return panels * ((k + 1) / 2 * kSgemmNr + 2 * k_blocks * kSgemmNr * sizeof(float));
}

std::shared_ptr<SgemmNBits4> sgemm_pack_b_nbits4(const uint8_t* q_in, const float* scales,
                                                 const float* zero_points, size_t k, size_t n,
                                                 size_t block) {
  auto out = std::make_shared<SgemmNBits4>();
  out->k = k;
  out->n = n;
  out->block = block;
  out->k_blocks = ceil_div(k, block);
  const size_t panels = ceil_div(n, kSgemmNr), kb = out->k_blocks;
  const size_t pairs = (k + 1) / 2, row_bytes = kb * (block / 2);  // a column's bytes
  void* q = std::aligned_alloc(64, round_up(std::max<size_t>(panels * pairs * kSgemmNr, 1), 64));
  if (q == nullptr) throw std::bad_alloc();
  out->q = {static_cast<uint8_t*>(q), std::free};
  out->scale = {aligned_floats(panels * kb * kSgemmNr), std::free};
  out->zp = {aligned_floats(panels * kb * kSgemmNr), std::free};
  // (zeros: the columns past N of the last panel)
  std::memset(out->q.get(), 0, panels * pairs * kSgemmNr);
  std::memset(out->scale.get(), 0, panels * kb * kSgemmNr * sizeof(float));
  std::memset(out->zp.get(), 0, panels * kb * kSgemmNr * sizeof(float));
  for (size_t p = 0; p < panels; ++p) {
    const size_t cols = std::min(kSgemmNr, n - p * kSgemmNr);
    uint8_t* dst = out->q.get() + p * pairs * kSgemmNr;
    // the byte transpose: [cols][pairs] (a column's bytes) -> [pairs][kSgemmNr], 16 x 16
    // bytes at a time in a full panel, then (a partial panel, the last pairs) in runs of 64
    // pairs so every column's source line is read once
    size_t done = 0;
#if defined(__SSE2__)
    if (cols == kSgemmNr) {
      for (; done + 16 <= pairs; done += 16) {
        for (size_t c0 = 0; c0 < kSgemmNr; c0 += 16) {
          const uint8_t* rows[16];
          for (size_t i = 0; i < 16; ++i) {
            rows[i] = q_in + (p * kSgemmNr + c0 + i) * row_bytes + done;
          }
          transpose16x16_u8(rows, dst + done * kSgemmNr + c0, kSgemmNr);
        }
      }
    }
#endif
    for (size_t r0 = done; r0 < pairs; r0 += 64) {
      const size_t r1 = std::min(pairs, r0 + 64);
      for (size_t col = 0; col < cols; ++col) {
        const uint8_t* src = q_in + (p * kSgemmNr + col) * row_bytes;
        for (size_t r = r0; r < r1; ++r) dst[r * kSgemmNr + col] = src[r];
      }
    }
    for (size_t col = 0; col < cols; ++col) {
      const size_t j = p * kSgemmNr + col;
      for (size_t b = 0; b < kb; ++b) {
        out->scale[(p * kb + b) * kSgemmNr + col] = scales[j * kb + b];
        out->zp[(p * kb + b) * kSgemmNr + col] = zero_points[j * kb + b];
      }
    }
  }
  return out;
}

void nbits4_panel_scalar(const SgemmNBits4& b, size_t panel, size_t k0, size_t kc, float* dst) {
  nbits4_runs(b, panel, k0, kc, dst, [](const float* sc, const float* zp, const uint8_t* q,
                                        float* d, size_t rows) {
    for (size_t r = 0; r < rows; r += 2, q += kSgemmNr, d += 2 * kSgemmNr) {
      for (size_t i = 0; i < kSgemmNr; ++i) {
        d[i] = (static_cast<float>(q[i] & 0xF) - zp[i]) * sc[i];
        if (r + 1 < rows) d[kSgemmNr + i] = (static_cast<float>(q[i] >> 4) - zp[i]) * sc[i];
      }
    }
  });
}

void NBits4Source::pack(size_t k0, size_t kc, size_t c0, size_t nc, float* dst) const {
  auto panel_fn = nbits4_panel_scalar;
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
  if (isa_ == SgemmIsa::kAvx512) panel_fn = nbits4_panel_avx512;
  if (isa_ == SgemmIsa::kAvx2) panel_fn = nbits4_panel_avx2;
#endif
  for (size_t p = 0; p * kSgemmNr < nc; ++p) {
    panel_fn(b_, c0 / kSgemmNr + p, k0, kc, dst + p * kc * kSgemmNr);
  }
}

namespace {

// Every column task reads all of A's rows it covers and every row task all of B's columns:
// a grid of tasks reads A col_tasks times and B row_tasks times. Past this many bytes of
// reading, or when the panels do not split evenly over the tasks, the grid is chosen by a
// cost model rather than "a few tasks per thread" (a 14 x 14 conv's 196 x 2304 col matrix,
// read by 6 column tasks, scaled 1.47x on two threads; by 2, 1.8x).
constexpr double kRereadBudgetBytes = 8e6;
// The model's machine: per thread, bytes a second from L3 and multiply-adds a second.
constexpr double kReadBytesPerSecond = 20e9, kMacsPerSecond = 50e9;

// The grid of at least `threads` tasks (a multiple of them, each within the base grid's size
// limits) that minimizes the time to read its operands plus its compute, the compute
// stretched by the largest task's excess over an even share.
void choose_task_grid(size_t m, size_t n, size_t k, size_t threads, size_t base_rows,
                      size_t base_cols, size_t& row_tasks, size_t& col_tasks) {
  const double a_bytes = 4.0 * m * k, b_bytes = 4.0 * n * k;
  auto reread = [&](size_t rt, size_t ct) { return ct * a_bytes + rt * b_bytes; };
  const size_t row_panels = ceil_div(m, kSgemmMr), col_panels = ceil_div(n, kSgemmNr);
  // Much uneven tasks leave a thread idle at the end: a 1x1 conv's 8 column panels (196 x
  // 1024 x 256) as 6 tasks of 1 or 2 ran at 162 GFLOP/s on two threads; as 2 tasks of 4, 215.
  // A slight unevenness is no reason (a weight-left conv's 98 panels as 8 tasks of 12 or 13:
  // the model's 14 narrower tasks took twice as long).
  auto excess = [](size_t panels, size_t tasks) {  // the largest task over an even share
    return double(ceil_div(panels, tasks) * tasks) / double(panels);
  };
  const bool even = excess(row_panels, row_tasks) * excess(col_panels, col_tasks) <= 1.25;
  if (even && reread(row_tasks, col_tasks) <= kRereadBudgetBytes) return;
  const double macs = double(m) * n * k;
  auto cost = [&](size_t rt, size_t ct) {
    // the largest task's share of the panels, rows and columns
    const double big = double(ceil_div(row_panels, rt)) / row_panels *
                       double(ceil_div(col_panels, ct)) / col_panels;
    const double rounds = double(ceil_div(rt * ct, threads));
    return reread(rt, ct) / (kReadBytesPerSecond * threads) +
           macs / kMacsPerSecond * big * rounds;
  };
  double best = cost(row_tasks, col_tasks);
  for (size_t rt = base_rows; rt <= std::min(row_panels, 4 * threads * base_rows); ++rt) {
    for (size_t ct = base_cols; ct <= std::min(col_panels, 4 * threads * base_cols); ++ct) {
      if (rt * ct < threads || (rt * ct) % threads != 0) continue;
      const double c = cost(rt, ct);
      if (c < best) {
        best = c;
        row_tasks = rt;
        col_tasks = ct;
      }
    }
  }
}

void sgemm_impl(const MatrixView& a, const SgemmPacked* pa, const BSource* b,
                const SgemmPacked* pb, size_t m, size_t n, size_t k, float* c, size_t ldc,
                const SgemmEpilogue& ep, size_t threads, SgemmIsa isa,
                const ASource* as = nullptr) {
  if (m == 0 || n == 0) return;
  const float* row_bias = ep.axis == BiasAxis::kRow ? ep.bias : nullptr;
  const float* col_bias = ep.axis == BiasAxis::kCol ? ep.bias : nullptr;
  if (k == 0) {  // an empty sum: the epilogue alone
    for (size_t i = 0; i < m; ++i) {
      for (size_t j = 0; j < n; ++j) {
        const float add = ep.z != nullptr ? ep.z[i * ep.ldz + j]
                          : ep.accumulate ? c[i * ldc + j] : 0.0f;
        float v = add + (row_bias ? row_bias[i] : 0.0f) +
                  (col_bias ? col_bias[j] : 0.0f);
        c[i * ldc + j] = std::min(std::max(v, ep.lo), ep.hi);
      }
    }
    post_act_f32(ep.act, c, m, n, ldc);
    return;
  }
  const TileFn tile = tile_fn(isa);
  if (threads == 0) threads = std::max<size_t>(1, std::thread::hardware_concurrency());

  // Below ~1M multiply-adds, the hand-over to other threads costs more than it saves, unless
  // B alone is 1 MB or more: a row or two against it is a read of B from memory, which two
  // threads do at nearly twice the rate (a decoder step's 512 x 1376 GEMV: 80 us on one).
  if (m * n * k < (size_t{1} << 20) && k * n * sizeof(float) < (size_t{1} << 20)) threads = 1;
  // Tasks: all rows up to a limit (a B panel packed in a task serves all of its rows: with A
  // prepacked, the limit is what keeps the A block in L2; A packed per task wants fewer) and
  // at most kMaxTaskCols columns; then columns, then rows, cut until every thread gets a few
  // tasks, and the count rounded up to a multiple of the threads. Tasks split the row and
  // column panels evenly (a ResNet conv's 98 column panels as 7 tasks of 14 left one of two
  // threads a task behind the other).
  const size_t row_panels = ceil_div(m, kSgemmMr), col_panels = ceil_div(n, kSgemmNr);
  const size_t max_rows = pa != nullptr && pb == nullptr ? kMaxTaskRowsPackedA : kMaxTaskRows;
  size_t row_tasks = ceil_div(m, max_rows), col_tasks = ceil_div(n, kMaxTaskCols);
  // (An A from a source is written anew by every column task: on one thread, where there is
  // nothing to balance, one task writes it once.)
  const size_t want = as != nullptr && threads == 1 ? 1 : kTasksPerThread * threads;
  while (row_tasks * col_tasks < want && col_tasks < col_panels) ++col_tasks;
  while (row_tasks * col_tasks < want && (row_tasks + 1) * 4 <= row_panels) ++row_tasks;
  // A count of tasks that is no multiple of the threads leaves a thread a task behind; past
  // a few rounds of tasks that task is a small part of the call, and splitting columns
  // instead has every A panel read by two tasks and C's rows written in halves by two threads
  // (a 1x1 conv 16 -> 64 on 160 x 160: 107 row tasks made 214 of 32 columns, and two threads
  // ran slower than one).
  while (threads > 1 && (row_tasks * col_tasks) % threads != 0 && col_tasks < col_panels &&
         row_tasks * col_tasks < kEvenTasksPerThread * threads) {
    ++col_tasks;
  }
  if (threads > 1) {
    choose_task_grid(m, n, k, threads, ceil_div(m, max_rows), ceil_div(n, kMaxTaskCols),
                     row_tasks, col_tasks);
  }

  // A row-major A (contiguous along K, rows apart by a non-negative stride) is read in place.
  // (A tile's lda 0 means "packed": a single row with stride 0, as numpy gives x[None], reads
  // with lda 1.)
  // An A from a source is written into rows kc + 16 floats apart and read like that.
  const bool direct_a = as != nullptr || (pa == nullptr && a.cs == 1 && (a.rs > 0 || m == 1));
  const size_t direct_lda = as == nullptr && a.rs > 0 ? static_cast<size_t>(a.rs) : 1;
  // Rows a multiple of 4 KiB apart would all map to one L1 set, more of them than its ways,
  // once a tile has more than a few: each task copies its block of A to rows kc + 16 floats
  // apart first (K = 3072, a transformer's second FFN GEMM, read in place: 142 GFLOP/s on two
  // threads, against ~190 for its first).
  const bool copy_a = as == nullptr && direct_a && a.rs % 1024 == 0 && m > 4;
  // A row-major B is read in place unless many rows would share its packed panels (packing
  // then pays for itself) or its rows are a multiple of 4 KiB apart (they would alias in L1).
  const MatrixView* bm = b != nullptr ? b->matrix() : nullptr;
  const size_t direct_b_rows = isa == SgemmIsa::kAvx512 ? kDirectBMaxRowsAvx512 : kDirectBMaxRows;
  const bool direct_b = bm != nullptr && bm->cs == 1 && bm->rs > 0 && m <= direct_b_rows &&
                        bm->rs % 1024 != 0;

  // A row or two against a prepacked B: each B panel is one contiguous run over all of K, read
  // once; blocking K would make it jumps of kc rows, a panel apart, that the hardware
  // prefetcher restarts on (a classifier's 1 x 1280 x 1000 GEMV streams its 5 MB from memory).
  const size_t k_step = as != nullptr && pb != nullptr         ? as->block_limit()
                        : pb != nullptr && m <= 2 && (direct_a || pa != nullptr) ? k
                                                                                 : kSgemmKc;

  auto run_task = [&](size_t t) {
    static thread_local Scratch a_scratch, b_scratch;
    const size_t rt = t / col_tasks, ct = t % col_tasks;
    const size_t m0 = row_panels * rt / row_tasks * kSgemmMr;
    const size_t m1 = std::min(m, row_panels * (rt + 1) / row_tasks * kSgemmMr);
    const size_t n0 = col_panels * ct / col_tasks * kSgemmNr;
    const size_t n1 = std::min(n, col_panels * (ct + 1) / col_tasks * kSgemmNr);
    if (m0 >= m1 || n0 >= n1) return;
    const size_t a_panels = ceil_div(m1 - m0, kSgemmMr);
    static thread_local std::vector<DirectRows> a_tiles;
    // With a source: per A panel, whether a k block has written its C rows yet (a block whose
    // rows are all zeros, a conv's taps in the padding, is skipped; its C then has no sum to
    // add to, or only the epilogue to get at the last block)
    static thread_local std::vector<char> a_written, a_zero;
    if (as != nullptr) a_written.assign(a_panels, 0);
    for (size_t k0 = 0, kc = 0; k0 < k; k0 += kc) {
      kc = std::min(k_step, k - k0);
      const float* a_block = nullptr;  // raw A: this task's rows of the k block, packed
      size_t lda = direct_lda;
      if (as != nullptr) {
        // Per A panel: its rows in place when the source has them as a strided run, else
        // written into this task's buffer.
        kc = std::max<size_t>(1, std::min(kc, as->block(k0, kc)));
        lda = kc + 16;
        float* buf = a_scratch.get((m1 - m0) * lda);
        a_tiles.resize(a_panels);
        a_zero.assign(a_panels, 0);
        for (size_t p = 0; p < a_panels; ++p) {
          const size_t r0 = m0 + p * kSgemmMr, count = std::min(kSgemmMr, m1 - r0);
          if (as->zero(r0, count, k0, kc)) {
            a_zero[p] = 1;
            a_tiles[p] = DirectRows{buf, lda};   // (a k count of 0: nothing read)
            continue;
          }
          a_tiles[p] = as->direct(r0, count, k0, kc);
          if (a_tiles[p].a == nullptr) {
            float* dst = buf + p * kSgemmMr * lda;
            as->rows(r0, r0 + count, k0, kc, dst, lda);
            a_tiles[p] = DirectRows{dst, lda};
          }
        }
      } else if (copy_a) {
        lda = kc + 16;
        float* buf = a_scratch.get((m1 - m0) * lda);
        for (size_t r = m0; r < m1; ++r) {
          std::memcpy(buf + (r - m0) * lda, a.data + static_cast<std::ptrdiff_t>(r) * a.rs + k0,
                      kc * sizeof(float));
        }
        a_block = buf;
      } else if (direct_a) {
        a_block = a.data + static_cast<std::ptrdiff_t>(m0) * a.rs + k0;
      } else if (pa == nullptr) {
        float* buf = a_scratch.get(a_panels * kc * kSgemmMr);
        for (size_t p = 0; p < a_panels; ++p) {
          const size_t r0 = m0 + p * kSgemmMr;
          pack_a_panel(a, r0, std::min(kSgemmMr, m1 - r0), k0, kc, buf + p * kc * kSgemmMr);
        }
        a_block = buf;
      }
      float* b_block = nullptr;  // B not prepacked: this task's panels of the k block
      if (pb == nullptr && !direct_b) {
        b_block = b_scratch.get(ceil_div(n1 - n0, kSgemmNr) * kc * kSgemmNr);
        b->pack(k0, kc, n0, n1 - n0, b_block);
      }
      const size_t b_panels = ceil_div(n1 - n0, kSgemmNr);
      auto run_tile = [&](size_t p, size_t q) {  // A panel p x B panel q of this task
        const size_t i = m0 + p * kSgemmMr, j = n0 + q * kSgemmNr;
        SgemmTile tl;
        tl.lda = as != nullptr ? a_tiles[p].lda : direct_a ? lda : 0;
        if (as != nullptr) {
          tl.segs = a_tiles[p].segs;
          tl.seg_skip = a_tiles[p].seg_skip;
        }
        tl.a = pa != nullptr ? pa->panel(i / kSgemmMr) + k0 * kSgemmMr
               : as != nullptr ? a_tiles[p].a
               : direct_a    ? a_block + p * kSgemmMr * lda
                             : a_block + p * kc * kSgemmMr;
        tl.b = pb != nullptr ? pb->panel(j / kSgemmNr) + k0 * kSgemmNr
               : direct_b    ? bm->data + static_cast<std::ptrdiff_t>(k0) * bm->rs +
                                   static_cast<std::ptrdiff_t>(j)
                             : b_block + q * kc * kSgemmNr;
        tl.ldb = direct_b ? static_cast<size_t>(bm->rs) : 0;
        tl.kc = kc;
        tl.rows = std::min(kSgemmMr, m1 - i);
        tl.cols = std::min(kSgemmNr, n1 - j);
        tl.c = c + i * ldc + j;
        tl.ldc = ldc;
        // (C's rows summed into before: by an earlier k block, of this panel when some were
        // skipped)
        const bool started = as != nullptr ? a_written[p] != 0 : k0 > 0;
        tl.last = k0 + kc == k;
        if (as != nullptr && a_zero[p]) {
          if (!tl.last) return;
          tl.kc = 0;   // the epilogue alone
          tl.segs = 1;
        }
        tl.accumulate = ep.accumulate || ep.z != nullptr || started;
        const bool from_z = !started && ep.z != nullptr;
        tl.addend = from_z ? ep.z + i * ep.ldz + j : tl.c;
        tl.ld_addend = from_z ? ep.ldz : ldc;
        tl.row_bias = row_bias ? row_bias + i : nullptr;
        tl.col_bias = col_bias ? col_bias + j : nullptr;
        tl.lo = ep.lo;
        tl.hi = ep.hi;
        tile(tl);
        if (tl.last && ep.act != PostAct::kNone) {   // while the tile is in L1
          post_act_f32(ep.act, tl.c, tl.rows, tl.cols, ldc);
        }
      };
      if (m1 - m0 <= kMaxTaskRows &&
          b_panels * kc * kSgemmNr * sizeof(float) > kBPanelsInL2Bytes) {
        // A block in L2 (at most 240 x kc): each B panel (32 x kc, L1) meets every A panel.
        for (size_t q = 0; q < b_panels; ++q) {
          for (size_t p = 0; p < a_panels; ++p) run_tile(p, q);
        }
      } else {
        // A tall block (a conv's weight), or the task's B panels fit in L2 (short K): each A
        // panel (12 x kc, L1) meets every B panel of the task (at most 16 x 32 x kc, L2), so
        // the weight leaves memory once per task and C (and Z) are written (read) a row
        // segment at a time.
        for (size_t p = 0; p < a_panels; ++p) {
          for (size_t q = 0; q < b_panels; ++q) run_tile(p, q);
        }
      }
      if (as != nullptr) {
        for (size_t p = 0; p < a_panels; ++p) a_written[p] |= static_cast<char>(!a_zero[p]);
      }
    }
  };
  parallel_for(row_tasks * col_tasks, threads, run_task);
}

}  // namespace

void sgemm(const MatrixView& a, const SgemmPacked* pa, const MatrixView& b,
           const SgemmPacked* pb, size_t m, size_t n, size_t k, float* c, size_t ldc,
           const SgemmEpilogue& ep, size_t threads, SgemmIsa isa) {
  const MatrixSource source(b);
  sgemm_impl(a, pa, pb != nullptr ? nullptr : &source, pb, m, n, k, c, ldc, ep, threads, isa);
}

void sgemm(const MatrixView& a, const SgemmPacked* pa, const BSource& b, size_t m, size_t n,
           size_t k, float* c, size_t ldc, const SgemmEpilogue& ep, size_t threads,
           SgemmIsa isa) {
  sgemm_impl(a, pa, &b, nullptr, m, n, k, c, ldc, ep, threads, isa);
}

void sgemm(const ASource& a, const SgemmPacked& pb, size_t m, size_t n, size_t k, float* c,
           size_t ldc, const SgemmEpilogue& ep, size_t threads, SgemmIsa isa) {
  sgemm_impl(MatrixView{}, nullptr, nullptr, &pb, m, n, k, c, ldc, ep, threads, isa, &a);
}

void conv2d_f32_transposed(const float* x, const Conv2dGeometry& g, const SgemmPacked& wt,
                           float* y, const SgemmEpilogue& ep, size_t threads, SgemmIsa isa) {
  const size_t l = g.oh * g.ow, k = g.c * g.kh * g.kw, cout = wt.cols;
  if (l == 0 || cout == 0) return;
  // col^T [l, k], row-major, so the GEMM reads it in place.
  // (uninitialized, 64-byte aligned: every element is written before it is read)
  const std::unique_ptr<float[], void (*)(void*)> colt(aligned_floats(l * k), std::free);
  if (g.pointwise()) {
    transpose_f32(x, g.c, l, l, colt.get(), k, false, -__builtin_inff(), __builtin_inff());
  } else {
    const auto h = static_cast<std::ptrdiff_t>(g.h), w = static_cast<std::ptrdiff_t>(g.w);
    for (size_t oy = 0; oy < g.oh; ++oy) {
      for (size_t ox = 0; ox < g.ow; ++ox) {
        float* row = colt.get() + (oy * g.ow + ox) * k;
        const std::ptrdiff_t y0 = static_cast<std::ptrdiff_t>(oy * g.sh) - g.pt;
        const std::ptrdiff_t x0 = static_cast<std::ptrdiff_t>(ox * g.sw) - g.pl;
        for (size_t c = 0; c < g.c; ++c) {
          const float* plane = x + c * g.h * g.w;
          for (size_t i = 0; i < g.kh; ++i) {
            const std::ptrdiff_t iy = y0 + static_cast<std::ptrdiff_t>(i * g.dh);
            for (size_t j = 0; j < g.kw; ++j) {
              const std::ptrdiff_t ix = x0 + static_cast<std::ptrdiff_t>(j * g.dw);
              *row++ = iy >= 0 && iy < h && ix >= 0 && ix < w ? plane[iy * w + ix] : 0.0f;
            }
          }
        }
      }
    }
  }
  // out^T [l, cout] with the bias per column; Z (y's values with `accumulate`) and the clamp
  // come with the transpose back, in the order of the direct path: conv + bias + Z, clamped.
  const std::unique_ptr<float[], void (*)(void*)> outt(aligned_floats(l * cout), std::free);
  SgemmEpilogue gemm_ep;
  gemm_ep.bias = ep.axis == BiasAxis::kRow ? ep.bias : nullptr;
  gemm_ep.axis = gemm_ep.bias != nullptr ? BiasAxis::kCol : BiasAxis::kNone;
  sgemm(MatrixView{colt.get(), static_cast<std::ptrdiff_t>(k), 1}, nullptr, MatrixView{}, &wt,
        l, cout, k, outt.get(), cout, gemm_ep, threads, isa);
  if (ep.z != nullptr) {  // y = Z first (cheap: this orientation serves small planes)
    for (size_t c = 0; c < cout; ++c) std::memcpy(y + c * l, ep.z + c * ep.ldz, l * sizeof(float));
  }
  transpose_f32(outt.get(), l, cout, cout, y, l, ep.accumulate || ep.z != nullptr, ep.lo, ep.hi);
  post_act_f32(ep.act, y, cout, l, l);
}

namespace {

// n floats from src to dst, and zeros: runs of a few floats (a stem conv's 3 channels times 3
// taps) inline, in 16-byte moves; a libc call costs more than such a copy.
inline void copy_run(float* dst, const float* src, size_t n) {
  if (n > 64) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  size_t i = 0;
  for (; i + 4 <= n; i += 4) std::memcpy(dst + i, src + i, 4 * sizeof(float));
  for (; i < n; ++i) dst[i] = src[i];
}

inline void zero_run(float* dst, size_t n) {
  if (n > 64) {
    std::memset(dst, 0, n * sizeof(float));
    return;
  }
  for (size_t i = 0; i < n; ++i) dst[i] = 0.0f;
}

// Kernel rows (kw * C floats) shorter than this are not read in place: k blocks that short
// would make the GEMM reload its C tiles every few multiply-adds.
constexpr size_t kNhwcDirectMinRun = 32;
// K per block of a channels-last conv at most: whole kernel rows up to this, so that a tile
// adds all of a 3x3 conv's K up to 128 channels in its registers (with blocks of one kernel
// row, at most kSgemmKc, it loaded and stored C twice more at 3x3: single 3x3 convs ran
// 0.5-9% slower, and a GEMM with K = 576 in 256-blocks 8% slower than in one).
constexpr size_t kNhwcKc = 1152;
// Bands of col rows at most this large, for the convs whose rows are not read in place.
constexpr size_t kNhwcBandBytes = 384u << 10;

// The NHWC im2col matrix of conv2d_nhwc_f32 (kh * kw * C a row) as an A source: rows of a k
// block read in place or written as the GEMM asks for them (into its per-thread buffer, in
// cache), never the whole matrix (a 14 x 14 x 256 3x3 conv's is 1.8 MB, written to memory and
// read back beside a 2.4 MB weight).
class NhwcConvSource final : public ASource {
 public:
  NhwcConvSource(const float* x, const Conv2dGeometry& g) : x_(x), g_(g) {}

  void rows(size_t m0, size_t m1, size_t k0, size_t kc, float* dst, size_t ld) const override {
    const Conv2dGeometry& g = g_;
    const size_t c = g.c, run = g.kw * c, k1 = k0 + kc;
    const auto h = static_cast<std::ptrdiff_t>(g.h), w = static_cast<std::ptrdiff_t>(g.w);
    const auto kw = static_cast<std::ptrdiff_t>(g.kw);
    const auto span = (kw - 1) * static_cast<std::ptrdiff_t>(g.dw) + 1;
    size_t oy = m0 / g.ow, ox = m0 % g.ow;
    for (size_t r = m0; r < m1; ++r, dst += ld) {
      const std::ptrdiff_t y0 = static_cast<std::ptrdiff_t>(oy * g.sh) - g.pt;
      const std::ptrdiff_t x0 = static_cast<std::ptrdiff_t>(ox * g.sw) - g.pl;
      const bool inside = g.dw == 1 && x0 >= 0 && x0 + span <= w;
      float* d = dst;
      for (size_t k = k0; k < k1;) {  // a kernel row's part of the block at a time
        const size_t i = k / run, within = k % run;
        const size_t n = std::min(k1, (i + 1) * run) - k;
        const std::ptrdiff_t iy = y0 + static_cast<std::ptrdiff_t>(i * g.dh);
        if (iy < 0 || iy >= h) {
          zero_run(d, n);
        } else if (inside) {  // the row's taps are one run of the input row
          copy_run(d, x_ + static_cast<size_t>(iy * w + x0) * c + within, n);
        } else {
          for (size_t t = within; t < within + n;) {  // tap by tap
            const size_t j = t / c, c0 = t % c, seg = std::min(c - c0, within + n - t);
            const std::ptrdiff_t ix = x0 + static_cast<std::ptrdiff_t>(j * g.dw);
            if (ix < 0 || ix >= w) {
              zero_run(d + (t - within), seg);
            } else {
              copy_run(d + (t - within), x_ + static_cast<size_t>(iy * w + ix) * c + c0, seg);
            }
            t += seg;
          }
        }
        d += n;
        k += n;
      }
      if (++ox == g.ow) ox = 0, ++oy;
    }
  }

  // Blocks end at kernel rows (a kernel row's taps are one run of the input row at dilation
  // 1): as many whole rows as fit (read in place as one run per row, all of K in the tile's
  // registers), else a longer row in near-equal parts (7 x 256 channels: 1792 in two of 896).
  size_t block(size_t k0, size_t limit) const override {
    const size_t run = g_.kw * g_.c;
    if (run < kNhwcDirectMinRun) return limit;
    if (g_.dw == 1 && k0 % run == 0 && run <= limit) return limit / run * run;
    const size_t left = run - k0 % run;
    return ceil_div(left, ceil_div(left, limit));
  }

  size_t block_limit() const override { return kNhwcKc; }

  // Every tap of the block in the padding for all count positions (a dilated conv's kernel
  // rows and columns beside a small image: DeepLab's rate-24 and -36 3x3 convs on a 20 x 20
  // map read only their middle tap).
  bool zero(size_t m0, size_t count, size_t k0, size_t kc) const override {
    const Conv2dGeometry& g = g_;
    const size_t run = g.kw * g.c;
    const auto h = static_cast<std::ptrdiff_t>(g.h), w = static_cast<std::ptrdiff_t>(g.w);
    const auto dw = static_cast<std::ptrdiff_t>(g.dw);
    size_t oy = m0 / g.ow, ox = m0 % g.ow;
    for (size_t r = 0; r < count; ++r) {
      const std::ptrdiff_t y0 = static_cast<std::ptrdiff_t>(oy * g.sh) - g.pt;
      const std::ptrdiff_t x0 = static_cast<std::ptrdiff_t>(ox * g.sw) - g.pl;
      for (size_t i = k0 / run; i * run < k0 + kc; ++i) {   // the block's kernel rows
        const std::ptrdiff_t iy = y0 + static_cast<std::ptrdiff_t>(i * g.dh);
        if (iy < 0 || iy >= h) continue;
        // the row's taps in the block, [j0, j1]; the first of them at or past column 0
        const auto j0 = static_cast<std::ptrdiff_t>((std::max(k0, i * run) - i * run) / g.c);
        const auto j1 = static_cast<std::ptrdiff_t>((std::min(k0 + kc, (i + 1) * run) - 1 -
                                                     i * run) / g.c);
        const std::ptrdiff_t j = x0 >= 0 ? j0 : std::max(j0, (-x0 + dw - 1) / dw);
        if (j <= j1 && x0 + j * dw < w) return false;
      }
      if (++ox == g.ow) ox = 0, ++oy;
    }
    return true;
  }

  // count output positions of one output row, all of whose taps in the block are inside the
  // input: rows sw * C floats apart in x, a kernel row's run dh input rows after the last.
  DirectRows direct(size_t m0, size_t count, size_t k0, size_t kc) const override {
    const Conv2dGeometry& g = g_;
    const size_t run = g.kw * g.c, within = k0 % run;
    const size_t oy = m0 / g.ow, ox = m0 % g.ow;
    if (ox + count > g.ow) return {};
    size_t segs = 1, len = kc;
    if (within + kc > run) {  // whole kernel rows
      if (within != 0 || kc % run != 0) return {};
      segs = kc / run;
      len = run;
    }
    const size_t j0 = within / g.c, j1 = (within + len - 1) / g.c;  // the block's taps
    if (g.dw != 1 && j0 != j1) return {};
    const std::ptrdiff_t iy = static_cast<std::ptrdiff_t>(oy * g.sh + (k0 / run) * g.dh) - g.pt;
    const auto h = static_cast<std::ptrdiff_t>(g.h);
    if (iy < 0 || iy + static_cast<std::ptrdiff_t>((segs - 1) * g.dh) >= h) return {};
    const std::ptrdiff_t x0 = static_cast<std::ptrdiff_t>(ox * g.sw) - g.pl;  // first position's
    const std::ptrdiff_t first = x0 + static_cast<std::ptrdiff_t>(j0 * g.dw);
    const std::ptrdiff_t last = x0 + static_cast<std::ptrdiff_t>((count - 1) * g.sw + j1 * g.dw);
    if (first < 0 || last >= static_cast<std::ptrdiff_t>(g.w)) return {};
    DirectRows d;
    d.a = x_ + (static_cast<size_t>(iy) * g.w + static_cast<size_t>(first)) * g.c + within % g.c;
    d.lda = g.sw * g.c;
    d.segs = segs;
    d.seg_skip = static_cast<std::ptrdiff_t>(g.dh * g.w * g.c) - static_cast<std::ptrdiff_t>(len);
    return d;
  }

 private:
  const float* x_;
  Conv2dGeometry g_;
};

}  // namespace

// From this many positions on, a pointwise conv with an input scale scales x's rows as the GEMM
// copies them (below, where the GEMM splits over output columns and copies every row once per
// column task, x is scaled into a buffer first): measured on EfficientNet-B0's 1x1 convs after
// its squeeze-excite gates, 56 x 56 and larger planes gained 25-38% over Mul then conv at two
// threads, 28 x 28 and smaller lost 10-20%.
constexpr size_t kScaledSourceMinRows = 2048;

// A [rows, k] matrix (rows ld apart) read with column j times scale[j]: a pointwise conv's
// input times a per-channel gate, never written back.
class ScaledRowsSource final : public ASource {
 public:
  ScaledRowsSource(const float* a, size_t ld, const float* scale)
      : a_(a), ld_(ld), scale_(scale) {}

  void rows(size_t m0, size_t m1, size_t k0, size_t kc, float* dst, size_t ld) const override {
    const float* s = scale_ + k0;
    for (size_t r = m0; r < m1; ++r, dst += ld) {
      const float* src = a_ + r * ld_ + k0;
      for (size_t j = 0; j < kc; ++j) dst[j] = src[j] * s[j];
    }
  }

 private:
  const float* a_;
  size_t ld_;
  const float* scale_;
};

void conv2d_nhwc_f32(const float* x, const Conv2dGeometry& g, const SgemmPacked& wt, float* y,
                     const SgemmEpilogue& ep, size_t threads, SgemmIsa isa, const float* scale) {
  const size_t l = g.oh * g.ow, k = g.c * g.kh * g.kw, cout = wt.cols;
  if (l == 0 || cout == 0) return;
  if (scale != nullptr) {
    if (!g.pointwise()) throw std::invalid_argument("an input scale needs a 1x1 unpadded conv");
    if (l >= kScaledSourceMinRows) {   // scaled as the GEMM copies A's rows
      sgemm(ScaledRowsSource(x, g.c, scale), wt, l, cout, k, y, cout, ep, threads, isa);
      return;
    }
    // Few positions, many channels (a late stage): the GEMM splits over output columns and
    // would copy every row once per column task; one scaled copy of x, then A read in place.
    static thread_local Scratch scaled_scratch;
    float* xs = scaled_scratch.get(l * k);
    const size_t chunk = std::max<size_t>(1, (64u << 10) / (k * sizeof(float)));
    parallel_for((l + chunk - 1) / chunk, threads, [&](size_t t) {
      const size_t r1 = std::min(l, (t + 1) * chunk);
      for (size_t r = t * chunk; r < r1; ++r) {
        for (size_t j = 0; j < k; ++j) xs[r * k + j] = x[r * k + j] * scale[j];
      }
    });
    sgemm(MatrixView{xs, static_cast<std::ptrdiff_t>(k), 1}, nullptr, MatrixView{}, &wt, l,
          cout, k, y, cout, ep, threads, isa);
    return;
  }
  if (g.pointwise()) {
    sgemm(MatrixView{x, static_cast<std::ptrdiff_t>(g.c), 1}, nullptr, MatrixView{}, &wt, l,
          cout, k, y, cout, ep, threads, isa);
    return;
  }
  if (threads == 0) threads = std::max<size_t>(1, std::thread::hardware_concurrency());
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
  if (isa == SgemmIsa::kAvx512 && g.kw * g.c < kNhwcDirectMinRun && k <= kSgemmKc &&
      !ep.accumulate) {
    // Short kernel rows (a stem's 3 channels): computed directly, output rows split over the
    // threads (ResNet's 7x7 stem 1.9 -> ~1.2 ms, MobileNetV3's 3x3 one 0.33 -> ~0.1 at one
    // thread; the im2col GEMM below ran K = 147 or 27 through its per-tile overhead)
    const size_t tasks = std::min(g.oh, threads > 1 ? threads * 4 : size_t{1});
    parallel_for(tasks, threads, [&](size_t t) {
      conv2d_nhwc_smallc_avx512(x, g, wt, y, ep, g.oh * t / tasks, g.oh * (t + 1) / tasks);
    });
    return;
  }
#endif
  const NhwcConvSource source(x, g);
  const size_t band = std::max<size_t>(
      kSgemmMr, kNhwcBandBytes / (k * sizeof(float)) / kSgemmMr * kSgemmMr);
  const size_t bands = ceil_div(l, band);
  if (g.kw * g.c < kNhwcDirectMinRun && bands >= 2 * threads) {
    // Kernel rows too short to read in place (a stem's 3 channels): col in bands of output
    // positions, each band's GEMM on one thread (in MobileNetV2, its 3 -> 32 stem took
    // ~510 us through the per-panel rows below, ~420 so, at one thread).
    parallel_for(bands, threads, [&](size_t b) {
      static thread_local Scratch col_scratch;
      const size_t p0 = b * band, p1 = std::min(l, p0 + band);
      float* col = col_scratch.get((p1 - p0) * k);
      source.rows(p0, p1, 0, k, col, k);
      SgemmEpilogue bep = ep;
      if (bep.z != nullptr) bep.z += p0 * bep.ldz;
      sgemm(MatrixView{col, static_cast<std::ptrdiff_t>(k), 1}, nullptr, MatrixView{}, &wt,
            p1 - p0, cout, k, y + p0 * cout, cout, bep, 1, isa);
    });
    return;
  }
  // One GEMM over all positions whose tasks read col's rows in place where they are a strided
  // run of x (positions along an output row, inside the input, a k block within a kernel
  // row) and write the others per A panel (padding, a row's end); never col whole. (Bands of
  // full col rows, multiplied on one thread each, were 4-6% slower on ResNet's 56 x 56 and
  // 28 x 28 3x3 convs at two threads.)
  sgemm(source, wt, l, cout, k, y, cout, ep, threads, isa);
}

// The portable micro-kernel: the reference the vector variants are tested against.
void sgemm_tile_scalar(const SgemmTile& t) {
  float acc[kSgemmMr][kSgemmNr] = {};
  const size_t seg_len = t.kc / t.segs;
  for (size_t k = 0; k < t.kc; ++k) {
    const float* b = t.b + k * (t.ldb != 0 ? t.ldb : kSgemmNr);
    // (k's place in A read in place: its run, then its place in the run)
    const std::ptrdiff_t ak = static_cast<std::ptrdiff_t>(k) +
                              static_cast<std::ptrdiff_t>(k / seg_len) * t.seg_skip;
    for (size_t r = 0; r < t.rows; ++r) {
      const float a = t.lda != 0 ? t.a[static_cast<std::ptrdiff_t>(r * t.lda) + ak]
                                 : t.a[k * kSgemmMr + r];
      for (size_t j = 0; j < t.cols; ++j) acc[r][j] += a * b[j];
    }
  }
  for (size_t r = 0; r < t.rows; ++r) {
    float* c = t.c + r * t.ldc;
    for (size_t j = 0; j < t.cols; ++j) {
      float v = acc[r][j];
      if (t.accumulate) v += t.addend[r * t.ld_addend + j];
      if (t.last) {
        if (t.row_bias) v += t.row_bias[r];
        if (t.col_bias) v += t.col_bias[j];
        v = std::min(std::max(v, t.lo), t.hi);
      }
      c[j] = v;
    }
  }
}

}  // namespace onnxplex::mlas
