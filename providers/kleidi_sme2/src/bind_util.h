// Helpers of the pybind11 layer: array checks (no copies, no casts), variant parsing, and the
// families' registration functions that module.cpp lists.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <optional>
#include <stdexcept>
#include <string>

#include "dispatch.h"
#include "drivers.h"

namespace onnxplex::kleidi::bind {

namespace py = pybind11;

// The array itself, if it has dtype `want`, is C-contiguous and has `ndim` dimensions (any ndim
// if -1); else ValueError naming the function and the argument. Never copies.
inline py::array checked(const py::object& obj, const char* fn, const char* arg, int ndim,
                         const py::dtype& want) {
  if (!py::isinstance<py::array>(obj)) {
    throw py::value_error(std::string(fn) + ": " + arg + " must be a numpy array, got " +
                          std::string(py::str(py::type::of(obj).attr("__name__"))));
  }
  auto a = py::reinterpret_borrow<py::array>(obj);
  if (!a.dtype().is(want) && !a.dtype().equal(want)) {
    throw py::value_error(std::string(fn) + ": " + arg + " must have dtype " +
                          std::string(py::str(want)) + ", got " + std::string(py::str(a.dtype())));
  }
  if (!(a.flags() & py::array::c_style)) {
    throw py::value_error(std::string(fn) + ": " + arg +
                          " must be C-contiguous (use np.ascontiguousarray)");
  }
  if (ndim >= 0 && a.ndim() != ndim) {
    throw py::value_error(std::string(fn) + ": " + arg + " must be " + std::to_string(ndim) +
                          "-D, got " + std::to_string(a.ndim()) + "-D");
  }
  return a;
}
template <class T>
py::array checked(const py::object& obj, const char* fn, const char* arg, int ndim) {
  return checked(obj, fn, arg, ndim, py::dtype::of<T>());
}

// numpy's float16, whose elements the fp16 family takes as f16_bits.
inline py::dtype float16_dtype() { return py::dtype("float16"); }

inline void expect_dim(const py::array& a, int axis, size_t want, const char* fn,
                       const char* what) {
  if (static_cast<size_t>(a.shape(axis)) != want) {
    throw py::value_error(std::string(fn) + ": " + what + " must have size " +
                          std::to_string(want) + " on axis " + std::to_string(axis) + ", got " +
                          std::to_string(a.shape(axis)));
  }
}

template <class T>
const T* ptr(const py::array& a) { return static_cast<const T*>(a.data()); }

// Python's variant argument: None = dispatch's choice (environment variable honoured).
inline Variant variant_arg(Family f, const std::optional<std::string>& name) {
  if (!name) return select_variant(f);
  const auto v = parse_variant(*name);
  if (!v) {
    throw py::value_error("unknown variant '" + *name +
                          "'; use reference, neon, dotprod, i8mm or sme2");
  }
  return *v;
}

inline size_t threads_arg(int threads) {
  if (threads < 1) throw py::value_error("threads must be >= 1");
  return static_cast<size_t>(threads);
}

inline void expect_family(const PackedRhs& p, Family f, const char* fn) {
  if (p.family != f) {
    throw py::value_error(std::string(fn) + ": weights were packed for " + family_name(p.family) +
                          "; use the matching pack_* function");
  }
}

void register_common(py::module_& m);
void register_gemm_f32(py::module_& m);
void register_gemm_f16(py::module_& m);
void register_conv_f32(py::module_& m);
void register_qgemm_qsi8cx(py::module_& m);
void register_qgemm_qsi4c32(py::module_& m);

}  // namespace onnxplex::kleidi::bind
