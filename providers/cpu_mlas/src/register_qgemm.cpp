// Bindings of the integer GEMM: arrays in, shape and dtype checks, GIL released around compute.
#include <memory>
#include <stdexcept>

#include "bind_util.h"
#include "qgemm.h"

namespace onnxplex::mlas::bind {

namespace {

QgemmIsa isa_arg(const std::string& name) {
  try {
    return name.empty() ? best_isa() : parse_isa(name);
  } catch (const std::invalid_argument& e) {
    throw py::value_error(e.what());
  }
}

void check_2d(const py::array& a, const char* what) {
  if (a.ndim() != 2) throw py::value_error(std::string(what) + " must be 2-D");
}

void pack_a_checked(const py::array& a_in, const py::object& a_zp, const PackedB& b,
                    size_t threads, PackedA& pa) {
  check_2d(a_in, "a");
  bool a_signed = false;
  const py::array a = int8_array(a_in, "a", a_signed);
  const auto m = static_cast<size_t>(a.shape(0)), k = static_cast<size_t>(a.shape(1));
  if (k != b.k) throw py::value_error("a has K=" + std::to_string(k) + ", b has K=" +
                                      std::to_string(b.k));
  const std::vector<int32_t> zp = int32_values(a_zp);
  if (!zp.empty() && zp.size() != 1 && zp.size() != m) {
    throw py::value_error("a_zero_point must have 1 or M values");
  }
  const void* ptr = a.data();
  py::gil_scoped_release release;
  pack_a(ptr, a_signed, m, k, zp.data(), zp.size(), b.isa, threads, pa);
}

}  // namespace

void register_qgemm(py::module_& m) {
  py::class_<PackedB, std::shared_ptr<PackedB>>(m, "PackedB",
      "B of an integer GEMM, centered, laid out for one qgemm variant (immutable).")
      .def_property_readonly("k", [](const PackedB& p) { return p.k; })
      .def_property_readonly("n", [](const PackedB& p) { return p.n; })
      .def_property_readonly("isa", [](const PackedB& p) { return isa_name(p.isa); })
      .def_property_readonly("nbytes", [](const PackedB& p) { return p.data.size(); });

  m.def("pack_b", [](const py::array& b_in, const py::object& zero_point,
                     const std::string& isa, size_t threads) {
    check_2d(b_in, "b");
    bool b_signed = false;
    const py::array b = int8_array(b_in, "b", b_signed);
    const std::vector<int32_t> zp = int32_values(zero_point);
    const auto k = static_cast<size_t>(b.shape(0)), n = static_cast<size_t>(b.shape(1));
    if (!zp.empty() && zp.size() != 1 && zp.size() != n) {
      throw py::value_error("b_zero_point must have 1 or N values");
    }
    const QgemmIsa v = isa_arg(isa);
    const void* ptr = b.data();
    py::gil_scoped_release release;
    return std::make_shared<PackedB>(
        pack_b(ptr, b_signed, k, n, n, zp.data(), zp.size(), v, threads));
  }, py::arg("b"), py::arg("zero_point") = py::none(), py::arg("isa") = "",
     py::arg("threads") = 1,
     "Packs int8/uint8 B [K, N] with its zero point (None, 1 or N values) for a variant "
     "('' = the best this CPU runs), on up to `threads` threads (0 = all).");

  m.def("qgemm_i32", [](const py::array& a, const py::object& a_zp, const PackedB& b,
                        size_t threads) {
    PackedA pa;
    pack_a_checked(a, a_zp, b, threads, pa);
    py::array_t<int32_t> c({static_cast<py::ssize_t>(pa.m), static_cast<py::ssize_t>(b.n)});
    int32_t* out = c.mutable_data();
    {
      py::gil_scoped_release release;
      qgemm_i32(pa, b, out, b.n, threads);
    }
    return c;
  }, py::arg("a"), py::arg("a_zero_point"), py::arg("b"), py::arg("threads") = 0,
     "(A - a_zp) @ (B - b_zp) in int32 (a_zp: None, 1 or M values; threads 0 = all).");

  m.def("qgemm_f32", [](const py::array& a, const py::object& a_zp, const PackedB& b,
                        const py::object& scale, const py::object& bias, size_t threads) {
    const std::vector<float> s = float_values(scale), bi = float_values(bias);
    if (s.size() != 1 && s.size() != b.n) throw py::value_error("scale must have 1 or N values");
    if (!bi.empty() && bi.size() != b.n) throw py::value_error("bias must have N values");
    PackedA pa;
    pack_a_checked(a, a_zp, b, threads, pa);
    py::array_t<float> c({static_cast<py::ssize_t>(pa.m), static_cast<py::ssize_t>(b.n)});
    float* out = c.mutable_data();
    {
      py::gil_scoped_release release;
      qgemm_f32(pa, b, s.data(), s.size(), bi.empty() ? nullptr : bi.data(), out, b.n,
                threads);
    }
    return c;
  }, py::arg("a"), py::arg("a_zero_point"), py::arg("b"), py::arg("scale"),
     py::arg("bias") = py::none(), py::arg("threads") = 0,
     "float32((A - a_zp) @ (B - b_zp)) * scale (+ bias); scale 1 or N values.");

  m.def("dynamic_qgemm_f32", [](const py::array_t<float, py::array::c_style |
                                                        py::array::forcecast>& a,
                                const PackedB& b, const py::object& b_scale,
                                const py::object& bias, size_t threads) {
    if (a.ndim() != 2) throw py::value_error("a must be 2-D");
    const auto m = static_cast<size_t>(a.shape(0)), k = static_cast<size_t>(a.shape(1));
    if (k != b.k) throw py::value_error("a has K=" + std::to_string(k) + ", b has K=" +
                                        std::to_string(b.k));
    std::vector<float> s = float_values(b_scale);
    const std::vector<float> bi = float_values(bias);
    if (s.size() != 1 && s.size() != b.n) {
      throw py::value_error("b_scale must have 1 or N values");
    }
    if (!bi.empty() && bi.size() != b.n) throw py::value_error("bias must have N values");
    py::array_t<float> c({static_cast<py::ssize_t>(m), static_cast<py::ssize_t>(b.n)});
    float* out = c.mutable_data();
    const float* x = a.data();
    float a_scale = 1.0f;
    int32_t a_zp = 0;
    {
      py::gil_scoped_release release;
      PackedA pa;
      quantize_pack_a(x, m, k, b.isa, threads, pa, a_scale, a_zp);
      for (float& v : s) v = a_scale * v;  // float32(a_scale * b_scale), as numpy
      qgemm_f32(pa, b, s.data(), s.size(), bi.empty() ? nullptr : bi.data(), out, b.n,
                threads);
    }
    return py::make_tuple(c, a_scale, a_zp);
  }, py::arg("a"), py::arg("b"), py::arg("b_scale"), py::arg("bias") = py::none(),
     py::arg("threads") = 0,
     "DynamicQuantizeLinear(a) (uint8), then its integer product with B, times "
     "a_scale * b_scale (+ bias). Returns (y, a_scale, a_zero_point).");
}

}  // namespace onnxplex::mlas::bind
