// The quantized GEMM drivers: variant choice, operand packing and the tiling over threads.
#include "qgemm.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "cpu_features.h"
#include "dwconv.h"
#include "parallel.h"

namespace onnxplex::mlas {

namespace {

size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

// Rows per parallel task: a task reuses its B panel over this many rows.
constexpr size_t kTaskRows = 48;
// The same for the AMX variant, whose tile configuration is loaded once per task.
constexpr size_t kAmxTaskRows = 128;

// dst[c * dst_stride + r] = src[r * src_stride + c] for r < rows, c < cols (bytes): blocks of
// 16 x 16 through SSE2 unpacks where x86's baseline has them, the edges byte by byte.
void transpose_u8(const uint8_t* src, size_t src_stride, uint8_t* dst, size_t dst_stride,
                  size_t rows, size_t cols) {
  size_t r0 = 0;
#if defined(__SSE2__)
  for (; r0 + 16 <= rows; r0 += 16) {
    size_t c0 = 0;
    for (; c0 + 16 <= cols; c0 += 16) {
      __m128i v[16];
      for (int i = 0; i < 16; ++i) {
        v[i] = _mm_loadu_si128(
            reinterpret_cast<const __m128i*>(src + (r0 + static_cast<size_t>(i)) * src_stride + c0));
      }
      // four rounds of interleaving: bytes, 16-bit pairs, 32-bit quads, 64-bit halves
      __m128i t[16];
      for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm_unpacklo_epi8(v[2 * i], v[2 * i + 1]);
        t[2 * i + 1] = _mm_unpackhi_epi8(v[2 * i], v[2 * i + 1]);
      }
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 2; ++j) {
          v[4 * i + 2 * j] = _mm_unpacklo_epi16(t[4 * i + j], t[4 * i + j + 2]);
          v[4 * i + 2 * j + 1] = _mm_unpackhi_epi16(t[4 * i + j], t[4 * i + j + 2]);
        }
      }
      for (int i = 0; i < 2; ++i) {
        for (int j = 0; j < 4; ++j) {
          t[8 * i + 2 * j] = _mm_unpacklo_epi32(v[8 * i + j], v[8 * i + j + 4]);
          t[8 * i + 2 * j + 1] = _mm_unpackhi_epi32(v[8 * i + j], v[8 * i + j + 4]);
        }
      }
      for (int j = 0; j < 8; ++j) {
        v[2 * j] = _mm_unpacklo_epi64(t[j], t[j + 8]);
        v[2 * j + 1] = _mm_unpackhi_epi64(t[j], t[j + 8]);
      }
      for (int i = 0; i < 16; ++i) {
        _mm_storeu_si128(
            reinterpret_cast<__m128i*>(dst + (c0 + static_cast<size_t>(i)) * dst_stride + r0), v[i]);
      }
    }
    for (; c0 < cols; ++c0) {
      for (size_t r = r0; r < r0 + 16; ++r) dst[c0 * dst_stride + r] = src[r * src_stride + c0];
    }
  }
#endif
  for (size_t c = 0; c < cols; ++c) {
    for (size_t r = r0; r < rows; ++r) dst[c * dst_stride + r] = src[r * src_stride + c];
  }
}

// dst[i] = src[i] ^ flip for i < n; returns the sum of what was written. 16 bytes a step
// where SSE2 is the baseline (x86-64): the byte loop was half of a conv's im2col GEMM
// (3136 x 576 x 64: 1.4 ms, its A pack 47% of the samples, the tiles 18%).
inline uint32_t copy_sum_u8(const uint8_t* src, uint8_t* dst, size_t n, uint8_t flip) {
  size_t i = 0;
  uint32_t sum = 0;
#if defined(__SSE2__)
  const __m128i f = _mm_set1_epi8(static_cast<char>(flip)), zero = _mm_setzero_si128();
  __m128i acc = _mm_setzero_si128();   // two 64-bit sums of byte sums: no overflow
  for (; i + 16 <= n; i += 16) {
    const __m128i v =
        _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)), f);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), v);
    acc = _mm_add_epi64(acc, _mm_sad_epu8(v, zero));
  }
  sum = static_cast<uint32_t>(_mm_cvtsi128_si64(acc) +
                              _mm_cvtsi128_si64(_mm_unpackhi_epi64(acc, acc)));
#endif
  for (; i < n; ++i) {
    const uint8_t v = src[i] ^ flip;
    dst[i] = v;
    sum += v;
  }
  return sum;
}

QgemmLayout size_a(PackedA& out, size_t m, size_t k, QgemmIsa isa);

}  // namespace

const char* isa_name(QgemmIsa isa) {
  switch (isa) {
    case QgemmIsa::kAvx512Vnni: return "avx512vnni";
    case QgemmIsa::kAmx: return "amx";
    case QgemmIsa::kAvx2: return "avx2";
    case QgemmIsa::kScalar: break;
  }
  return "scalar";
}

bool isa_available(QgemmIsa isa) {
  switch (isa) {
    case QgemmIsa::kScalar: return true;
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
    case QgemmIsa::kAvx2: return cpu_features().avx2;
    case QgemmIsa::kAvx512Vnni: return cpu_features().avx512_vnni;
    case QgemmIsa::kAmx:
      return cpu_features().amx_int8 && cpu_features().avx512_vnni && amx_enable();
#else
    default: return false;
#endif
  }
  return false;
}

QgemmIsa parse_isa(const std::string& name) {
  QgemmIsa isa;
  if (name == "scalar") {
    isa = QgemmIsa::kScalar;
  } else if (name == "avx2") {
    isa = QgemmIsa::kAvx2;
  } else if (name == "avx512vnni") {
    isa = QgemmIsa::kAvx512Vnni;
  } else if (name == "amx") {
    isa = QgemmIsa::kAmx;
  } else {
    throw std::invalid_argument("unknown qgemm variant '" + name +
                                "' (expected scalar, avx2, avx512vnni or amx)");
  }
  if (!isa_available(isa)) {
    throw std::invalid_argument("qgemm variant '" + name +
                                "' is not built in or this CPU does not run it");
  }
  return isa;
}

QgemmIsa best_isa() {
  static const QgemmIsa best = [] {
    const char* env = std::getenv("ONNXPLEX_MLAS_ISA");
    if (env != nullptr && *env != '\0') {
      try {
        return parse_isa(env);
      } catch (const std::invalid_argument&) {
        // Fall through to the best available variant.
      }
    }
    if (isa_available(QgemmIsa::kAmx)) return QgemmIsa::kAmx;
    if (isa_available(QgemmIsa::kAvx512Vnni)) return QgemmIsa::kAvx512Vnni;
    if (isa_available(QgemmIsa::kAvx2)) return QgemmIsa::kAvx2;
    return QgemmIsa::kScalar;
  }();
  return best;
}

