// Float32 GEMM for cpu_mlas: C = A @ B (+ C) (+ bias per row or per column), clamped to
// [lo, hi], then an optional SiLU / HardSwish (sigmoid.h's PostAct).
// Knows nothing about Python.
//
// Both operands are consumed in packed form: A as micro-panels of kMr rows ([k][kMr] floats per
// panel), B as panels of kNr columns ([k][kNr] floats per panel), zero padded. A constant
// operand (a weight) is packed once (`sgemm_pack_a` / `sgemm_pack_b`); the other one is packed
// block by block inside the GEMM, into per-thread buffers that stay in cache. Any strides are
// accepted, so a transposed operand costs nothing extra.
//
// The GEMM is split into tiles of the output (rows x columns) handed to the native thread pool;
// each tile runs all of K (blocks of kKc) so tiles never share an output element.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "sigmoid.h"

namespace onnxplex::mlas {

constexpr size_t kSgemmMr = 12;  // rows per micro-tile (A panel height)
constexpr size_t kSgemmNr = 32;  // columns per micro-tile (B panel width)
constexpr size_t kSgemmKc = 256; // K per block: a packed B panel block is 32 KiB (L1)

enum class SgemmIsa { kScalar = 0, kAvx512 = 1, kAvx2 = 2 };

const char* sgemm_isa_name(SgemmIsa isa);
// The best variant this CPU runs, or the one ONNXPLEX_MLAS_SGEMM_ISA (scalar|avx2|avx512)
// names.
SgemmIsa sgemm_best_isa();
SgemmIsa sgemm_parse_isa(const std::string& name);  // throws std::invalid_argument

// A matrix view: element (i, j) is at data[i * rs + j * cs] (strides in elements).
struct MatrixView {
  const float* data = nullptr;
  std::ptrdiff_t rs = 0, cs = 0;
};

// A packed operand: kind A (rows = M, panels of kMr rows) or B (cols = N, panels of kNr cols).
struct SgemmPacked {
  bool is_a = false;
  size_t rows = 0, cols = 0;  // logical shape: A [M, K] or B [K, N]
  size_t k = 0;
  std::unique_ptr<float[], void (*)(void*)> data{nullptr, nullptr};  // 64-byte aligned
  const float* panel(size_t p) const;  // the p-th panel, [k][width] floats
};

// Panels are packed on up to `threads` threads.
std::shared_ptr<SgemmPacked> sgemm_pack_a(const MatrixView& a, size_t m, size_t k,
                                          size_t threads = 1);
std::shared_ptr<SgemmPacked> sgemm_pack_b(const MatrixView& b, size_t k, size_t n,
                                          size_t threads = 1);

enum class BiasAxis { kNone = 0, kRow = 1, kCol = 2 };

struct SgemmEpilogue {
  bool accumulate = false;      // C = A @ B + C (C's values on entry) instead of C = A @ B
  const float* z = nullptr;     // or C = A @ B + Z: Z [m, n] read in place of C's values
  size_t ldz = 0;               // (row stride of Z; C is then write-only)
  const float* bias = nullptr;  // M values (kRow) or N values (kCol)
  BiasAxis axis = BiasAxis::kNone;
  float lo = -__builtin_inff(), hi = __builtin_inff();
  PostAct act = PostAct::kNone;  // after the clamp, on each tile of C as it is finished
};

// Where the GEMM gets B panels that are not prepacked: packs k [k0, k0 + kc) x columns
// [c0, c0 + nc) of B as ceil(nc / kSgemmNr) consecutive panels of [kc][kSgemmNr] floats
// (columns past nc zero), reading B a row at a time across all of them. Called concurrently.
class BSource {
 public:
  virtual ~BSource() = default;
  virtual void pack(size_t k0, size_t kc, size_t c0, size_t nc, float* dst) const = 0;
  // B as a strided matrix when it is one (the GEMM may then read it in place), else null.
  virtual const MatrixView* matrix() const { return nullptr; }
};

// Where the GEMM gets an A that is not a matrix in memory (a channels-last conv's im2col
// rows): writes rows [m0, m1) x k [k0, k0 + kc) of A row-major into dst, rows `ld` floats
// apart. Each task asks for its rows of one k block at a time, into a per-thread buffer that
// stays in cache; called concurrently.
// Rows [m0, m0 + count) of an A block as they already lie in memory (read in place, nothing
// written): `lda` floats apart, each row's k values in `segs` equal runs, a run starting
// `seg_skip` floats past the end of the one before (a channels-last conv's kernel rows: the
// input rows they read lie a row of the image apart). `a` null: not in memory.
struct DirectRows {
  const float* a = nullptr;
  size_t lda = 0;
  size_t segs = 1;
  std::ptrdiff_t seg_skip = 0;
};

class ASource {
 public:
  virtual ~ASource() = default;
  virtual void rows(size_t m0, size_t m1, size_t k0, size_t kc, float* dst, size_t ld) const = 0;
  // The k block to use from k0 on, at most `limit` values (a source may end blocks where its
  // rows stop being one strided run).
  virtual size_t block([[maybe_unused]] size_t k0, size_t limit) const { return limit; }
  // The longest k block the GEMM offers block() (with B prepacked).
  virtual size_t block_limit() const { return kSgemmKc; }
  // Whether rows [m0, m0 + count) of the k block [k0, k0 + kc) are all zeros (the GEMM then
  // skips them).
  virtual bool zero(size_t m0, size_t count, size_t k0, size_t kc) const {
    (void)m0, (void)count, (void)k0, (void)kc;
    return false;
  }
  // Rows [m0, m0 + count) of the k block [k0, k0 + kc) where they already lie in memory.
  virtual DirectRows direct(size_t m0, size_t count, size_t k0, size_t kc) const {
    (void)m0, (void)count, (void)k0, (void)kc;
    return {};
  }
};

// B as a strided matrix.
class MatrixSource final : public BSource {
 public:
  explicit MatrixSource(const MatrixView& b) : b_(b) {}
  void pack(size_t k0, size_t kc, size_t c0, size_t nc, float* dst) const override;
  const MatrixView* matrix() const override { return &b_; }

