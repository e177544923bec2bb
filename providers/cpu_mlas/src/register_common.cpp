#include "bind_util.h"
#include "cpu_features.h"
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
}

}  // namespace onnxplex::mlas::bind