QgemmLayout layout_of(QgemmIsa isa) {
  switch (isa) {
    // AMX: B rows of 32 columns x 4 k (two 16-column tiles 64 bytes apart), A tiles of 16
    // rows x 64 k, a micro-tile of 32 x 32 (four C tiles).
    case QgemmIsa::kAmx: return {32, 4, 1, 1, 32, 64};
    case QgemmIsa::kAvx512Vnni: return {64, 4, 1, 1, 6, 4};
    case QgemmIsa::kAvx2: return {16, 2, 2, 2, 6, 2};
    case QgemmIsa::kScalar: break;
  }
  return {16, 1, 1, 1, 4, 1};
}

namespace {

// One k group of a B panel: dst[j * KG + t] = int8(rows[t][j] ^ flip) for j < jn, t < KG, the
// values also summed into colsum[j]. Plain loops over j the compiler vectorizes.
template <size_t KG, typename T>
void pack_b_group(const uint8_t* const* rows, uint8_t flip, size_t jn, T* dst,
                  uint32_t* colsum) {
  for (size_t j = 0; j < jn; ++j) {
    int32_t sum = 0;
    for (size_t t = 0; t < KG; ++t) {
      const int32_t v = static_cast<int8_t>(rows[t][j] ^ flip);
      dst[j * KG + t] = static_cast<T>(v);
      sum += v;
    }
    colsum[j] += static_cast<uint32_t>(sum);
  }
}

}  // namespace

PackedB pack_b(const void* b, bool b_signed, size_t k, size_t n, size_t ldb,
               const int32_t* zero_points, size_t zp_count, QgemmIsa isa, size_t threads) {
  if (zp_count != 0 && zp_count != 1 && zp_count != n) {
    throw std::invalid_argument("B zero point must have 1 or N values");
  }
  const QgemmLayout l = layout_of(isa);
  PackedB p;
  p.isa = isa;
  p.k = k;
  p.n = n;
  p.kp = round_up(std::max<size_t>(k, 1), l.kpad);
  p.np = round_up(std::max<size_t>(n, 1), l.panel);
  p.data = WeightBuffer<uint8_t>(p.kp * p.np * l.b_bytes);
  p.zp.assign(p.np, 0);
  p.corr.assign(p.np, 0);
  const auto* bu = static_cast<const uint8_t*>(b);
  const size_t panel_elems = p.kp * l.panel;
  // Panel by panel, then k group by k group within it (B is row-major): each panel is written
  // in one sweep, kgroup rows of B at a time, element (k, j) as int8 (B signed) or u8 - 128
  // (a XOR with 0x80), with running column sums. (Element by element through the layout's
  // index arithmetic it was 1.2 ns an element: 100 ms of BERT-base int8's session creation.)
  std::vector<uint32_t> colsum(n, 0);
  const uint8_t flip = b_signed ? 0 : 0x80;
  const std::vector<uint8_t> pad_row(l.panel, flip);  // rows past k: packed as 0
  parallel_for((n + l.panel - 1) / l.panel, threads, [&](size_t panel_index) {
    const size_t j0 = panel_index * l.panel;
    const size_t jn = std::min(n, j0 + l.panel) - j0;
    uint8_t* panel = p.data.data() + (j0 / l.panel) * panel_elems * l.b_bytes;
    // (the groups write the panel's first jn columns: a partial last panel is cleared first)
    if (jn < l.panel) std::memset(panel, 0, panel_elems * l.b_bytes);
    for (size_t k0 = 0; k0 < p.kp; k0 += l.kgroup) {  // groups past k: pad rows (zeros)
      const uint8_t* rows[4];
      for (size_t t = 0; t < l.kgroup; ++t) {
        rows[t] = k0 + t < k ? bu + (k0 + t) * ldb + j0 : pad_row.data();
      }
      uint8_t* dst = panel + (k0 / l.kgroup) * l.panel * l.kgroup * l.b_bytes;
      if (l.kgroup == 4 && l.b_bytes == 1) {
        pack_b_group<4, int8_t>(rows, flip, jn, reinterpret_cast<int8_t*>(dst), colsum.data() + j0);
      } else if (l.kgroup == 2 && l.b_bytes == 2) {
        pack_b_group<2, int16_t>(rows, flip, jn, reinterpret_cast<int16_t*>(dst), colsum.data() + j0);
      } else if (l.kgroup == 1 && l.b_bytes == 1) {
        pack_b_group<1, int8_t>(rows, flip, jn, reinterpret_cast<int8_t*>(dst), colsum.data() + j0);
      } else {
        throw std::logic_error("qgemm pack_b: no packer for this layout");
      }
    }
  });
  for (size_t j = 0; j < n; ++j) {
    int32_t zp = zp_count == 0 ? 0 : zero_points[zp_count == 1 ? 0 : j];
    if (!b_signed) zp -= 128;
    p.zp[j] = zp;
    p.corr[j] = static_cast<int32_t>(static_cast<uint32_t>(k) * static_cast<uint32_t>(zp) -
                                     colsum[j]);
    p.zp_zero = p.zp_zero && zp == 0;
  }
  return p;
}

namespace {

QgemmLayout size_a(PackedA& out, size_t m, size_t k, QgemmIsa isa) {
  const QgemmLayout l = layout_of(isa);
  out.view = nullptr;
  out.m = m;
  out.kp = round_up(std::max<size_t>(k, 1), l.kpad);
  // Whole micro-tiles of rows (zeros past m): a kernel may load all mr rows. The packers
  // write every row below m whole (K's padding included), so only the rows past it are
  // cleared here (clearing all of A first was a pass over it on every call).
  const size_t row_bytes = out.kp * l.a_bytes;
  out.data.resize(round_up(std::max<size_t>(m, 1), l.mr) * row_bytes);
  std::fill(out.data.begin() + static_cast<std::ptrdiff_t>(m * row_bytes), out.data.end(),
            uint8_t{0});
  out.row_sum.resize(m);
  out.zp.resize(m);
  return l;
}

}  // namespace