 private:
  MatrixView b_;
};

// A constant B [K, N] of 4-bit integers with a scale and a zero point per block of
// `block` rows of a column (com.microsoft MatMulNBits), kept at 4 bits: B[k][j] =
// (q - zp[j][k / block]) * scale[j][k / block]. Laid out per panel of kSgemmNr columns:
// q as [panel][ceil(K / 2)][kSgemmNr] bytes, byte (r, j) MatMulNBits' own byte r of column j
// (rows 2r in its low nibble, 2r + 1 in its high one): packing is a byte transpose. scale and
// zp as [panel][K blocks][kSgemmNr] floats (zero past N: padding columns come out 0). 1/8 of
// the float32 panels' bytes.
struct SgemmNBits4 {
  size_t k = 0, n = 0, block = 0, k_blocks = 0;
  std::unique_ptr<uint8_t[], void (*)(void*)> q{nullptr, nullptr};
  std::unique_ptr<float[], void (*)(void*)> scale{nullptr, nullptr}, zp{nullptr, nullptr};
  size_t nbytes() const;
};

// From MatMulNBits' layout: q_in [N, k_blocks, block / 2] bytes (two values a byte, the low
// nibble first, blocks zero-padded past K), scales and zero points [N, k_blocks] floats.
std::shared_ptr<SgemmNBits4> sgemm_pack_b_nbits4(const uint8_t* q_in, const float* scales,
                                                 const float* zero_points, size_t k, size_t n,
                                                 size_t block);

// B panels dequantized as the GEMM asks for them (into its per-thread buffers, in cache).
class NBits4Source final : public BSource {
 public:
  NBits4Source(const SgemmNBits4& b, SgemmIsa isa) : b_(b), isa_(isa) {}
  void pack(size_t k0, size_t kc, size_t c0, size_t nc, float* dst) const override;

