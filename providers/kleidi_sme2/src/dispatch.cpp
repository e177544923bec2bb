// The variant tables and the selection rule. Adding a variant = one registration line in its
// family's table below (plus its declaration in variants.h and its source in CMake).
#include "dispatch.h"

#include <cstdlib>
#include <stdexcept>

#include "cpu_features.h"
#include "variants.h"

// One macro per ISA: expands to its argument followed by a comma when that ISA's translation
// units are compiled in, to nothing otherwise.
#if ONNXPLEX_KLEIDI_HAVE_SME2
#define KLEIDI_IF_SME2(x) x,
#else
#define KLEIDI_IF_SME2(x)
#endif
#if ONNXPLEX_KLEIDI_HAVE_I8MM
#define KLEIDI_IF_I8MM(x) x,
#else
#define KLEIDI_IF_I8MM(x)
#endif
#if ONNXPLEX_KLEIDI_HAVE_DOTPROD
#define KLEIDI_IF_DOTPROD(x) x,
#else
#define KLEIDI_IF_DOTPROD(x)
#endif
#if ONNXPLEX_KLEIDI_HAVE_NEON
#define KLEIDI_IF_NEON(x) x,
#else
#define KLEIDI_IF_NEON(x)
#endif

namespace onnxplex::kleidi {
namespace {

// ---- The registry: best first, reference last. ----------------------------------------------
const GemmF32Ukernel* const kGemmF32[] = {
    KLEIDI_IF_SME2(&gemm_f32_sme2)
    KLEIDI_IF_NEON(&gemm_f32_neon)
    &gemm_f32_reference,
};
const IGemmF32Ukernel* const kIGemmF32[] = {
    KLEIDI_IF_SME2(&igemm_f32_sme2)
    KLEIDI_IF_NEON(&igemm_f32_neon)
    &igemm_f32_reference,
};
const QGemmQsi8cxUkernel* const kQGemmQsi8cx[] = {
    KLEIDI_IF_SME2(&qgemm_qsi8cx_sme2)
    KLEIDI_IF_I8MM(&qgemm_qsi8cx_i8mm)
    KLEIDI_IF_DOTPROD(&qgemm_qsi8cx_dotprod)
    &qgemm_qsi8cx_reference,
};
const QGemmQsi4c32Ukernel* const kQGemmQsi4c32[] = {
    KLEIDI_IF_SME2(&qgemm_qsi4c32_sme2)
    KLEIDI_IF_I8MM(&qgemm_qsi4c32_i8mm)
    KLEIDI_IF_DOTPROD(&qgemm_qsi4c32_dotprod)
    &qgemm_qsi4c32_reference,
};
const GemmF16Ukernel* const kGemmF16[] = {
    KLEIDI_IF_SME2(&gemm_f16_sme2)
    KLEIDI_IF_NEON(&gemm_f16_neon)
    &gemm_f16_reference,
};

// The variant list per family (what a complete build has).
std::vector<Variant> planned(Family f) {
  switch (f) {
    case Family::gemm_f32:
    case Family::igemm_f32:
    case Family::gemm_f16:
      return {Variant::sme2, Variant::neon, Variant::reference};
    case Family::qgemm_qsi8cx:
    case Family::qgemm_qsi4c32:
      return {Variant::sme2, Variant::i8mm, Variant::dotprod, Variant::reference};
  }
  return {Variant::reference};
}

template <class U, size_t N>
const U* find(const U* const (&table)[N], Variant v) {
  for (const U* u : table) {
    if (u->variant == v) return u;
  }
  return nullptr;
}

template <class U, size_t N>
std::vector<Variant> variants_of(const U* const (&table)[N]) {
  std::vector<Variant> out;
  for (const U* u : table) out.push_back(u->variant);
  return out;
}

// What a family's variant needs beyond its level's feature (see cpu_supports(Family, Variant)),
// as a clause for error messages; empty if nothing.
const char* extra_need(Family f, Variant v) {
  if (f == Family::gemm_f16 && v == Variant::neon) {
    return " (it needs FEAT_FP16, half-precision vector arithmetic)";
  }
  return "";
}

template <class U, size_t N>
const U& get(const U* const (&table)[N], Family f, Variant v) {
  const U* u = find(table, v);
  if (!u) {
    throw std::runtime_error(std::string("kleidi: the ") + variant_name(v) + " variant of " +
                             family_name(f) + " is not compiled into this build");
  }
  if (!cpu_supports(f, v)) {
    throw std::runtime_error(std::string("kleidi: this CPU cannot run the ") + variant_name(v) +
                             " variant of " + family_name(f) + extra_need(f, v));
  }
  return *u;
}

constexpr const char* kNames[kVariantCount] = {"reference", "neon", "dotprod", "i8mm", "sme2"};

std::optional<Variant> forced_from_env() {
  const char* env = std::getenv(kVariantEnv);
  if (!env || !*env) return std::nullopt;
  const auto v = parse_variant(env);
  if (!v) {
    throw std::runtime_error(std::string(kVariantEnv) + "='" + env +
                             "' is not a variant; use reference, neon, dotprod, i8mm or sme2");
  }
  return v;
}

}  // namespace

const char* variant_name(Variant v) { return kNames[static_cast<int>(v)]; }

const char* family_name(Family f) {
  switch (f) {
    case Family::gemm_f32: return "gemm_f32";
    case Family::igemm_f32: return "igemm_f32";
    case Family::qgemm_qsi8cx: return "qgemm_qsi8cx";
    case Family::qgemm_qsi4c32: return "qgemm_qsi4c32";
    case Family::gemm_f16: return "gemm_f16";
  }
  return "?";
}

std::optional<Variant> parse_variant(const std::string& name) {
  for (int i = 0; i < kVariantCount; ++i) {
    if (name == kNames[i]) return static_cast<Variant>(i);
  }
  return std::nullopt;
}

bool cpu_supports(Variant v) {
  const CpuFeatures& cpu = cpu_features();
  switch (v) {
    case Variant::reference: return true;
    case Variant::neon: return cpu.neon;
    case Variant::dotprod: return cpu.neon && cpu.dotprod;
    case Variant::i8mm: return cpu.neon && cpu.i8mm;
    case Variant::sme2: return cpu.sme2;
  }
  return false;
}

bool cpu_supports(Family f, Variant v) {
  if (!cpu_supports(v)) return false;
  // The NEON fp16 kernel computes on 8 fp16 lanes (FEAT_FP16); SME implies FEAT_FP16, and the
  // widening FMOPA is base SME, so the SME2 variant needs nothing more.
  if (f == Family::gemm_f16 && v == Variant::neon) return cpu_features().fp16;
  return true;
}

std::vector<Variant> planned_variants(Family f) { return planned(f); }

std::vector<Variant> compiled_variants(Family f) {
  switch (f) {
    case Family::gemm_f32: return variants_of(kGemmF32);
    case Family::igemm_f32: return variants_of(kIGemmF32);
    case Family::qgemm_qsi8cx: return variants_of(kQGemmQsi8cx);
    case Family::qgemm_qsi4c32: return variants_of(kQGemmQsi4c32);
    case Family::gemm_f16: return variants_of(kGemmF16);
  }
  return {};
}

bool compiled_in(Variant v) {
  for (int f = 0; f < kFamilyCount; ++f) {
    for (Variant c : compiled_variants(static_cast<Family>(f))) {
      if (c == v) return true;
    }
  }
  return false;
}

Variant select_variant(Family f, std::optional<Variant> forced) {
  if (!forced) forced = forced_from_env();
  if (forced) {
    if (!compiled_in(*forced)) {
      throw std::runtime_error(std::string("kleidi: variant '") + variant_name(*forced) +
                               "' was requested but is not compiled into this build "
                               "(compiled: reference" +
                               (compiled_in(Variant::neon) ? ", neon" : "") +
                               (compiled_in(Variant::dotprod) ? ", dotprod" : "") +
                               (compiled_in(Variant::i8mm) ? ", i8mm" : "") +
                               (compiled_in(Variant::sme2) ? ", sme2" : "") + ")");
    }
    if (!cpu_supports(*forced)) {
      throw std::runtime_error(std::string("kleidi: variant '") + variant_name(*forced) +
                               "' was requested but this CPU does not support it");
    }
  }
  // compiled_variants is best first; take the first the CPU runs and the cap allows.
  for (Variant v : compiled_variants(f)) {
    if (forced && static_cast<int>(v) > static_cast<int>(*forced)) continue;
    if (cpu_supports(f, v)) return v;
  }
  return Variant::reference;
}

const GemmF32Ukernel& gemm_f32_ukernel(Variant v) { return get(kGemmF32, Family::gemm_f32, v); }
const IGemmF32Ukernel& igemm_f32_ukernel(Variant v) {
  return get(kIGemmF32, Family::igemm_f32, v);
}
const QGemmQsi8cxUkernel& qgemm_qsi8cx_ukernel(Variant v) {
  return get(kQGemmQsi8cx, Family::qgemm_qsi8cx, v);
}
const QGemmQsi4c32Ukernel& qgemm_qsi4c32_ukernel(Variant v) {
  return get(kQGemmQsi4c32, Family::qgemm_qsi4c32, v);
}
const GemmF16Ukernel& gemm_f16_ukernel(Variant v) { return get(kGemmF16, Family::gemm_f16, v); }

namespace {
template <class U>
UkernelInfo info_of(const U& u) {
  return {u.name,         u.variant,    u.get_m_step(), u.get_n_step(),
          u.get_mr(),     u.get_nr(),   u.get_kr(),     u.get_sr()};
}
}  // namespace

UkernelInfo ukernel_info(Family f, Variant v) {
  switch (f) {
    case Family::gemm_f32: return info_of(gemm_f32_ukernel(v));
    case Family::igemm_f32: return info_of(igemm_f32_ukernel(v));
    case Family::qgemm_qsi8cx: return info_of(qgemm_qsi8cx_ukernel(v));
    case Family::qgemm_qsi4c32: return info_of(qgemm_qsi4c32_ukernel(v));
    case Family::gemm_f16: return info_of(gemm_f16_ukernel(v));
  }
  throw std::invalid_argument("kleidi: unknown family");
}

}  // namespace onnxplex::kleidi
