// Bindings of the recurrent sequence loops (rnn.h: one call runs one direction's time loop)
// and of the vector sigmoid they share their activations with (sigmoid.h).
#include <string>
#include <vector>

#include "bind_util.h"
#include "cpu_features.h"
#include "parallel.h"
#include "rnn.h"
#include "sigmoid.h"

namespace onnxplex::mlas::bind {

namespace {

using F32 = py::array_t<float, py::array::c_style>;

// A C-contiguous float32 array of `count` elements (the caller's own: no conversion, since
// the outputs are written in place).
const float* in_f32(const py::array& a, size_t count, const char* what) {
  if (!is_float32(a) || !(a.flags() & py::array::c_style) ||
      static_cast<size_t>(a.size()) != count) {
    throw py::value_error(std::string(what) + ": expected a C-contiguous float32 array of " +
                          std::to_string(count) + " values");
  }
  return static_cast<const float*>(a.data());
}

float* out_f32(py::array& a, size_t count, const char* what) {
  in_f32(a, count, what);
  if (!a.writeable()) throw py::value_error(std::string(what) + " must be writeable");
  return static_cast<float*>(a.mutable_data());
}

// A float32 [T, B, n] array whose rows of n values are contiguous, its first two axes at any
// non-negative strides (a view of both directions' array): the data and the two strides in
// floats.
struct Rows {
  const float* data;
  size_t ld_t, ld_b;
};

Rows rows_f32(const py::array& a, size_t t, size_t b, size_t n, const char* what) {
  const auto stride = [&](int axis) { return a.strides(axis); };
  if (!is_float32(a) || a.ndim() != 3 || static_cast<size_t>(a.shape(0)) != t ||
      static_cast<size_t>(a.shape(1)) != b || static_cast<size_t>(a.shape(2)) != n ||
      (n > 1 && stride(2) != static_cast<py::ssize_t>(sizeof(float))) || stride(0) < 0 ||
      stride(1) < 0 || stride(0) % sizeof(float) || stride(1) % sizeof(float)) {
    throw py::value_error(std::string(what) + ": expected a float32 [" + std::to_string(t) +
                          ", " + std::to_string(b) + ", " + std::to_string(n) +
                          "] array with contiguous rows");
  }
  return {static_cast<const float*>(a.data()), static_cast<size_t>(stride(0)) / sizeof(float),
          static_cast<size_t>(stride(1)) / sizeof(float)};
}

// One direction's loop as rnn_seq_f32 takes it, checked: the sequence description (pointers
// into the arrays, which `keep` holds for as long as the loop runs) and the variant to run.
struct SeqCall {
  RnnSeq s{};
  void (*variant)(const RnnSeq&) = rnn_seq_f32;
  std::vector<py::object> keep;
};

SeqCall seq_call(int cell, const py::array& xw, const py::array& rt, py::array& h,
                 const py::object& c_in, py::array& y, const py::object& rbh_in,
                 const py::object& peep_in, const py::object& lens_in, float clip,
                 bool linear_before_reset, const std::string& isa, bool reverse,
                 const py::object& cache_in) {
  SeqCall call;
  if (isa == "portable") {
    call.variant = rnn_seq_f32_portable;
#if ONNXPLEX_MLAS_HAVE_X86
  } else if (isa == "avx2" && cpu_features().avx2) {
    call.variant = rnn_seq_f32_avx2;
  } else if (isa == "avx512" && cpu_features().avx512f) {
    call.variant = rnn_seq_f32_avx512;
#endif
  } else if (!isa.empty()) {
    throw py::value_error("isa '" + isa + "' is not one this CPU runs");
  }
  if (cell < 0 || cell > 2) throw py::value_error("cell must be 0 (RNN), 1 (GRU), 2 (LSTM)");
  if (xw.ndim() != 3 || h.ndim() != 2) throw py::value_error("xw must be [T, B, G*H], h [B, H]");
  const size_t T = static_cast<size_t>(xw.shape(0)), B = static_cast<size_t>(xw.shape(1));
  const size_t H = static_cast<size_t>(h.shape(1));
  const size_t G = cell == 2 ? 4 : cell == 1 ? 3 : 1;
  if (static_cast<size_t>(xw.shape(2)) != G * H || static_cast<size_t>(h.shape(0)) != B)
    throw py::value_error("xw's last dim must be G*H and h must be [B, H]");
  RnnSeq& s = call.s;
  s.cell = static_cast<RnnCell>(cell);
  const Rows x_rows = rows_f32(xw, T, B, G * H, "xw");
  s.xw = x_rows.data;
  s.xw_ld_t = x_rows.ld_t;
  s.xw_ld_b = x_rows.ld_b;
  s.rt = in_f32(rt, H * G * H, "rt");
  s.h = out_f32(h, B * H, "h");
  const Rows y_rows = rows_f32(y, T, B, H, "y");
  if (!y.writeable()) throw py::value_error("y must be writeable");
  s.y = static_cast<float*>(y.mutable_data());
  s.y_ld_t = y_rows.ld_t;
  s.y_ld_b = y_rows.ld_b;
  s.reverse = reverse;
  if (reverse && !lens_in.is_none())
    throw py::value_error("reverse runs whole sequences: gather them by lens instead");
  call.keep = {xw, rt, h, y};
  if (cell == 2) {
    auto c = c_in.cast<py::array>();
    s.c = out_f32(c, B * H, "c");
    call.keep.push_back(c);
  }
  if (!rbh_in.is_none()) {
    auto rbh = rbh_in.cast<py::array>();
    s.rbh = in_f32(rbh, H, "rbh");
    call.keep.push_back(rbh);
  }
  if (!peep_in.is_none()) {
    auto peep = peep_in.cast<py::array>();
    s.peep = in_f32(peep, 3 * H, "peep");
    call.keep.push_back(peep);
  }
  if (!lens_in.is_none()) {
    auto lens = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(lens_in);
    if (!lens || static_cast<size_t>(lens.size()) != B)
      throw py::value_error("lens must hold one length per batch entry");
    s.lens = lens.data();
    call.keep.push_back(lens);
  }
  if (!cache_in.is_none()) {
    if (!py::isinstance<RnnPackCache>(cache_in))
      throw py::type_error("cache must be an RnnPackCache");
    s.cache = &cache_in.cast<RnnPackCache&>();
    call.keep.push_back(cache_in);
  }
  s.T = T;
  s.B = B;
  s.H = H;
  s.clip = clip;
  s.linear_before_reset = linear_before_reset;
  return call;
}

}  // namespace

void register_rnn(py::module_& m) {
  py::class_<RnnPackCache>(m, "RnnPackCache",
      "R^T as one node's direction prepares it (its variant's panels per batch size), kept "
      "across the calls given it: for a constant R only (rnn.h).")
      .def(py::init<>())
      .def_property_readonly("size", &RnnPackCache::size,
                             "entries held (variant, batch size, product)");

  m.def(
      "rnn_seq_f32",
      [](int cell, const py::array& xw, const py::array& rt, py::array& h, py::object c_in,
         py::array& y, py::object rbh_in, py::object peep_in, py::object lens_in, float clip,
         bool linear_before_reset, const std::string& isa, bool reverse, py::object cache) {
        const SeqCall call = seq_call(cell, xw, rt, h, c_in, y, rbh_in, peep_in, lens_in, clip,
                                      linear_before_reset, isa, reverse, cache);
        py::gil_scoped_release release;
        call.variant(call.s);
      },
      py::arg("cell"), py::arg("xw"), py::arg("rt"), py::arg("h"), py::arg("c"), py::arg("y"),
      py::arg("rbh"), py::arg("peep"), py::arg("lens"), py::arg("clip"),
      py::arg("linear_before_reset"), py::arg("isa") = "", py::arg("reverse") = false,
      py::arg("cache") = py::none(),
      "One direction's time loop of RNN (tanh), GRU or LSTM with the default activations "
      "(rnn.h): h (and c) are updated in place, y [T, B, H] written (xw and y: rows contiguous, "
      "any strides between them). isa: '' the CPU's best variant, or 'portable', 'avx2', "
      "'avx512' (for tests); reverse: steps from the last (not with lens); cache: an "
      "RnnPackCache of this direction, when rt is the same constant at every call.");

  m.def(
      "rnn_seqs_f32",
      [](int cell, const py::list& dirs, float clip, bool linear_before_reset, size_t threads) {
        std::vector<SeqCall> calls;
        for (const py::handle item : dirs) {
          const auto d = item.cast<py::tuple>();
          if (d.size() != 8 && d.size() != 9) {
            throw py::value_error(
                "each direction is (xw, rt, h, c, y, rbh, peep, reverse[, cache])");
          }
          auto h = d[2].cast<py::array>();
          auto y = d[4].cast<py::array>();
          calls.push_back(seq_call(cell, d[0].cast<py::array>(), d[1].cast<py::array>(), h,
                                   d[3].cast<py::object>(), y, d[5].cast<py::object>(),
                                   d[6].cast<py::object>(), py::none(), clip,
                                   linear_before_reset, "", d[7].cast<bool>(),
                                   d.size() == 9 ? d[8].cast<py::object>() : py::none()));
        }
        py::gil_scoped_release release;
        parallel_for(calls.size(), threads, [&](size_t i) { calls[i].variant(calls[i].s); });
      },
      py::arg("cell"), py::arg("dirs"), py::arg("clip"), py::arg("linear_before_reset"),
      py::arg("threads"),
      "Several directions' loops (rnn_seq_f32's, whole sequences) at once on the native pool, "
      "each (xw, rt, h, c, y, rbh, peep, reverse[, cache]): a bidirectional layer's two directions on "
      "two threads without handing the second to a Python thread. They must write disjoint "
      "arrays.");

  m.def(
      "sigmoid_f32",
      [](const py::array& x, py::array& y, size_t threads) {
        const size_t n = static_cast<size_t>(x.size());
        const float* xp = in_f32(x, n, "x");
        float* yp = out_f32(y, n, "y");
        py::gil_scoped_release release;
        sigmoid_f32(xp, yp, n, threads);
      },
      py::arg("x"), py::arg("y"), py::arg("threads"),
      "y = 1 / (1 + exp(-x)) elementwise over C-contiguous float32 arrays of one size (y may "
      "be x); NaN stays NaN (sigmoid.h).");

  m.def(
      "post_act_f32",
      [](const py::array& x, py::array& y, int act, size_t threads) {
        const PostAct kind = post_act_arg(act);
        const size_t n = static_cast<size_t>(x.size());
        const float* xp = in_f32(x, n, "x");
        float* yp = out_f32(y, n, "y");
        py::gil_scoped_release release;
        post_act_f32(kind, xp, yp, n, threads);
      },
      py::arg("x"), py::arg("y"), py::arg("act"), py::arg("threads"),
      "y = act(x) elementwise over C-contiguous float32 arrays of one size (y may be x): act 1 "
      "SiLU x * sigmoid(x), 2 HardSwish x * clip(x / 6 + 0.5, 0, 1), 3 HardSigmoid clip(x / 6 + "
      "0.5, 0, 1) (0: a copy); NaN stays "
      "NaN (sigmoid.h).");
}

}  // namespace onnxplex::mlas::bind
