// arm_smoke: proves the Arm emulation harness end to end before the kernel library's own test
// exists. It links the provider's real CPU detection (providers/kleidi_sme2/src/cpu_features.cpp),
// prints what it found, runs one real instruction sequence per ISA the CPU has (SME2 FMOPA, i8mm
// SMMLA, dotprod SDOT, NEON FMLA) against scalar results, and checks the best variant
// (sme2 > i8mm > dotprod > neon > reference) and the SME vector length against what the caller
// expected. Exit status: 0 all good, 1 a check or an expectation failed, 2 bad usage.
//
//   arm_smoke [--expect-variant sme2|i8mm|dotprod|neon|reference] [--expect-svl BYTES]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "checks.h"
#include "cpu_features.h"

namespace {

const char* const kVariants[] = {"sme2", "i8mm", "dotprod", "neon", "reference"};

bool is_variant(const std::string& name) {
  for (const char* v : kVariants) {
    if (name == v) return true;
  }
  return false;
}

// The same preference order the kernel library's dispatcher uses.
std::string best_variant(const onnxplex::kleidi::CpuFeatures& f) {
  if (f.arch != "aarch64") return "reference";
  if (f.sme2) return "sme2";
  if (f.i8mm) return "i8mm";
  if (f.dotprod) return "dotprod";
  if (f.neon) return "neon";
  return "reference";
}

int usage(const char* argv0, const char* problem) {
  std::fprintf(stderr,
               "%s\nusage: %s [--expect-variant sme2|i8mm|dotprod|neon|reference] "
               "[--expect-svl BYTES]\n",
               problem, argv0);
  return 2;
}

struct Tally {
  int passed = 0;
  int failed = 0;
  void record(const char* name, bool ok, const std::string& detail) {
    std::printf("%s %s: %s\n", ok ? "PASS" : "FAIL", name, detail.c_str());
    (ok ? passed : failed)++;
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::string expect_variant;
  long long expect_svl = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--expect-variant" && i + 1 < argc) {
      expect_variant = argv[++i];
      if (!is_variant(expect_variant)) return usage(argv[0], "unknown variant");
    } else if (arg == "--expect-svl" && i + 1 < argc) {
      char* end = nullptr;
      expect_svl = std::strtoll(argv[++i], &end, 10);
      if (*end != '\0' || expect_svl < 0) return usage(argv[0], "--expect-svl takes a byte count");
    } else if (arg == "-h" || arg == "--help") {
      usage(argv[0], "arm_smoke: Arm feature detection and one instruction sequence per ISA");
      return 0;
    } else {
      return usage(argv[0], ("unknown argument: " + arg).c_str());
    }
  }

  const auto& features = onnxplex::kleidi::cpu_features();
  std::string names;
  for (const auto& n : features.names()) names += (names.empty() ? "" : " ") + n;
  const std::string variant = best_variant(features);
  std::printf("arch: %s\nfeatures: %s\nbest variant: %s\n", features.arch.c_str(),
              names.empty() ? "(none)" : names.c_str(), variant.c_str());

  Tally tally;
  [[maybe_unused]] auto not_built = [&](const char* name, const char* isa) {
    tally.record(name, false,
                 std::string("the CPU has ") + isa +
                     " but this build has no check for it (compiler lacked support: see the "
                     "CMake configure output)");
  };

#if defined(__aarch64__)
  uint64_t svl = 0;
  if (features.sme) {
    svl = arm_smoke::sme_vector_length_bytes();
    std::printf("SME streaming vector length: %llu bytes (%llu bits)\n",
                static_cast<unsigned long long>(svl), static_cast<unsigned long long>(svl * 8));
  }
  if (expect_svl >= 0) {
    const bool ok = features.sme && static_cast<long long>(svl) == expect_svl;
    tally.record("svl", ok,
                 "expected " + std::to_string(expect_svl) + " bytes, " +
                     (features.sme ? "RDSVL says " + std::to_string(svl) : std::string("no SME")));
  }
  if (features.neon) {
    const auto r = arm_smoke::check_neon_fmla();
    tally.record("neon_fmla", r.ok, r.detail);
  }
  if (features.dotprod) {
#if defined(ARM_SMOKE_HAVE_DOTPROD)
    const auto r = arm_smoke::check_dotprod_sdot();
    tally.record("dotprod_sdot", r.ok, r.detail);
#else
    not_built("dotprod_sdot", "dotprod");
#endif
  }
  if (features.i8mm) {
#if defined(ARM_SMOKE_HAVE_I8MM)
    const auto r = arm_smoke::check_i8mm_smmla();
    tally.record("i8mm_smmla", r.ok, r.detail);
#else
    not_built("i8mm_smmla", "i8mm");
#endif
  }
  if (features.sme2) {
#if defined(ARM_SMOKE_HAVE_SME2)
    const auto r = arm_smoke::check_sme2_fmopa();
    tally.record("sme2_fmopa", r.ok, r.detail);
#else
    not_built("sme2_fmopa", "SME2");
#endif
  }
#else
  if (expect_svl >= 0) tally.record("svl", false, "not an aarch64 build");
#endif

  if (!expect_variant.empty()) {
    tally.record("variant", variant == expect_variant,
                 "expected " + expect_variant + ", best available is " + variant);
  }
  std::printf("arm_smoke: %d passed, %d failed\n", tally.passed, tally.failed);
  return tally.failed == 0 ? 0 : 1;
}
