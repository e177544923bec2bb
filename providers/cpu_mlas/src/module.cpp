// Table of contents of the _mlas_native extension: each family registers itself from its own
// register_<family>.cpp (add a line here and the file to ONNXPLEX_MLAS_BINDINGS in CMake).
#include <pybind11/pybind11.h>

#include "bind_util.h"

namespace onnxplex::mlas::bind {
void register_conv(py::module_& m);   // register_conv.cpp
void register_trees(py::module_& m);  // register_trees.cpp
void register_text(py::module_& m);   // register_text.cpp
void register_select(py::module_& m); // register_select.cpp
void register_rows(py::module_& m);   // register_rows.cpp
void register_small(py::module_& m);  // register_small.cpp
void register_rnn(py::module_& m);    // register_rnn.cpp
void register_half(py::module_& m);   // register_half.cpp
void register_step(py::module_& m);   // register_step.cpp
}  // namespace onnxplex::mlas::bind

PYBIND11_MODULE(_mlas_native, m) {
  m.doc() = "onnxplex cpu_mlas native kernels (x86 integer and float GEMM; portable elsewhere)";
  using namespace onnxplex::mlas::bind;
  register_common(m);  // cpu_features, isa, isa_available
  register_qgemm(m);   // PackedB, pack_b, qgemm_i32, qgemm_f32, dynamic_qgemm_f32
  register_conv(m);    // dwconv, pooling, softmax, gelu, attention, layer_norm (f32)
  register_sgemm(m);   // SgemmPacked, sgemm_pack_a/b, sgemm, SgemmPlan
  register_trees(m);   // TreeEnsemble, tree_ensemble, tree_v3_nodes, linear, svm
  register_text(m);    // CharRuns (Tokenizer), NgramCounter (TfIdfVectorizer), case_map
  register_select(m);  // topk, cdist
  register_rows(m);    // scale/impute/normalize/logsumexp_rows_f32
  register_small(m);   // SmallOp, small_op, SMALL_OPS (elementwise ops on small arrays)
  register_rnn(m);     // rnn_seq_f32 (RNN/GRU/LSTM time loops)
  register_half(m);    // f32_to_half, half_to_f32 (float16 / bfloat16 conversions)
  register_step(m);    // PlannedStep, planned_step (conv steps run from their native plan)
}