void pack_a(const void* a, bool a_signed, size_t m, size_t k, const int32_t* zero_points,
            size_t zp_count, QgemmIsa isa, size_t threads, PackedA& out) {
  if (zp_count != 0 && zp_count != 1 && zp_count != m) {
    throw std::invalid_argument("A zero point must have 1 or M values");
  }
  const QgemmLayout l = size_a(out, m, k, isa);
  const auto* src = static_cast<const uint8_t*>(a);
  const uint8_t flip = a_signed ? 0x80 : 0;
  const size_t rows_per_task = 64;
  parallel_for((m + rows_per_task - 1) / rows_per_task, threads, [&](size_t task) {
    const size_t r1 = std::min(m, (task + 1) * rows_per_task);
    for (size_t r = task * rows_per_task; r < r1; ++r) {
      const uint8_t* row = src + r * k;
      uint32_t sum = 0;
      if (l.a_bytes == 1) {
        uint8_t* dst = out.data.data() + r * out.kp;
        sum = copy_sum_u8(row, dst, k, flip);
        std::memset(dst + k, 0, out.kp - k);
      } else {
        auto* dst = reinterpret_cast<uint16_t*>(out.data.data() + 2 * r * out.kp);
        for (size_t kk = 0; kk < k; ++kk) {
          const uint8_t v = row[kk] ^ flip;
          dst[kk] = v;
          sum += v;
        }
        std::fill(dst + k, dst + out.kp, uint16_t{0});
      }
      out.row_sum[r] = static_cast<int32_t>(sum);
      const int32_t zp = zp_count == 0 ? 0 : zero_points[zp_count == 1 ? 0 : r];
      out.zp[r] = zp + (a_signed ? 128 : 0);
    }
  });
}

bool view_a(const uint8_t* a, size_t m, size_t k, int32_t zero_point, QgemmIsa isa,
            PackedA& out) {
  const QgemmLayout l = layout_of(isa);
  // (AMX loads whole tiles of rows, past m: only the row-exact VNNI and AVX2 kernels qualify)
  if (l.a_bytes != 1 || k == 0 || k % l.kpad != 0 || isa == QgemmIsa::kAmx) return false;
  out.m = m;
  out.kp = k;
  out.view = a;
  out.zp.assign(m, zero_point);
  out.row_sum.assign(m, 0);
  return true;
}

void quantize_pack_a(const float* a, size_t m, size_t k, QgemmIsa isa, size_t threads,
                     PackedA& out, float& scale, int32_t& zero_point) {
  size_a(out, m, k, isa);
  float lo = 0.0f, hi = 0.0f;  // min(0, min a), max(0, max a)
  if (m * k > 0) {
    switch (isa) {
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
      case QgemmIsa::kAmx:
      case QgemmIsa::kAvx512Vnni: minmax_avx512(a, m * k, &lo, &hi); break;
      case QgemmIsa::kAvx2: minmax_avx2(a, m * k, &lo, &hi); break;
#endif
      default: minmax_scalar(a, m * k, &lo, &hi); break;
    }
  }
  // The same float32 operations, in the same order, as DynamicQuantizeLinear in numpy.
  scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
  float zpf = 0.0f - lo / scale;
  zpf = std::min(std::max(zpf, 0.0f), 255.0f);
  zpf = std::nearbyint(zpf);
  zero_point = static_cast<int32_t>(zpf);
  const float s = scale;
  const size_t rows_per_task = 32;
  parallel_for((m + rows_per_task - 1) / rows_per_task, threads, [&](size_t task) {
    const size_t r1 = std::min(m, (task + 1) * rows_per_task);
    for (size_t r = task * rows_per_task; r < r1; ++r) {
      const float* x = a + r * k;
      int32_t sum = 0;
      switch (isa) {
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
        case QgemmIsa::kAmx:
        case QgemmIsa::kAvx512Vnni: {
          uint8_t* q = out.data.data() + r * out.kp;
          quantize_row_avx512(x, k, s, zpf, q, &sum);
          std::memset(q + k, 0, out.kp - k);
          break;
        }
        case QgemmIsa::kAvx2: {
          auto* q = reinterpret_cast<uint16_t*>(out.data.data() + 2 * r * out.kp);
          quantize_row_avx2(x, k, s, zpf, q, &sum);
          std::fill(q + k, q + out.kp, uint16_t{0});
          break;
        }
#endif
        default: {
          uint8_t* q = out.data.data() + r * out.kp;
          quantize_row_scalar(x, k, s, zpf, q, &sum);
          std::memset(q + k, 0, out.kp - k);
          break;
        }
      }
      out.row_sum[r] = sum;
      out.zp[r] = zero_point;
    }
  });
}

