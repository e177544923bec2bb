// Table of contents of the _kleidi extension: each family registers itself from its own file.
// For now: CPU-feature detection and one trivial kernel that exercises the native build path.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>

#include "cpu_features.h"

namespace py = pybind11;
using onnxplex::kleidi::cpu_features;

namespace {

// y = clamp(x, lo, hi) over a contiguous float32 buffer: the smallest useful kernel, so the
// build, the GIL release and the error path are all exercised from day one.
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

PYBIND11_MODULE(_kleidi, m) {
  m.doc() = "onnxplex Kleidi-style micro-kernels (native part of the kleidi_sme2 provider)";
  m.def("cpu_features", [] {
    const auto& f = cpu_features();
    py::dict d;
    d["arch"] = f.arch;
    d["features"] = f.names();
    return d;
  }, "Detected CPU architecture and features: {'arch': str, 'features': [str, ...]}");
  m.def("clamp_f32", &clamp_f32, py::arg("x"), py::arg("lo"), py::arg("hi"),
        "Elementwise clamp of a float32 array (portable reference).");
}
