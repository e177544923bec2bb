#include <algorithm>
#include <cstring>
#include <vector>

#include "bind_util.h"
#include "cpu_features.h"
#include "parallel.h"
#include "qgemm.h"

namespace onnxplex::mlas::bind {

void register_common(py::module_& m) {
  m.def("cpu_features", [] {
    const CpuFeatures& f = cpu_features();
    py::dict d;
    d["avx2"] = f.avx2;
    d["avx512f"] = f.avx512f;
    d["avx512_vnni"] = f.avx512_vnni;
    d["amx_int8"] = f.amx_int8;
    return d;
  }, "The CPU features the native kernels dispatch on.");
  m.def("isa", [] { return std::string(isa_name(best_isa())); },
        "The qgemm variant used by default (ONNXPLEX_MLAS_ISA may force a lower one).");
  m.def("isa_available", [](const std::string& name) {
    try {
      parse_isa(name);
      return true;
    } catch (const std::invalid_argument&) {
      return false;
    }
  }, py::arg("name"), "Whether this build has the qgemm variant and this CPU runs it.");

  // n bytes: a channels-last concat's rows are a few hundred bytes a position, where a libc
  // call per row costs about as much as the copy; 64-byte pieces are inlined as vector moves.
  auto copy_row = [](char* d, const char* s, size_t n) {
    for (; n >= 64; n -= 64, d += 64, s += 64) __builtin_memcpy(d, s, 64);
    if (n != 0) std::memcpy(d, s, n);
  };
  m.def("concat_rows", [copy_row](const py::sequence& xs_in, py::array& out, size_t outer,
                          size_t threads) {
    // out, as `outer` rows, is each input's row after the other's (Concat along an axis:
    // `outer` the product of the dims before it): memcpy per row and input, rows split over
    // the threads (numpy's concatenate copies on one)
    if (!(out.flags() & py::array::c_style) || !out.writeable() || out.dtype().kind() == 'O') {
      throw py::value_error("out must be a writeable C-contiguous array of numbers");
    }
    const auto item = static_cast<size_t>(out.itemsize());
    std::vector<const char*> src;
    std::vector<size_t> len;   // bytes of a row of each input
    size_t total = 0;
    for (const py::handle h : xs_in) {
      const auto x = py::reinterpret_borrow<py::array>(h);
      if (!(x.flags() & py::array::c_style) || x.itemsize() != out.itemsize() ||
          (!x.dtype().is(out.dtype()) && !x.dtype().equal(out.dtype()))) {
        throw py::value_error("inputs must be C-contiguous arrays of out's dtype");
      }
      const size_t n = static_cast<size_t>(x.size());
      if (outer == 0 || n % outer != 0) throw py::value_error("an input does not split in rows");
      src.push_back(static_cast<const char*>(x.data()));
      len.push_back(n / outer * item);
      total += n;
    }
    if (total != static_cast<size_t>(out.size())) {
      throw py::value_error("out does not hold the inputs' elements");
    }
    char* dst = static_cast<char*>(out.mutable_data());
    const size_t row = total / (outer == 0 ? 1 : outer) * item;
    const size_t chunk = std::max<size_t>(1, (size_t{64} << 10) / std::max<size_t>(row, 1));
    const size_t tasks = (outer + chunk - 1) / chunk;
    py::gil_scoped_release release;
    parallel_for(tasks, tasks > 1 ? threads : 1, [&](size_t t) {
      const size_t r1 = std::min(outer, (t + 1) * chunk);
      for (size_t r = t * chunk; r < r1; ++r) {
        char* d = dst + r * row;
        for (size_t i = 0; i < src.size(); ++i) {
          copy_row(d, src[i] + r * len[i], len[i]);
          d += len[i];
        }
      }
    });
  }, py::arg("xs"), py::arg("out"), py::arg("outer"), py::arg("threads") = 1,
     "Concatenation as rows: out viewed as `outer` rows holds each input's row in turn (every "
     "array C-contiguous, of out's dtype); rows split over up to `threads` threads.");
}

}  // namespace onnxplex::mlas::bind
