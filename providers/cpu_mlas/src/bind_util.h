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

// A binding's `act` code as a PostAct (0 none, 1 SiLU, 2 HardSwish, 3 HardSigmoid with alpha
// 1/6 and beta 0.5); ValueError otherwise.
inline PostAct post_act_arg(int act) {
  if (act < 0 || act > static_cast<int>(PostAct::kHardSigmoid)) {
    throw py::value_error("act must be 0 (none), 1 (SiLU), 2 (HardSwish) or 3 (HardSigmoid)");
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
  // A plan made with an input scale (a 1x1 conv reading x times a per-image channel scale s,
  // [N or 1, 1, 1, C]: a squeeze-excite gate) runs this instead, s's images s_step apart
  // (0: one for all).
  bool with_scale = false;
  std::function<void(const float* x, float* y, const float* z, const float* s, size_t s_step,
                     size_t threads)>
      run_scaled;

  py::array call(const py::array& x, const py::object& z_in, size_t threads,
                 const py::object& s_in) const {
    check(x, in_shape, "x");
    const float* sp = nullptr;
    size_t s_step = 0;
    if (with_scale) {
      if (s_in.is_none()) throw py::value_error("this plan scales x: give s");
      const py::array sa = s_in.cast<py::array>();
      const py::ssize_t c = in_shape.back();
      if (!is_float32(sa) || !(sa.flags() & py::array::c_style) || sa.ndim() != 4 ||
          (sa.shape(0) != 1 && sa.shape(0) != in_shape[0]) || sa.shape(1) != 1 ||
          sa.shape(2) != 1 || sa.shape(3) != c) {
        throw py::value_error("s must be a C-contiguous float32 array of shape (N or 1, 1, 1, " +
                              std::to_string(c) + ")");
      }
      sp = static_cast<const float*>(sa.data());
      s_step = sa.shape(0) == 1 ? 0 : static_cast<size_t>(c);
    } else if (!s_in.is_none()) {
      throw py::value_error("this plan was made without s");
    }
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
      if (with_scale) {
        run_scaled(xp, yp, zp, sp, s_step, threads);
      } else {
        run(xp, yp, zp, threads);
      }
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