namespace {

using TileFn = void (*)(const QgemmTile&);

TileFn tile_fn(QgemmIsa isa) {
  switch (isa) {
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
    case QgemmIsa::kAvx512Vnni: return qgemm_tile_avx512vnni;
    case QgemmIsa::kAmx: return qgemm_tile_amx;
    case QgemmIsa::kAvx2: return qgemm_tile_avx2;
#endif
    default: return qgemm_tile_scalar;
  }
}

// the requantized 8-bit output of qgemm_requant_u8
struct RequantOut {
  uint8_t* c;
  const int32_t* bias;
  const float* mult;
  float zp, lo, hi;
  bool folded;
};

void run(const PackedA& a, const PackedB& b, int32_t* ci, float* cf, size_t ldc,
         const float* scale, const float* bias, size_t threads,
         const RequantOut* q = nullptr) {
  if (a.kp != b.kp) throw std::invalid_argument("A and B disagree on K");
  if (a.view != nullptr && !b.zp_zero) {
    throw std::invalid_argument("an A read in place (no row sums) needs B zero points of 0");
  }
  const QgemmLayout l = layout_of(b.isa);
  const TileFn fn = tile_fn(b.isa);
  const size_t m = a.m, n = b.n;
  if (m == 0 || n == 0) return;
  const size_t panels = b.np / l.panel;
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
  const bool amx = b.isa == QgemmIsa::kAmx;
#else
  const bool amx = false;
#endif
  // (AMX: longer tasks, the tile configuration loaded once per task)
  const size_t task_rows = std::max(amx ? kAmxTaskRows : kTaskRows, 2 * l.mr) / l.mr * l.mr;
  const size_t chunks = (m + task_rows - 1) / task_rows;
  const size_t lda = a.kp * l.a_bytes;
  const size_t panel_bytes = b.kp * l.panel * l.b_bytes;
  parallel_for(panels * chunks, threads, [&](size_t task) {
    const size_t p = task % panels, chunk = task / panels;
    const size_t n0 = p * l.panel;
    QgemmTile t{};
    t.lda = lda;
    t.b = b.data.data() + p * panel_bytes;
    t.kp = b.kp;
    t.b_zp = b.zp.data() + n0;
    t.b_corr = b.corr.data() + n0;
    t.cols = std::min(l.panel, n - n0);
    t.ldc = ldc;
    t.scale = scale == nullptr ? nullptr : scale + n0;
    t.bias = bias == nullptr ? nullptr : bias + n0;
    if (q != nullptr) {
      t.q_bias = q->bias + n0;
      t.q_mult = q->mult + n0;
      t.q_zp = q->zp;
      t.q_lo = q->lo;
      t.q_hi = q->hi;
      t.q_folded = q->folded;
    }
    const size_t m1 = std::min(m, (chunk + 1) * task_rows);
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
    if (amx) amx_task_begin();
#endif
    for (size_t r = chunk * task_rows; r < m1; r += l.mr) {
      t.rows = std::min(l.mr, m1 - r);
      t.a = (a.view != nullptr ? a.view : a.data.data()) + r * lda;
      t.a_zp = a.zp.data() + r;
      t.a_sum = a.row_sum.data() + r;
      t.c_i32 = ci == nullptr ? nullptr : ci + r * ldc + n0;
      t.c_f32 = cf == nullptr ? nullptr : cf + r * ldc + n0;
      t.c_u8 = q == nullptr ? nullptr : q->c + r * ldc + n0;
      fn(t);
    }
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
    if (amx) amx_task_end();
#endif
  });
}

// One channels-first image channels-last inside its padding (hp x wp x c, pad_value around
// it), a block of 16 positions at a time: 16 bytes of each channel's row, written across the
// channels.
void pad_image_u8(const uint8_t* xi, size_t c, size_t h, size_t w, size_t pt, size_t pl,
                  size_t hp, size_t wp, uint8_t pad_value, uint8_t* scratch) {
  if (hp != h || wp != w) std::memset(scratch, pad_value, hp * wp * c);
  // each image row: its c channel rows of w bytes (h * w apart) become w positions of c
  // bytes, through the 16 x 16 byte-tile transpose
  for (size_t y = 0; y < h; ++y) {
    transpose_u8(xi + y * w, h * w, scratch + ((y + pt) * wp + pl) * c, c, c, w);
  }
}

// A channels-last image into its padded copy: rows of w * c bytes, the border x's zero point.
void pad_image_nhwc_u8(const uint8_t* xi, size_t c, size_t h, size_t w, size_t pt, size_t pl,
                       size_t hp, size_t wp, uint8_t pad_value, uint8_t* scratch) {
  std::memset(scratch, pad_value, hp * wp * c);
  for (size_t y = 0; y < h; ++y) {
    std::memcpy(scratch + ((y + pt) * wp + pl) * c, xi + y * w * c, w * c);
  }
}

// The im2col rows of output positions [p0, p1) (of one image, ow a row) from its padded
// channels-last copy: each position's kernel rows, kw * c bytes in a run at dilation 1, else a
// tap's c bytes at a time.
// Rows [p0, p1) of the im2col matrix, each `ld` bytes (>= kh * kw * c; the bytes past the taps
// zeroed: the GEMM's padded K, whose B rows are zeros). A kernel row of at most 16 bytes (a
// stem's 3 channels: 9 or 21) is moved as one 16-byte load and store where both stay inside
// the buffers (`src_end`, `out_end`): a memcpy call per kernel row of 9 bytes was most of a
// 224 x 224 stem's im2col.
void im2col_rows_u8(const uint8_t* scratch, const uint8_t* src_end, size_t c, size_t wp,
                    size_t kh, size_t kw, size_t sh, size_t sw, size_t dh, size_t dw, size_t ow,
                    size_t p0, size_t p1, uint8_t* out, size_t ld, const uint8_t* out_end) {
  const size_t row = kh * kw * c, run = kw * c;
  for (size_t p = p0; p < p1; ++p, out += ld) {
    const size_t oy = p / ow, ox = p % ow;
    uint8_t* d = out;
    for (size_t ky = 0; ky < kh; ++ky) {
      const uint8_t* src = scratch + ((oy * sh + ky * dh) * wp + ox * sw) * c;
      if (dw == 1) {
        if (run <= 16 && src + 16 <= src_end && d + 16 <= out_end) {
          std::memcpy(d, src, 16);   // (a fixed size: one load and one store)
        } else {
          std::memcpy(d, src, run);
        }
        d += run;
      } else {
        for (size_t kx = 0; kx < kw; ++kx, d += c) std::memcpy(d, src + kx * dw * c, c);
      }
    }
    if (ld > row) std::memset(out + row, 0, ld - row);
  }
}

// requantize_i32's per-channel state: bias and multiplier per channel (a per-tensor one
// repeated), whether every multiplier is finite, and the row kernel to use.
struct Requantizer {
  size_t channels;
  float zp, lo, hi;
  std::vector<int32_t> b;
  std::vector<float> m;   // (float32 as onnxruntime's; the callers' doubles hold float32 values)
  bool finite = true;
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
  bool avx512 = cpu_features().avx512_vnni;   // (the file built with AVX-512 flags)
#endif

  Requantizer(size_t channels_, const int32_t* bias, const double* multiplier,
              size_t multiplier_count, int32_t zero_point, bool out_signed)
      : channels(channels_), zp(static_cast<float>(zero_point)),
        lo(out_signed ? -128.0f : 0.0f), hi(out_signed ? 127.0f : 255.0f), b(channels_, 0),
        m(channels_) {
    for (size_t c = 0; c < channels; ++c) {
      if (bias != nullptr) b[c] = bias[c];
      m[c] = static_cast<float>(multiplier[multiplier_count == 1 ? 0 : c]);
      finite = finite && std::isfinite(m[c]);
    }
  }

  // count positions' channels, rows `channels` apart, from a to dst (one call a block)
  void rows(const int32_t* a, size_t count, uint8_t* dst) const {
    if (finite) {
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
      if (avx512) {
        return requant_rows_avx512(a, count, b.data(), m.data(), channels, zp, lo, hi, dst);
      }
#endif
      return detail::requant_rows(a, count, b.data(), m.data(), channels, zp, lo, hi, dst);
    }
    for (size_t i = 0; i < count * channels; ++i) {   // (the rare case, element by element)
      const size_t c = i % channels;
      dst[i] = detail::requant_any(detail::add_wrapped(a[i], b[c]), m[c], zp, lo, hi);
    }
  }

