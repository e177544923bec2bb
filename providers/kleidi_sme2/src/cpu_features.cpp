#include "cpu_features.h"

#if defined(__linux__) && defined(__aarch64__)
#include <sys/auxv.h>
#endif
#if defined(__APPLE__) && defined(__aarch64__)
#include <sys/sysctl.h>
#endif
#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#endif

namespace onnxplex::kleidi {
namespace {

#if defined(__linux__) && defined(__aarch64__)
// Bit positions from the Linux uapi <asm/hwcap.h>; spelled out so older headers still build.
constexpr unsigned long kHwcapFp = 1UL << 0;
constexpr unsigned long kHwcapAsimd = 1UL << 1;
constexpr unsigned long kHwcapFphp = 1UL << 9;
constexpr unsigned long kHwcapAsimdHp = 1UL << 10;
constexpr unsigned long kHwcapAsimdDp = 1UL << 20;
constexpr unsigned long kHwcapSve = 1UL << 22;
constexpr unsigned long kHwcap2Sve2 = 1UL << 1;
constexpr unsigned long kHwcap2I8mm = 1UL << 13;
constexpr unsigned long kHwcap2Bf16 = 1UL << 14;
constexpr unsigned long kHwcap2Sme = 1UL << 23;
constexpr unsigned long kHwcap2Sme2 = 1UL << 37;
#endif

#if defined(__APPLE__) && defined(__aarch64__)
bool sysctl_flag(const char* name) {
  int value = 0;
  size_t size = sizeof(value);
  return sysctlbyname(name, &value, &size, nullptr, 0) == 0 && value != 0;
}
#endif

CpuFeatures probe() {
  CpuFeatures f;
#if defined(__aarch64__)
  f.arch = "aarch64";
#if defined(__linux__)
  const unsigned long hw = getauxval(AT_HWCAP);
  const unsigned long hw2 = getauxval(AT_HWCAP2);
  f.neon = (hw & kHwcapAsimd) && (hw & kHwcapFp);
  // FEAT_FP16 brings both scalar (FPHP) and vector (ASIMDHP) half-precision arithmetic; the
  // fp16 NEON kernel needs the vector half.
  f.fp16 = (hw & kHwcapFphp) && (hw & kHwcapAsimdHp);
  f.dotprod = hw & kHwcapAsimdDp;
  f.sve = hw & kHwcapSve;
  f.sve2 = hw2 & kHwcap2Sve2;
  f.i8mm = hw2 & kHwcap2I8mm;
  f.bf16 = hw2 & kHwcap2Bf16;
  f.sme = hw2 & kHwcap2Sme;
  f.sme2 = hw2 & kHwcap2Sme2;
#elif defined(__APPLE__)
  f.neon = true;
  f.fp16 = sysctl_flag("hw.optional.arm.FEAT_FP16");
  f.dotprod = sysctl_flag("hw.optional.arm.FEAT_DotProd");
  f.i8mm = sysctl_flag("hw.optional.arm.FEAT_I8MM");
  f.bf16 = sysctl_flag("hw.optional.arm.FEAT_BF16");
  f.sme = sysctl_flag("hw.optional.arm.FEAT_SME");
  f.sme2 = sysctl_flag("hw.optional.arm.FEAT_SME2");
#else
  f.neon = true;  // Advanced SIMD is mandatory in AArch64
#endif
#elif defined(__x86_64__) || defined(_M_X64)
  f.arch = "x86_64";
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = b & (1u << 5);
    f.avx512f = b & (1u << 16);
    f.avx512_vnni = c & (1u << 11);
    f.amx_int8 = d & (1u << 25);
  }
#else
  f.arch = "unknown";
#endif
  return f;
}

}  // namespace

std::vector<std::string> CpuFeatures::names() const {
  std::vector<std::string> out;
  const std::pair<const char*, bool> all[] = {
      {"neon", neon}, {"dotprod", dotprod}, {"i8mm", i8mm},         {"fp16", fp16},
      {"bf16", bf16}, {"sve", sve},         {"sve2", sve2},         {"sme", sme},
      {"sme2", sme2}, {"avx2", avx2},       {"avx512f", avx512f},   {"avx512_vnni", avx512_vnni},
      {"amx_int8", amx_int8},
  };
  for (const auto& [name, present] : all) {
    if (present) out.emplace_back(name);
  }
  return out;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = probe();
  return features;
}

}  // namespace onnxplex::kleidi
