// Run-time selection of micro-kernel variants: the one place that decides.
//
// Preference: sme2 > i8mm > dotprod > neon > reference, restricted to the variants compiled into
// this library that the CPU supports (cpu_features()). ONNXPLEX_KLEIDI_VARIANT=<name> forces a
// level: each family then takes its best variant at or below that level (a family without an
// i8mm variant, e.g. fp32 GEMM, falls to neon). Forcing a name that is unknown, not compiled
// into this build, or not supported by this CPU throws std::runtime_error naming the reason.
// A family's variant may need more than its level's feature: the fp16 GEMM's NEON variant also
// needs FEAT_FP16 (half-precision vector arithmetic, Armv8.2), so on an Armv8.0 CPU such as
// Cortex-A72 that family falls to its reference (cpu_supports(Family, Variant)).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ukernel.h"

namespace onnxplex::kleidi {

constexpr const char* kVariantEnv = "ONNXPLEX_KLEIDI_VARIANT";

const char* variant_name(Variant v);
const char* family_name(Family f);
std::optional<Variant> parse_variant(const std::string& name);  // nullopt if unknown

// Whether this CPU can execute a variant's instructions (the level's own feature).
bool cpu_supports(Variant v);
// Whether this CPU can run family f's variant v: cpu_supports(v) plus what that family's
// variant needs besides (gemm_f16/neon: FEAT_FP16).
bool cpu_supports(Family f, Variant v);
// Whether any family has this variant compiled in.
bool compiled_in(Variant v);

// Variants the family is designed to have (the list), best first; the test executable
// uses it to tell "not selected" from "not written yet".
std::vector<Variant> planned_variants(Family f);
// Compiled variants of a family, best first (reference last).
std::vector<Variant> compiled_variants(Family f);

// The variant dispatch picks for a family: `forced` if given, else the environment variable,
// else the best the CPU supports. Throws std::runtime_error as described above.
Variant select_variant(Family f, std::optional<Variant> forced = std::nullopt);

// The kernel of a variant; throws std::runtime_error if it is not compiled in or the CPU lacks
// it (exact match, no fall-back: packed weights are tied to one variant).
const GemmF32Ukernel& gemm_f32_ukernel(Variant v);
const IGemmF32Ukernel& igemm_f32_ukernel(Variant v);
const QGemmQsi8cxUkernel& qgemm_qsi8cx_ukernel(Variant v);
const QGemmQsi4c32Ukernel& qgemm_qsi4c32_ukernel(Variant v);
const GemmF16Ukernel& gemm_f16_ukernel(Variant v);

// Common view of any family's tile parameters (for bindings, tests, logging).
struct UkernelInfo {
  std::string name;
  Variant variant;
  size_t m_step, n_step, mr, nr, kr, sr;
};
UkernelInfo ukernel_info(Family f, Variant v);

}  // namespace onnxplex::kleidi
