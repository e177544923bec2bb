// Work-per-instruction probe for the Kleidi micro-kernels (not a timing benchmark): packs the
// operands of one family for one variant once, then calls that variant's run function C times
// over the whole output, single thread. Under an instruction-counting emulator,
// count(C = 2) - count(C = 1) is the cost of exactly one kernel call (process start-up, operand
// generation and packing cancel out); scripts/count-macs.sh does that.
//
//   kleidi_bench --family gemm_f32|igemm_f32|qsi8cx|qsi4c32|gemm_f16 --variant NAME
//                [--m M] [--n N] [--k K] [--calls C] [--chunks KCC] [--round-to-tile]
//
// igemm_f32: K = KCC chunks (kernel taps, default 8) of K / KCC values each (K must divide).
// qsi4c32: K must be a multiple of 32. --round-to-tile rounds M and N up to multiples of the
// variant's m_step / n_step (SME2 tiles grow with the vector length).
// Prints one line: "kleidi_bench family=... variant=... kernel=... m=.. n=.. k=.. calls=..
// mr=.. nr=.. kr=.. sr=.. m_step=.. n_step=.. checksum=..". Exit 2 if the variant is not
// compiled in or the CPU cannot run it, 1 on bad arguments.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "dispatch.h"
#include "fp16.h"
#include "pack.h"
#include "ukernel.h"

using namespace onnxplex::kleidi;

namespace {

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr,
               "kleidi_bench: %s\nusage: kleidi_bench --family gemm_f32|igemm_f32|qsi8cx|qsi4c32|"
               "gemm_f16 "
               "--variant NAME [--m M] [--n N] [--k K] [--calls C] [--chunks KCC] "
               "[--round-to-tile]\n",
               msg.c_str());
  std::exit(1);
}

// Cheap deterministic data: <random>'s real distributions use long double, which is software
// float128 on aarch64 and would add ~100 instructions per value to the (cancelled) set-up.
struct Rng {
  uint32_t state = 0x12345678u;
  uint32_t next() {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    return state;
  }
};

std::vector<float> random_floats(size_t count, Rng& rng) {
  std::vector<float> v(count);
  for (float& x : v) x = static_cast<float>(static_cast<int>(rng.next() >> 16) - 32768) / 32768.0f;
  return v;
}

template <class T>
std::vector<T> random_bytes(size_t count, Rng& rng, int lo, int hi) {
  std::vector<T> v(count);
  const uint32_t span = static_cast<uint32_t>(hi - lo + 1);
  for (T& x : v) x = static_cast<T>(lo + static_cast<int>((rng.next() >> 8) % span));
  return v;
}

double checksum(const std::vector<float>& dst) {
  double s = 0;
  for (float x : dst) s += x;
  return s;
}
double checksum(const std::vector<f16_bits>& dst) {
  double s = 0;
  for (f16_bits x : dst) s += f16_to_f32(x);
  return s;
}

std::vector<float> random_values(size_t count, Rng& rng, float) { return random_floats(count, rng); }
std::vector<f16_bits> random_values(size_t count, Rng& rng, f16_bits) {
  const std::vector<float> f = random_floats(count, rng);
  std::vector<f16_bits> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = f32_to_f16(f[i]);
  return v;
}

void print_result(const char* family, Variant v, const char* kernel, size_t m, size_t n, size_t k,
                  size_t calls, size_t mr, size_t nr, size_t kr, size_t sr, size_t m_step,
                  size_t n_step, double sum) {
  std::printf(
      "kleidi_bench family=%s variant=%s kernel=%s m=%zu n=%zu k=%zu calls=%zu mr=%zu nr=%zu "
      "kr=%zu sr=%zu m_step=%zu n_step=%zu checksum=%.6g\n",
      family, variant_name(v), kernel, m, n, k, calls, mr, nr, kr, sr, m_step, n_step, sum);
}