  // count positions of sums a (rows `channels` apart) into channels-first dst (a channel's
  // positions `stride` apart): in blocks of 64 through a tile of this thread, then a byte
  // transpose
  void rows_channels_first(const int32_t* a, size_t count, uint8_t* dst, size_t stride) const {
    constexpr size_t kBlock = 64;
    thread_local std::vector<uint8_t> tile_buf;
    if (tile_buf.size() < kBlock * channels) tile_buf.resize(kBlock * channels);
    uint8_t* const tile = tile_buf.data();   // (a plain pointer: byte stores alias anything)
    for (size_t p0 = 0; p0 < count; p0 += kBlock) {
      const size_t n = std::min(kBlock, count - p0);
      rows(a + p0 * channels, n, tile);
      transpose_u8(tile, channels, dst + p0, stride, n, channels);
    }
  }
};

}  // namespace

void requantize_i32(const int32_t* acc, size_t images, size_t positions, size_t channels,
                    const int32_t* bias, const double* multiplier, size_t multiplier_count,
                    int32_t zero_point, bool out_signed, bool channels_first, void* out,
                    size_t threads) {
  const Requantizer rq(channels, bias, multiplier, multiplier_count, zero_point, out_signed);
  auto* o8 = static_cast<uint8_t*>(out);
  // blocks of 64 positions over the threads
  constexpr size_t kBlock = 64;
  const size_t blocks = (positions + kBlock - 1) / kBlock;
  parallel_for(images * blocks, threads, [&](size_t task) {
    const size_t n = task / blocks, p0 = task % blocks * kBlock;
    const size_t count = std::min(kBlock, positions - p0);
    const int32_t* a = acc + (n * positions + p0) * channels;
    uint8_t* dst = o8 + n * positions * channels;
    if (channels_first) return rq.rows_channels_first(a, count, dst + p0, positions);
    rq.rows(a, count, dst + p0 * channels);
  });
}

namespace {

// One channel's run of sums held as float32 integers, requantized (requant_run_f32, or
// element by element for a multiplier that is not finite: requant_any).
void requant_channel_f32(const float* src, size_t n, int32_t b, float m, float zp,
                         float lo, float hi, uint8_t* dst) {
  if (!std::isfinite(m)) {
    for (size_t p = 0; p < n; ++p) {
      dst[p] = detail::requant_any(detail::add_wrapped(static_cast<int32_t>(src[p]), b), m, zp,
                                   lo, hi);
    }
    return;
  }
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
  if (cpu_features().avx512_vnni) return requant_run_f32_avx512(src, n, b, m, zp, lo, hi, dst);
#endif
  detail::requant_run_f32(src, n, b, m, zp, lo, hi, dst);
}

}  // namespace

QdwVnniWeights qdw_pack_vnni(const float* wf, size_t c, size_t kh, size_t kw) {
  QdwVnniWeights out;
  out.c = c;
  out.kh = kh;
  out.kw = kw;
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
  if (cpu_features().avx512_vnni && !pack_qdw_weights_vnni(wf, c, kh, kw, out.wq, out.sums)) {
    out.wq.clear();
    out.sums.clear();
  }
#else
  (void)wf;
#endif
  return out;
}

