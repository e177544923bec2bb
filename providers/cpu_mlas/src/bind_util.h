// Helpers shared by the register_<family>.cpp files of _mlas_native.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sigmoid.h"

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

// A binding's `act` code as a PostAct (0 none, 1 SiLU, 2 HardSwish); ValueError otherwise.
inline PostAct post_act_arg(int act) {
  if (act < 0 || act > static_cast<int>(PostAct::kHardSwish)) {
    throw py::value_error("act must be 0 (none), 1 (SiLU) or 2 (HardSwish)");
  }
  return static_cast<PostAct>(act);
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

// A channels-last conv call planned once for one input shape: the weights, geometry, bias,
// clamp and variant bound, so a model's call passes only its arrays (pybind11 converting a
// dozen arguments cost more than a small conv's compute). Calling it checks x (and z) and
// returns a new output.
class NhwcConvPlan {
 public:
  std::vector<py::ssize_t> in_shape, out_shape;
  bool with_z = false;
  std::vector<py::object> keep;  // what `run` reads: packed weights, the bias array
  std::function<void(const float* x, float* y, const float* z, size_t threads)> run;

  py::array call(const py::array& x, const py::object& z_in, size_t threads) const {
    check(x, in_shape, "x");
    const float* zp = nullptr;
    if (with_z) {
      if (z_in.is_none()) throw py::value_error("this plan adds z: give it");
      const py::array z = z_in.cast<py::array>();
      check(z, out_shape, "z");
      zp = static_cast<const float*>(z.data());
    } else if (!z_in.is_none()) {
      throw py::value_error("this plan was made without z");
    }
    py::array_t<float> y(out_shape);
    const float* xp = static_cast<const float*>(x.data());
    float* yp = y.mutable_data();
    {
      py::gil_scoped_release release;
      run(xp, yp, zp, threads);
    }
    return std::move(y);
  }

 private:
  static void check(const py::array& a, const std::vector<py::ssize_t>& shape,
                    const char* what) {
    const bool same = a.ndim() == static_cast<py::ssize_t>(shape.size()) &&
                      std::equal(shape.begin(), shape.end(), a.shape());
    if (!is_float32(a) || !(a.flags() & py::array::c_style) || !same) {
      std::string want;
      for (py::ssize_t d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
      throw py::value_error(std::string(what) + " must be a C-contiguous float32 array of "
                            "shape (" + want + ")");
    }
  }
};

inline std::vector<py::ssize_t> shape_of(const py::array& a) {
  return std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim());
}

}  // namespace onnxplex::mlas::bind