// gemm_f32 / gemm_f16: pack with the variant's own parameters, then `calls` run_matmul calls.
template <class T>
void bench_plain_gemm(const char* family, Variant v, const PlainGemmUkernel<T>& u,
                      void (*lhs_pack)(size_t, size_t, size_t, size_t, size_t, const T*, size_t,
                                       void*),
                      void (*rhs_pack)(size_t, size_t, size_t, size_t, size_t, const T*, size_t,
                                       size_t, const T*, void*),
                      size_t m, size_t n, size_t k, size_t calls, bool round_to_tile, Rng& rng) {
  const float lo = -std::numeric_limits<float>::infinity();
  const float hi = std::numeric_limits<float>::infinity();
  if (round_to_tile) m = round_up(m, u.get_m_step()), n = round_up(n, u.get_n_step());
  const size_t mr = u.get_mr(), nr = u.get_nr(), kr = u.get_kr(), sr = u.get_sr();
  const auto lhs = random_values(m * k, rng, T{}), rhs = random_values(k * n, rng, T{}),
             bias = random_values(n, rng, T{});
  std::vector<uint8_t> lp(layout::lhs_plain_size(m, k, mr, kr, sizeof(T)));
  std::vector<uint8_t> rp(layout::rhs_plain_size(n, k, nr, kr, sizeof(T)));
  lhs_pack(m, k, mr, kr, sr, lhs.data(), k * sizeof(T), lp.data());
  rhs_pack(n, k, nr, kr, sr, rhs.data(), n, 1, bias.data(), rp.data());
  std::vector<T> dst(m * n);
  for (size_t c = 0; c < calls; ++c) {
    u.run_matmul(m, n, k, lp.data(), rp.data(), dst.data(), n * sizeof(T), sizeof(T), lo, hi);
  }
  print_result(family, v, u.name, m, n, k, calls, mr, nr, kr, sr, u.get_m_step(),
               u.get_n_step(), checksum(dst));
}

}  // namespace