void qdwconv_u8(const uint8_t* x, bool x_signed, size_t n, size_t c, size_t h, size_t w,
                int32_t x_zero_point, const float* wf, size_t kh, size_t kw, size_t sh,
                size_t sw, size_t dh, size_t dw, size_t pt, size_t pl, size_t oh, size_t ow,
                const int32_t* bias, const double* multiplier, size_t multiplier_count,
                int32_t y_zero_point, bool out_signed, bool channels_last, void* out,
                size_t threads, const QdwVnniWeights* packed) {
  const DwConvGeometry g{h, w, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl};
  (void)packed;   // (read by the AVX-512 VNNI path only)
  if (channels_last) {
    // x [n][h][w][c]: blocks of output rows, each from the input rows it reads (centered
    // into float32 in the task's own buffer, ~256 KiB of floats with its output), the
    // channels-last float kernel (vectors across channels), the sums (float32 integers)
    // requantized as the GEMM's are, into out [n][oh][ow][c]
    const Requantizer rq(c, bias, multiplier, multiplier_count, y_zero_point, out_signed);
    const size_t span = (kh - 1) * dh + 1;   // input rows one output row reads
    const size_t row_floats = std::max<size_t>(1, (w * sh + ow) * c);
    const size_t fit = std::max<size_t>(1, (size_t{64} << 10) / row_floats);
    const size_t rows = std::max<size_t>(1, std::min({oh, fit, (oh + 2 * threads - 1) /
                                                                    (2 * threads)}));
    const size_t tasks = (oh + rows - 1) / rows;
    constexpr float kInf = std::numeric_limits<float>::infinity();
    std::vector<float> wt;
    [[maybe_unused]] bool fused = false;   // (set on x86 only)
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
    if (rq.avx512 && rq.finite) {
      // Weights that are int8 once centered (symmetric int8 weights, the quantizers'
      // default): the 8-bit input is read as it is, four kernel rows a vpdpbusd
      // (qdwconv_nhwc_rows_vnni)
      QdwVnniWeights own;
      if (packed == nullptr || packed->c != c || packed->kh != kh || packed->kw != kw) {
        own = qdw_pack_vnni(wf, c, kh, kw);
        packed = &own;
      }
      if (!packed->wq.empty()) {
        const std::vector<int32_t>& sums = packed->sums;
        const auto zpx = static_cast<uint32_t>(x_zero_point + (x_signed ? 128 : 0));
        std::vector<int32_t> corr((c + 15) / 16 * 16, 0);
        for (size_t ch = 0; ch < c; ++ch) {   // bias - zp * sum(w), wrapping as the sums do
          corr[ch] = static_cast<int32_t>(static_cast<uint32_t>(rq.b[ch]) -
                                          zpx * static_cast<uint32_t>(sums[ch]));
        }
        parallel_for(n * tasks, threads, [&](size_t task) {
          const size_t img = task / tasks, oy0 = task % tasks * rows,
                       oy1 = std::min(oh, oy0 + rows);
          qdwconv_nhwc_rows_vnni(x + img * h * w * c, x_signed, x_zero_point, g, c,
                                 packed->wq.data(), corr.data(), rq.m.data(), rq.zp, rq.lo,
                                 rq.hi, static_cast<uint8_t*>(out) + img * oh * ow * c, oy0,
                                 oy1);
        });
        return;
      }
    }
    // Otherwise, with AVX-512, the float sums are requantized as they are made
    // (qdwconv_nhwc_rows_avx512), the weights laid out tap-major for it
    fused = rq.avx512 && rq.finite && kh * kw <= 256;
    if (fused) {
      const size_t cp = (c + 15) / 16 * 16, taps = kh * kw;
      wt.assign(taps * cp, 0.0f);
      for (size_t ch = 0; ch < c; ++ch) {
        for (size_t t = 0; t < taps; ++t) wt[t * cp + ch] = wf[ch * taps + t];
      }
    }
#endif
    parallel_for(n * tasks, threads, [&](size_t task) {
      const size_t img = task / tasks, oy0 = task % tasks * rows,
                   oy1 = std::min(oh, oy0 + rows);
      // input rows [r0, r1) of the block; the rows before r0 it would read are padding
      const auto first = static_cast<std::ptrdiff_t>(oy0 * sh) - static_cast<std::ptrdiff_t>(pt);
      const size_t r0 = first > 0 ? static_cast<size_t>(first) : 0;
      const size_t r1 = std::min<size_t>(h, static_cast<size_t>(std::max<std::ptrdiff_t>(
                                                0, first + static_cast<std::ptrdiff_t>(
                                                       (oy1 - oy0 - 1) * sh + span))));
      const size_t hl = r1 > r0 ? r1 - r0 : 0, pt_local = first < 0 ? pt - oy0 * sh : 0;
      thread_local std::vector<float> xf, yf;
      thread_local std::vector<int32_t> acc;
      const size_t count = (oy1 - oy0) * ow;
      xf.resize(std::max<size_t>(hl * w * c, 1));
      dequantize_8bit(x + ((img * h + r0) * w) * c, x_signed, hl * w * c, 1.0f, x_zero_point,
                      xf.data());
      const DwConvGeometry gl{hl, w, oy1 - oy0, ow, kh, kw, sh, sw, dh, dw, pt_local, pl};
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
      if (fused) {   // sums and requantization in one pass, no float or int32 outputs
        return qdwconv_nhwc_rows_avx512(xf.data(), gl, c, wt.data(), rq.b.data(), rq.m.data(),
                                        rq.zp, rq.lo, rq.hi,
                                        static_cast<uint8_t*>(out) + ((img * oh + oy0) * ow) * c,
                                        0, oy1 - oy0);
      }
#endif
      yf.resize(count * c);
      acc.resize(count * c);
      dwconv_nhwc_f32(xf.data(), wf, nullptr, yf.data(), c, 0, c, 0, oy1 - oy0, gl, -kInf,
                      kInf);
      for (size_t i = 0; i < count * c; ++i) acc[i] = static_cast<int32_t>(yf[i]);
      rq.rows(acc.data(), count,
              static_cast<uint8_t*>(out) + ((img * oh + oy0) * ow) * c);
    });
    return;
  }
  const float lo = out_signed ? -128.0f : 0.0f, hi = out_signed ? 127.0f : 255.0f;
  const float zp = static_cast<float>(y_zero_point);
  // channels a task: about 512 KiB of float input planes (one channel at least), at least
  // two tasks a thread when there are channels for them
  const size_t fit = (size_t{512} << 10) / std::max<size_t>(h * w * sizeof(float), 1);
  const size_t per = std::max<size_t>(1, std::min({c, fit, (c + 2 * threads - 1) /
                                                              (2 * threads)}));
  const size_t chunks = (c + per - 1) / per;
  auto* o8 = static_cast<uint8_t*>(out);
  parallel_for(n * chunks, threads, [&](size_t task) {
    const size_t img = task / chunks, c0 = task % chunks * per, cn = std::min(per, c - c0);
    thread_local std::vector<float> xf, yf;
    xf.resize(cn * h * w);
    yf.resize(cn * oh * ow);
    dequantize_8bit(x + (img * c + c0) * h * w, x_signed, cn * h * w, 1.0f, x_zero_point,
                    xf.data());
    dwconv_f32(xf.data(), wf + c0 * kh * kw, nullptr, yf.data(), cn, g,
               -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity());
    for (size_t k = 0; k < cn; ++k) {
      const size_t ch = c0 + k;
      requant_channel_f32(yf.data() + k * oh * ow, oh * ow, bias != nullptr ? bias[ch] : 0,
                          static_cast<float>(multiplier[multiplier_count == 1 ? 0 : ch]), zp,
                          lo, hi,
                          o8 + (img * c + ch) * oh * ow);
    }
  });
}

