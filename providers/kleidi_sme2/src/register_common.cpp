// Feature detection, variant selection and the packed-weights type.
#include <pybind11/stl.h>

#include "bind_util.h"
#include "cpu_features.h"

namespace onnxplex::kleidi::bind {
namespace {

constexpr Family kFamilies[] = {Family::gemm_f32, Family::igemm_f32, Family::qgemm_qsi8cx,
                                Family::qgemm_qsi4c32, Family::gemm_f16};

Family family_arg(const std::string& name) {
  for (Family f : kFamilies) {
    if (name == family_name(f)) return f;
  }
  throw py::value_error("unknown family '" + name +
                        "'; use gemm_f32, igemm_f32, qgemm_qsi8cx, qgemm_qsi4c32 or gemm_f16");
}

// y = clamp(x, lo, hi) over a contiguous float32 buffer (kept from the first native build).
py::array_t<float> clamp_f32(py::array_t<float, py::array::c_style | py::array::forcecast> x,
                             float lo, float hi) {
  if (lo > hi) throw std::invalid_argument("clamp_f32: lo > hi");
  py::array_t<float> y(x.request().shape);
  const float* src = x.data();
  float* dst = y.mutable_data();
  const py::ssize_t n = x.size();
  {
    py::gil_scoped_release release;
    for (py::ssize_t i = 0; i < n; ++i) {
      const float v = src[i];
      dst[i] = v < lo ? lo : (v > hi ? hi : v);
    }
  }
  return y;
}

}  // namespace

void register_common(py::module_& m) {
  m.def("cpu_features", [] {
    const auto& f = cpu_features();
    py::dict d;
    d["arch"] = f.arch;
    d["features"] = f.names();
    return d;
  }, "Detected CPU architecture and features: {'arch': str, 'features': [str, ...]}");

  m.def("clamp_f32", &clamp_f32, py::arg("x"), py::arg("lo"), py::arg("hi"),
        "Elementwise clamp of a float32 array (portable reference).");

  m.def("variants", [] {
    py::dict out;
    for (Family f : kFamilies) {
      py::list compiled;
      for (Variant v : compiled_variants(f)) compiled.append(variant_name(v));
      py::list usable;
      for (Variant v : compiled_variants(f)) {
        if (cpu_supports(f, v)) usable.append(variant_name(v));
      }
      py::dict d;
      d["compiled"] = compiled;
      d["supported"] = usable;
      d["selected"] = variant_name(select_variant(f));
      out[family_name(f)] = d;
    }
    return out;
  }, "Per family: compiled variants, those this CPU runs, and the one dispatch selects "
     "(honours ONNXPLEX_KLEIDI_VARIANT; RuntimeError if that names an unusable variant).");

  m.def("ukernel_info", [](const std::string& family, std::optional<std::string> variant) {
    const Family f = family_arg(family);
    const UkernelInfo i = ukernel_info(f, variant_arg(f, variant));
    py::dict d;
    d["name"] = i.name;
    d["variant"] = variant_name(i.variant);
    d["m_step"] = i.m_step;
    d["n_step"] = i.n_step;
    d["mr"] = i.mr;
    d["nr"] = i.nr;
    d["kr"] = i.kr;
    d["sr"] = i.sr;
    return d;
  }, py::arg("family"), py::arg("variant") = py::none(),
     "Tile parameters of a family's variant (default: the selected one).");

  py::class_<PackedRhs>(m, "PackedRhs",
                        "Weights packed once for one variant of one kernel family.")
      .def_property_readonly("family", [](const PackedRhs& p) { return family_name(p.family); })
      .def_property_readonly("variant", [](const PackedRhs& p) { return variant_name(p.variant); })
      .def_readonly("n", &PackedRhs::n)
      .def_readonly("k", &PackedRhs::k)
      .def_property_readonly("nbytes", [](const PackedRhs& p) { return p.data.size(); })
      .def_property_readonly("data", [](py::object self) {
        const auto& p = self.cast<const PackedRhs&>();
        py::array_t<uint8_t> view({static_cast<py::ssize_t>(p.data.size())}, {1},
                                  p.data.data(), self);
        py::detail::array_proxy(view.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
        return view;
      }, "Read-only uint8 view of the packed bytes (keeps the object alive).")
      .def("__repr__", [](const PackedRhs& p) {
        return "<PackedRhs " + std::string(family_name(p.family)) + " " +
               variant_name(p.variant) + " n=" + std::to_string(p.n) + " k=" +
               std::to_string(p.k) + " " + std::to_string(p.data.size()) + " bytes>";
      });
}

}  // namespace onnxplex::kleidi::bind