int main(int argc, char** argv) {
  std::string family, variant_arg;
  size_t m = 64, n = 64, k = 256, calls = 1, chunks = 8;
  bool round_to_tile = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error("missing value for " + a);
      return argv[++i];
    };
    auto number = [&]() -> size_t {
      const std::string s = value();
      char* end = nullptr;
      const unsigned long long x = std::strtoull(s.c_str(), &end, 10);
      if (s.empty() || *end) usage_error("bad number '" + s + "' for " + a);
      return static_cast<size_t>(x);
    };
    if (a == "--family") family = value();
    else if (a == "--variant") variant_arg = value();
    else if (a == "--m") m = number();
    else if (a == "--n") n = number();
    else if (a == "--k") k = number();
    else if (a == "--calls") calls = number();
    else if (a == "--chunks") chunks = number();
    else if (a == "--round-to-tile") round_to_tile = true;
    else usage_error("unknown argument " + a);
  }
  if (family.empty() || variant_arg.empty()) usage_error("--family and --variant are required");
  const auto parsed = parse_variant(variant_arg);
  if (!parsed) usage_error("unknown variant '" + variant_arg + "'");
  const Variant v = *parsed;
  if (m == 0 || n == 0 || k == 0) usage_error("m, n and k must be positive");

  Rng rng;
  const float lo = -std::numeric_limits<float>::infinity();
  const float hi = std::numeric_limits<float>::infinity();
  try {
    if (family == "gemm_f32") {
      bench_plain_gemm("gemm_f32", v, gemm_f32_ukernel(v), &lhs_pack_f32, &rhs_pack_f32, m, n, k,
                       calls, round_to_tile, rng);
    } else if (family == "gemm_f16") {
      bench_plain_gemm("gemm_f16", v, gemm_f16_ukernel(v), &lhs_pack_f16, &rhs_pack_f16, m, n, k,
                       calls, round_to_tile, rng);
    } else if (family == "igemm_f32") {
      const IGemmF32Ukernel& u = igemm_f32_ukernel(v);
      if (chunks == 0 || k % chunks) usage_error("igemm_f32: --k must be a multiple of --chunks");
      const size_t kcc = chunks, kcl = k / chunks;
      if (round_to_tile) m = round_up(m, u.get_m_step()), n = round_up(n, u.get_n_step());
      const size_t mr = u.get_mr(), nr = u.get_nr(), kr = u.get_kr(), sr = u.get_sr();
      const size_t m_step = u.get_m_step();
      const size_t kp = layout::imatmul_k(kcc, kcl, kr);
      // LHS row r, chunk c = lhs[r * k + c * kcl ...]; rows past m point at the pad row.
      const auto lhs = random_floats(m * k, rng), rhs = random_floats(k * n, rng),
                 bias = random_floats(n, rng);
      const std::vector<float> pad(kcl, 0.0f);
      const size_t blocks = div_up(m, m_step);
      std::vector<const void*> table(blocks * kcc * m_step);
      for (size_t mb = 0; mb < blocks; ++mb) {
        for (size_t c = 0; c < kcc; ++c) {
          for (size_t r = 0; r < m_step; ++r) {
            const size_t row = mb * m_step + r;
            table[(mb * kcc + c) * m_step + r] =
                row < m ? static_cast<const void*>(lhs.data() + row * k + c * kcl)
                        : static_cast<const void*>(pad.data());
          }
        }
      }
      std::vector<uint8_t> lp(layout::lhs_f32_size(m, kp, mr, kr));
      std::vector<uint8_t> rp(layout::rhs_f32_size(n, kp, nr, kr));
      lhs_imatmul_pack_f32(m, kcc, kcl, m_step, mr, kr, sr, table.data(), 0, pad.data(),
                           lp.data());
      // rhs element (chunk c, j, column n) at rhs[(c * kcl + j) * n + col]
      rhs_imatmul_pack_f32(n, kcc, kcl, nr, kr, sr, rhs.data(), kcl * n, n, 1, bias.data(),
                           rp.data());
      std::vector<float> dst(m * n);
      for (size_t c = 0; c < calls; ++c) {
        u.run_imatmul(m, n, kcc, kcl, lp.data(), rp.data(), dst.data(), n * sizeof(float), lo,
                      hi);
      }
      print_result("igemm_f32", v, u.name, m, n, k, calls, mr, nr, kr, sr, m_step,
                   u.get_n_step(), checksum(dst));
    } else if (family == "qsi8cx") {
      const QGemmQsi8cxUkernel& u = qgemm_qsi8cx_ukernel(v);
      if (round_to_tile) m = round_up(m, u.get_m_step()), n = round_up(n, u.get_n_step());
      const size_t mr = u.get_mr(), nr = u.get_nr(), kr = u.get_kr(), sr = u.get_sr();
      const auto lhs = random_floats(m * k, rng), scales = random_floats(n, rng),
                 bias = random_floats(n, rng);
      const auto w = random_bytes<int8_t>(k * n, rng, -127, 127);
      std::vector<uint8_t> lp(layout::lhs_qai8dx_size(m, k, mr, kr));
      std::vector<uint8_t> rp(layout::rhs_qsi8cx_size(n, k, nr, kr));
      lhs_quant_pack_qai8dx_f32(m, k, mr, kr, sr, lhs.data(), k * sizeof(float), lp.data());
      rhs_pack_qsi8cx(n, k, nr, kr, sr, w.data(), n, 1, scales.data(), bias.data(), rp.data());
      std::vector<float> dst(m * n);
      for (size_t c = 0; c < calls; ++c) {
        u.run_matmul(m, n, k, lp.data(), rp.data(), dst.data(), n * sizeof(float), sizeof(float),
                     lo, hi);
      }
      print_result("qsi8cx", v, u.name, m, n, k, calls, mr, nr, kr, sr, u.get_m_step(),
                   u.get_n_step(), checksum(dst));
    } else if (family == "qsi4c32") {
      const QGemmQsi4c32Ukernel& u = qgemm_qsi4c32_ukernel(v);
      if (k % kInt4Block) usage_error("qsi4c32: --k must be a multiple of 32");
      if (round_to_tile) m = round_up(m, u.get_m_step()), n = round_up(n, u.get_n_step());
      const size_t mr = u.get_mr(), nr = u.get_nr(), kr = u.get_kr(), sr = u.get_sr();
      const size_t bl = kInt4Block;
      const auto lhs = random_floats(m * k, rng), bias = random_floats(n, rng);
      const auto scales = random_floats(n * (k / bl), rng);
      const auto nib = random_bytes<uint8_t>(n * (k / 2), rng, 0, 255);
      std::vector<uint8_t> lp(layout::lhs_qai8dx_size(m, k, mr, kr));
      std::vector<uint8_t> rp(layout::rhs_qsi4c32_size(n, k, nr, bl));
      lhs_quant_pack_qai8dx_f32(m, k, mr, kr, sr, lhs.data(), k * sizeof(float), lp.data());
      rhs_pack_qsi4c32(n, k, bl, nr, kr, sr, nib.data(), k / 2, scales.data(), k / bl,
                       bias.data(), rp.data());
      std::vector<float> dst(m * n);
      for (size_t c = 0; c < calls; ++c) {
        u.run_matmul(m, n, k, bl, lp.data(), rp.data(), dst.data(), n * sizeof(float),
                     sizeof(float), lo, hi);
      }
      print_result("qsi4c32", v, u.name, m, n, k, calls, mr, nr, kr, sr, u.get_m_step(),
                   u.get_n_step(), checksum(dst));
    } else {
      usage_error("unknown family '" + family + "'");
    }
  } catch (const std::runtime_error& e) {
    std::fprintf(stderr, "kleidi_bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kleidi_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
