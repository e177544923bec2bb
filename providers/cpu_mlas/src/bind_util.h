// Helpers shared by the register_<family>.cpp files of _mlas_native.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

namespace onnxplex::mlas::bind {

namespace py = pybind11;

void register_common(py::module_& m);
void register_qgemm(py::module_& m);
void register_sgemm(py::module_& m);

// A C-contiguous view of an int8 or uint8 array; sets `is_signed`. Throws TypeError otherwise.
inline py::array int8_array(const py::array& x, const char* what, bool& is_signed) {
  // By kind and size: equal dtypes need not be the same object.
  const py::dtype dt = x.dtype();
  if (dt.itemsize() == 1 && dt.kind() == 'i') {
    is_signed = true;
  } else if (dt.itemsize() == 1 && dt.kind() == 'u') {
    is_signed = false;
  } else {
    throw py::type_error(std::string(what) + " must be int8 or uint8");
  }
  return py::array::ensure(x, py::array::c_style);
}

// Whether x holds native float32 values (by kind, size and byte order: equal dtypes need not be
// the same object, so py::dtype::is would refuse some float32 arrays).
inline bool is_float32(const py::array& x) {
  const py::dtype dt = x.dtype();
  return dt.kind() == 'f' && dt.itemsize() == 4 && dt.attr("isnative").cast<bool>();
}

// An optional integer array (zero points) as int32 values; empty when None.
inline std::vector<int32_t> int32_values(const py::object& x) {
  std::vector<int32_t> out;
  if (x.is_none()) return out;
  auto arr = py::array_t<int32_t, py::array::c_style | py::array::forcecast>::ensure(x);
  if (!arr) throw py::type_error("zero point must be an integer array");
  out.assign(arr.data(), arr.data() + arr.size());
  return out;
}

// An optional float32 array; empty when None.
inline std::vector<float> float_values(const py::object& x) {
  std::vector<float> out;
  if (x.is_none()) return out;
  auto arr = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(x);
  if (!arr) throw py::type_error("expected a float32 array");
  out.assign(arr.data(), arr.data() + arr.size());
  return out;
}

}  // namespace onnxplex::mlas::bind