 private:
  const SgemmNBits4& b_;
  [[maybe_unused]] SgemmIsa isa_;   // (read by the x86 packers only)
};

// B as the im2col matrix of one image of a 2-D convolution, never materialized: x [C, H, W]
// (contiguous); row (c * kh + i) * kw + j, column oy * ow + ox holds
// x[c, oy * sh - pt + i * dh, ox * sw - pl + j * dw], or 0 in the padding.
struct Conv2dGeometry {
  size_t c, h, w;        // input channels and size
  size_t kh, kw;         // kernel
  size_t sh, sw;         // strides
  size_t dh, dw;         // dilations
  std::ptrdiff_t pt, pl; // leading pads
  size_t oh, ow;         // output size
  // A 1x1, stride-1, unpadded conv: the image is B itself, a [C, H*W] matrix.
  bool pointwise() const {
    return kh == 1 && kw == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 && oh == h && ow == w;
  }
};

class Conv2dSource final : public BSource {
 public:
  Conv2dSource(const float* x, const Conv2dGeometry& g, SgemmIsa isa)
      : x_(x), g_(g), isa_(isa) {}
  void pack(size_t k0, size_t kc, size_t c0, size_t nc, float* dst) const override;

 private:
  const float* x_;
  Conv2dGeometry g_;
  [[maybe_unused]] SgemmIsa isa_;   // (read by the x86 packers only)
};

// C [m, n] (row stride ldc) = A @ B with the epilogue. Exactly one of `a`/`pa` and one of
// `b`/`pb` is used (the packed one when not null).
void sgemm(const MatrixView& a, const SgemmPacked* pa, const MatrixView& b,
           const SgemmPacked* pb, size_t m, size_t n, size_t k, float* c, size_t ldc,
           const SgemmEpilogue& ep, size_t threads, SgemmIsa isa);
// The same with B's panels from a source (A as above).
void sgemm(const MatrixView& a, const SgemmPacked* pa, const BSource& b, size_t m, size_t n,
           size_t k, float* c, size_t ldc, const SgemmEpilogue& ep, size_t threads,
           SgemmIsa isa);

// The same with A's rows from a source and B prepacked.
void sgemm(const ASource& a, const SgemmPacked& pb, size_t m, size_t n, size_t k, float* c,
           size_t ldc, const SgemmEpilogue& ep, size_t threads, SgemmIsa isa);

// The conv of one image as out^T [oh * ow, Cout] = col^T [oh * ow, C * kh * kw] @ W^T, then
// transposed into y [Cout, oh, ow]: `wt` is W^T packed as B. For small output planes, where
// the direct orientation (W @ col, output positions along the 32-wide column panels) would
// leave panels part empty (7 x 7 = 49 positions fill 49 of 64 columns) while Cout fills them.
// The epilogue as for W @ col: bias per output channel (kRow), accumulate onto y's values,
// clamp.
void conv2d_f32_transposed(const float* x, const Conv2dGeometry& g, const SgemmPacked& wt,
                           float* y, const SgemmEpilogue& ep, size_t threads, SgemmIsa isa);

// The conv of one channels-last (NHWC) image: y [oh * ow, Cout] (rows Cout apart) = col @ W^T,
// where col's row for an output position holds its taps' input vectors x[iy, ix, 0:C] in
// (kernel row, kernel column) order, zeros in the padding; `wt` is W^T in that order
// ([kh][kw][C] x Cout) packed as B. x [h, w, c] contiguous. A 1x1, stride-1 unpadded conv
// reads x itself as col; otherwise one GEMM whose A is col, never built whole: its k blocks
// end at kernel rows (a row is kh runs of kw * C contiguous floats at dilation 1), and a
// panel of positions along one output row, inside the input, is read in place from x (rows
// sw * C apart); other panels are written into the task's buffer as they are needed. The
// epilogue: bias per output channel (kCol), Z [oh * ow, Cout] (ldz), clamp. `scale` (C values
// or nullptr; a 1x1 stride-1 unpadded conv only): x's channel c read times scale[c] (a
// squeeze-excite gate), as the GEMM copies A's rows into its buffers.
void conv2d_nhwc_f32(const float* x, const Conv2dGeometry& g, const SgemmPacked& wt, float* y,
                     const SgemmEpilogue& ep, size_t threads, SgemmIsa isa,
                     const float* scale = nullptr);

// ---- micro-kernels (internal; one translation unit per ISA) --------------------------------

struct SgemmTile {
  const float* a;     // packed: [kc][kMr] (kMr floats per k, `rows` of them valid); or
  size_t lda;         // when not 0, A as it is: `rows` rows of kc contiguous floats, lda apart
  const float* b;     // packed: [kc][kNr]; or
  size_t ldb;         // when not 0, B as it is: kc rows of `cols` contiguous floats, ldb apart
  size_t kc;
  // A as it is only: its kc values a row as `segs` equal runs, each starting seg_skip floats
  // past the end of the one before (DirectRows)
  size_t segs = 1;
  std::ptrdiff_t seg_skip = 0;
  size_t rows, cols;  // 1..kMr, 1..kNr
  float* c;
  size_t ldc;
  bool accumulate;    // C = A B + addend (else C = A B)
  const float* addend;  // with accumulate: C's own values, or Z's on the first k block
  size_t ld_addend;
  bool last;          // apply the epilogue
  const float* row_bias;  // [rows] or null
  const float* col_bias;  // [cols] or null
  float lo, hi;
};

void sgemm_tile_scalar(const SgemmTile& t);
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
void sgemm_tile_avx512(const SgemmTile& t);
void sgemm_tile_avx2(const SgemmTile& t);
void conv2d_pack_avx2(const float* x, const Conv2dGeometry& g, size_t k0, size_t kc,
                      size_t c0, size_t nc, float* dst);
void conv2d_pack_avx512(const float* x, const Conv2dGeometry& g, size_t k0, size_t kc,
                        size_t c0, size_t nc, float* dst);
// Output rows [oy0, oy1) of a conv2d_nhwc_f32 with kw * C < 32, computed directly (no im2col).
void conv2d_nhwc_smallc_avx512(const float* x, const Conv2dGeometry& g, const SgemmPacked& wt,
                               float* y, const SgemmEpilogue& ep, size_t oy0, size_t oy1);
#endif
// Rows [k0, k0 + kc) (k0 even) of one panel of a SgemmNBits4, a run of rows within one block at
// a time: run(scales, zero points, q, dst, row count) with the block's kSgemmNr scales and
// zero points, kSgemmNr bytes of q a pair of rows and kSgemmNr floats of dst a row (a run ends
// with a single row only at K's end). Blocks are of even size: a pair never straddles two.
template <typename Run>
inline void nbits4_runs(const SgemmNBits4& b, size_t panel, size_t k0, size_t kc, float* dst,
                        Run run) {
  const uint8_t* q = b.q.get() + (panel * ((b.k + 1) / 2) + k0 / 2) * kSgemmNr;
  for (size_t kk = 0; kk < kc;) {
    const size_t blk = (k0 + kk) / b.block, end = std::min(kc, (blk + 1) * b.block - k0);
    const size_t at = (panel * b.k_blocks + blk) * kSgemmNr;
    run(b.scale.get() + at, b.zp.get() + at, q + kk / 2 * kSgemmNr, dst + kk * kSgemmNr,
        end - kk);
    kk = end;
  }
}

// Rows [k0, k0 + kc) of one panel of a SgemmNBits4 into dst [kc][kSgemmNr] (per ISA).
void nbits4_panel_scalar(const SgemmNBits4& b, size_t panel, size_t k0, size_t kc, float* dst);
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
void nbits4_panel_avx512(const SgemmNBits4& b, size_t panel, size_t k0, size_t kc, float* dst);
void nbits4_panel_avx2(const SgemmNBits4& b, size_t panel, size_t k0, size_t kc, float* dst);
#endif

}  // namespace onnxplex::mlas
