// The AMX qgemm variant: TDPBUSD (uint8 x int8, 16 x 16 int32 tiles, 64 k per instruction) on a
// 32 x 32 micro-tile (four C tiles, two A tiles of 16 rows, two B tiles of 16 columns), then
// the AVX-512 epilogue of the VNNI variant. Built with -mamx-tile -mamx-int8 (and AVX-512) and
// -ffp-contract=off (the float epilogue rounds after the multiply and after the add).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "qgemm.h"

namespace onnxplex::mlas {

namespace {

constexpr size_t kTile = 16;  // rows / int32 columns of a tile

// The 64-byte tile configuration (palette 1): tiles 0-3 C, 4-5 A, 6-7 B, all 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

const TileConfig& config() {
  static const TileConfig cfg = [] {
    TileConfig c;
    for (int i = 0; i < 8; ++i) {
      c.colsb[i] = 64;
      c.rows[i] = kTile;
    }
    return c;
  }();
  return cfg;
}

}  // namespace

bool amx_enable() {
#if defined(__linux__)
  // arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): Linux hands out the tile-data state
  // only on request (a process that has not asked gets SIGILL at its first tile load).
  static const bool ok = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  return ok;
#else
  return false;
#endif
}

namespace {
// Set between amx_task_begin and amx_task_end: the tiles are configured for this thread's
// task, and qgemm_tile_amx neither loads the configuration nor releases the tiles.
thread_local bool t_configured = false;
}  // namespace

void amx_task_begin() {
  _tile_loadconfig(&config());
  t_configured = true;
}

void amx_task_end() {
  _tile_release();
  t_configured = false;
}

void qgemm_tile_amx(const QgemmTile& t) {
  // Outside a task (amx_task_begin) loaded on every call: another library on this thread (say
  // onnxruntime's AMX kernels) may have configured the tiles differently in between.
  if (!t_configured) _tile_loadconfig(&config());
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const size_t steps = t.kp / 64;
  const uint8_t* a0 = t.a;
  const uint8_t* a1 = t.a + kTile * t.lda;  // rows past `rows` are PackedA's zero padding
  const uint8_t* b = t.b;
  for (size_t s = 0; s < steps; ++s, b += 16 * 128) {
    _tile_loadd(4, a0 + s * 64, t.lda);
    _tile_loadd(5, a1 + s * 64, t.lda);
    _tile_loadd(6, b, 128);
    _tile_loadd(7, b + 64, 128);
    _tile_dpbusd(0, 4, 6);
    _tile_dpbusd(1, 4, 7);
    _tile_dpbusd(2, 5, 6);
    _tile_dpbusd(3, 5, 7);
  }
  alignas(64) int32_t acc[2 * kTile][2 * kTile];
  _tile_stored(0, &acc[0][0], 128);
  _tile_stored(1, &acc[0][kTile], 128);
  _tile_stored(2, &acc[kTile][0], 128);
  _tile_stored(3, &acc[kTile][kTile], 128);
  if (!t_configured) _tile_release();

  for (size_t v = 0; v < 2; ++v) {
    const size_t col = v * kTile;
    if (col >= t.cols) break;
    const size_t left = t.cols - col;
    const __mmask16 mask = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
    const __m512i zp = _mm512_loadu_si512(t.b_zp + col);
    const __m512i corr = _mm512_loadu_si512(t.b_corr + col);
    __m512 scale = _mm512_setzero_ps(), bias = _mm512_setzero_ps();
    if (t.c_f32 != nullptr) {
      scale = _mm512_loadu_ps(t.scale + col);
      if (t.bias != nullptr) bias = _mm512_loadu_ps(t.bias + col);
    }
    for (size_t r = 0; r < t.rows; ++r) {
      __m512i c = _mm512_add_epi32(_mm512_load_si512(&acc[r][col]),
                                   _mm512_mullo_epi32(_mm512_set1_epi32(t.a_zp[r]), corr));
      c = _mm512_sub_epi32(c, _mm512_mullo_epi32(zp, _mm512_set1_epi32(t.a_sum[r])));
      if (t.c_i32 != nullptr) {
        _mm512_mask_storeu_epi32(t.c_i32 + r * t.ldc + col, mask, c);
      } else {
        __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(c), scale);
        if (t.bias != nullptr) f = _mm512_add_ps(f, bias);
        _mm512_mask_storeu_ps(t.c_f32 + r * t.ldc + col, mask, f);
      }
    }
  }
}

}  // namespace onnxplex::mlas