void qlinear_conv_u8(const uint8_t* x, bool x_signed, size_t n, size_t c, size_t h, size_t w,
                     int32_t x_zero_point, const PackedB& wt, size_t kh, size_t kw, size_t sh,
                     size_t sw, size_t dh, size_t dw, size_t pt, size_t pl, size_t pb,
                     size_t pr, size_t oh, size_t ow, const int32_t* bias,
                     const double* multiplier, size_t multiplier_count, int32_t y_zero_point,
                     bool out_signed, bool channels_last, void* out, size_t threads) {
  const size_t k = kh * kw * c, positions = oh * ow, m = wt.n;
  if (k != wt.k) throw std::invalid_argument("the packed weight's K is not kh * kw * C");
  if (threads == 0) threads = 1;
  const size_t hp = h + pt + pb, wp = w + pl + pr;
  const Requantizer rq(m, bias, multiplier, multiplier_count, y_zero_point, out_signed);
  // Channels-last with finite multipliers and a B packed for AVX-512 VNNI: the requantization
  // runs in the GEMM's epilogue (its biases and multipliers padded to whole panels)
  const bool fused = channels_last && rq.finite && qgemm_requant_available(wt);
  const bool in_place =
      !x_signed && wt.zp_zero;
  std::vector<int32_t> qb;
  std::vector<float> qm;
  if (fused) {
    qb.assign(wt.np, 0);
    qm.assign(wt.np, 0.0f);
    std::copy(rq.b.begin(), rq.b.end(), qb.begin());
    std::copy(rq.m.begin(), rq.m.end(), qm.begin());
  }
  thread_local std::vector<uint8_t> scratch;
  scratch.resize(std::max<size_t>(hp * wp * c, 1));
  // Blocks of positions go through the whole pipeline in one task (im2col rows, A pack,
  // GEMM, requantization into the NCHW output): one hand-over to the pool a conv, and a
  // block's rows, packed A and sums stay in this core's cache. A block's im2col rows are up
  // to ~256 KiB; too few blocks to share out (a deep layer's 7 x 7 plane) and the GEMM
  // splits its columns over the threads instead.
  size_t block = std::max<size_t>(16, std::min<size_t>(256, (size_t{256} << 10) /
                                                                std::max<size_t>(k, 1)));
  size_t blocks = (positions + block - 1) / block;
  if (blocks >= 2 * threads) {
    // blocks shared out: a whole number of rounds of the threads, of equal size (56 x 56
    // positions on two threads: 14 of 224, not 13 of 256 that leave one thread a block behind)
    const size_t tasks = round_up(blocks, threads);
    block = (positions + tasks - 1) / tasks;
    blocks = (positions + block - 1) / block;
  }
  const size_t inner = blocks >= 2 * threads ? 1 : threads;   // threads of a block's GEMM
  // 1x1, stride 1, unpadded: the channels-last image is the im2col matrix itself
  const bool pointwise = kh == 1 && kw == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 &&
                         pb == 0 && pr == 0;
  // im2col rows the GEMM reads in place (view_a) are written K-padded for it (a stem's 27
  // taps: 28 bytes a row), rather than packed again into padded rows
  const QgemmLayout layout = layout_of(wt.isa);
  const size_t ld = fused && in_place && !pointwise && layout.a_bytes == 1 &&
                            wt.isa != QgemmIsa::kAmx && wt.kp % layout.kpad == 0
                        ? wt.kp : k;
  auto* o8 = static_cast<uint8_t*>(out);
  for (size_t img = 0; img < n; ++img) {
    const uint8_t* xi = x + img * c * h * w;
    const uint8_t* padded = scratch.data();
    if (!channels_last) {
      pad_image_u8(xi, c, h, w, pt, pl, hp, wp, static_cast<uint8_t>(x_zero_point),
                   scratch.data());
    } else if (hp != h || wp != w) {
      pad_image_nhwc_u8(xi, c, h, w, pt, pl, hp, wp, static_cast<uint8_t>(x_zero_point),
                        scratch.data());
    } else {
      padded = xi;   // already the channels-last image the im2col rows come from
    }
    uint8_t* dst = o8 + img * m * positions;
    parallel_for(blocks, inner == 1 ? threads : 1, [&](size_t task) {
      const size_t p0 = task * block, p1 = std::min(positions, p0 + block), count = p1 - p0;
      thread_local std::vector<uint8_t> col;
      thread_local PackedA pa;
      thread_local std::vector<int32_t> acc;
      acc.resize(count * m);
      const uint8_t* rows = padded + p0 * c;   // a pointwise conv's rows: the image's own
      if (!pointwise) {
        col.resize(count * ld);
        const uint8_t* src_end = padded == xi ? xi + h * w * c : scratch.data() + scratch.size();
        uint8_t* cd = col.data();
        // a block whose GEMM the threads share (a deep layer's few positions): its im2col
        // rows shared out too, rather than written by one thread while the others wait (each
        // part's 16-byte stores bounded by its own rows: they spill past a short kernel row)
        const size_t parts = inner > 1 && count >= 32 * inner ? inner : 1;
        parallel_for(parts, parts, [&](size_t part) {
          const size_t q0 = p0 + count * part / parts, q1 = p0 + count * (part + 1) / parts;
          im2col_rows_u8(padded, src_end, c, wp, kh, kw, sh, sw, dh, dw, ow, q0, q1,
                         cd + (q0 - p0) * ld, ld, cd + (q1 - p0) * ld);
        });
        rows = cd;
      }
      // uint8 rows the GEMM reads in place (B's zero points 0: no row sums), else packed
      if (!(fused && in_place && view_a(rows, count, pointwise ? k : ld, x_zero_point,
                                        wt.isa, pa))) {
        if (!pointwise && ld != k) {   // (ld was chosen for view_a's conditions)
          throw std::logic_error("qlinear_conv_u8: K-padded im2col rows not taken in place");
        }
        pack_a(rows, x_signed, count, k, &x_zero_point, 1, wt.isa, inner, pa);
      }
      if (fused) {   // requantized in the GEMM's epilogue, straight into the output rows
        return qgemm_requant_u8(pa, wt, qb.data(), qm.data(), rq.zp, out_signed,
                                dst + p0 * m, m, inner);
      }
      qgemm_i32(pa, wt, acc.data(), m, inner);
      if (channels_last) {
        rq.rows(acc.data(), count, dst + p0 * m);
      } else {
        rq.rows_channels_first(acc.data(), count, dst + p0, positions);
      }
    });
  }
}

void requantize_f32_channels(const float* y, size_t images, size_t channels, size_t positions,
                             const int32_t* bias, const double* multiplier,
                             size_t multiplier_count, int32_t zero_point, bool out_signed,
                             void* out, size_t threads) {
  const float lo = out_signed ? -128.0f : 0.0f, hi = out_signed ? 127.0f : 255.0f;
  const float zp = static_cast<float>(zero_point);
  auto* o8 = static_cast<uint8_t*>(out);
  parallel_for(images * channels, threads, [&](size_t row) {
    const size_t c = row % channels;
    requant_channel_f32(y + row * positions, positions, bias != nullptr ? bias[c] : 0,
                        static_cast<float>(multiplier[multiplier_count == 1 ? 0 : c]), zp, lo,
                        hi,
                        o8 + row * positions);
  });
}

void transpose_bytes(const uint8_t* src, size_t rows, size_t cols, size_t lds, uint8_t* dst) {
  transpose_u8(src, lds, dst, rows, rows, cols);
}

void qlinear_binary_8bit(const QBinaryOperand& a, const QBinaryOperand& b, float sc, float zc,
                         bool out_signed, bool mul, size_t rows, size_t inner, void* y,
                         size_t threads) {
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
  const bool avx512 = cpu_features().avx512_vnni;
#endif
  // tasks of whole rows, about 16 KiB of outputs each
  const size_t per = std::max<size_t>(1, (size_t{16} << 10) / std::max<size_t>(inner, 1));
  parallel_for((rows + per - 1) / per, threads, [&](size_t task) {
    const size_t r0 = task * per, r1 = std::min(rows, r0 + per);
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
    if (avx512) return qlinear_binary_rows_avx512(a, b, sc, zc, out_signed, mul, r0, r1, inner, y);
#endif
    detail::qlinear_binary_typed(a.data, a.is_signed, a.full, a.scale, a.zero_point, b.data,
                                 b.is_signed, b.full, b.scale, b.zero_point, sc, zc,
                                 out_signed, mul, r0, r1, inner, y, a.cyclic, b.cyclic);
  });
}

namespace {

template <typename T>
void sum_columns(const T* x, size_t rows, size_t cols, int32_t* out) {
  std::fill(out, out + cols, 0);
  for (size_t r = 0; r < rows; ++r) {   // (row by row: each row's add loop vectorizes)
    const T* row = x + r * cols;
    for (size_t c = 0; c < cols; ++c) out[c] += row[c];
  }
}

}  // namespace

void qlinear_global_average_pool_8bit(const void* x, bool x_signed, size_t images, size_t rows,
                                      size_t cols, float x_zero_point, float x_scale,
                                      float y_scale, float y_zero_point, bool out_signed,
                                      void* out, size_t threads) {
  const float lo = out_signed ? -128.0f : 0.0f, hi = out_signed ? 127.0f : 255.0f;
  parallel_for(images, threads, [&](size_t i) {
    thread_local std::vector<int32_t> sums;
    sums.resize(cols);
    if (x_signed) {
      sum_columns(static_cast<const int8_t*>(x) + i * rows * cols, rows, cols, sums.data());
    } else {
      sum_columns(static_cast<const uint8_t*>(x) + i * rows * cols, rows, cols, sums.data());
    }
    for (size_t c = 0; c < cols; ++c) {
      float f = static_cast<float>(static_cast<double>(sums[c]) / static_cast<double>(rows));
      f = (f - x_zero_point) * x_scale;
      f = std::nearbyint(f / y_scale) + y_zero_point;   // (a NaN product gives lo)
      f = f != f ? lo : std::min(std::max(f, lo), hi);
      const auto q = static_cast<int32_t>(f);
      if (out_signed) {
        static_cast<int8_t*>(out)[i * cols + c] = static_cast<int8_t>(q);
      } else {
        static_cast<uint8_t*>(out)[i * cols + c] = static_cast<uint8_t>(q);
      }
    }
  });
}

void lookup_8bit(const uint8_t* x, size_t n, const uint8_t* table, uint8_t* out,
                 size_t threads) {
  constexpr size_t kChunk = 64u << 10;
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
  const bool vbmi = cpu_features().avx512_vbmi;
#endif
  parallel_for((n + kChunk - 1) / kChunk, threads, [&](size_t task) {
    const size_t i0 = task * kChunk, i1 = std::min(n, i0 + kChunk);
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
    if (vbmi) return lookup_8bit_vbmi(x + i0, i1 - i0, table, out + i0);
#endif
    // (a local copy: the stores to out cannot change the table the loads read)
    uint8_t t[256];
    std::memcpy(t, table, sizeof t);
    for (size_t i = i0; i < i1; ++i) out[i] = t[x[i]];
  });
}

void dequantize_8bit(const void* x, bool x_signed, size_t n, float scale, int32_t zero_point,
                     float* y) {
  const auto zp = static_cast<float>(zero_point);
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
  if (cpu_features().avx512_vnni) return dequantize_8bit_avx512(x, x_signed, n, scale, zp, y);
#endif
  if (x_signed) return detail::dequantize_run(static_cast<const int8_t*>(x), n, scale, zp, y);
  detail::dequantize_run(static_cast<const uint8_t*>(x), n, scale, zp, y);
}

void quantize_8bit(const float* x, size_t n, float scale, int32_t zero_point, bool q_signed,
                   void* q) {
  const auto zp = static_cast<float>(zero_point);
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
  if (cpu_features().avx512_vnni) return quantize_8bit_avx512(x, n, scale, zp, q_signed, q);
#endif
  if (q_signed) return detail::quantize_run(x, n, scale, zp, static_cast<int8_t*>(q));
  detail::quantize_run(x, n, scale, zp, static_cast<uint8_t*>(q));
}

void qgemm_i32(const PackedA& a, const PackedB& b, int32_t* c, size_t ldc, size_t threads) {
  run(a, b, c, nullptr, ldc, nullptr, nullptr, threads);
}

bool qgemm_requant_available(const PackedB& b) {
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
  return b.isa == QgemmIsa::kAvx512Vnni;
#else
  (void)b;
  return false;
#endif
}

void qgemm_requant_u8(const PackedA& a, const PackedB& b, const int32_t* bias,
                      const float* multiplier, float zero_point, bool out_signed, uint8_t* c,
                      size_t ldc, size_t threads) {
  if (!qgemm_requant_available(b)) {
    throw std::invalid_argument("qgemm_requant_u8 needs a B packed for AVX-512 VNNI");
  }
  const bool one_a_zp =
      a.m == 0 || std::all_of(a.zp.begin(), a.zp.begin() + static_cast<std::ptrdiff_t>(a.m),
                              [&](int32_t z) { return z == a.zp[0]; });
  const bool folded = one_a_zp && b.zp_zero;
  thread_local std::vector<int32_t> fb;
  if (folded) {   // bias + a_zp * corr, wrapping as the epilogue's int32 arithmetic
    fb.resize(b.np);
    const auto za = static_cast<uint32_t>(a.m == 0 ? 0 : a.zp[0]);
    for (size_t j = 0; j < b.np; ++j) {
      fb[j] = static_cast<int32_t>(static_cast<uint32_t>(bias[j]) +
                                   za * static_cast<uint32_t>(b.corr[j]));
    }
  }
  const RequantOut q{c, folded ? fb.data() : bias, multiplier, zero_point,
                     out_signed ? -128.0f : 0.0f, out_signed ? 127.0f : 255.0f, folded};
  run(a, b, nullptr, nullptr, ldc, nullptr, nullptr, threads, &q);
}

void qgemm_f32(const PackedA& a, const PackedB& b, const float* scale, size_t scale_count,
               const float* bias, float* c, size_t ldc, size_t threads) {
  if (scale_count != 1 && scale_count != b.n) {
    throw std::invalid_argument("scale must have 1 or N values");
  }
  // Padded to whole panels: the micro-kernels load full vectors.
  std::vector<float> s(b.np, 0.0f), bi;
  if (scale_count == 1) {
    std::fill(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(b.n), scale[0]);
  } else {
    std::copy(scale, scale + b.n, s.begin());
  }
  if (bias != nullptr) {
    bi.assign(b.np, 0.0f);
    std::copy(bias, bias + b.n, bi.begin());
  }
  run(a, b, nullptr, c, ldc, s.data(), bias == nullptr ? nullptr : bi.data(), threads);
}

}  // namespace onnxplex::mlas
