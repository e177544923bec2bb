// Elementwise kernels for small arrays, at a fraction of a numpy ufunc call's cost.
//
// On a handful of elements, a ufunc call spends ~0.3-0.4 us deciding how to loop and a
// pybind11 function as much converting its arguments; the arithmetic is nanoseconds. A
// SmallOp is a callable of its own type, called through vectorcall (the executor's C loop
// calls it directly): it takes float32, float64 or (integer ops) int64 arrays that are
// C-contiguous, aligned and in native byte order, of at most `limit` elements, broadcast in
// the shapes that need no strides (equal shapes, one element, or one operand's shape the
// other's trailing dims), and computes into a new array. Every other call goes to `fallback`,
// the numpy kernel it stands for, unchanged: other dtypes, views, larger arrays (numpy's SIMD
// loops and the provider's threading pay off there), general broadcasting, bad shapes
// (numpy raises its own error).
//
// Results are numpy's to the bit: the operations are single IEEE operations (no contraction),
// maximum/minimum follow numpy's rules (a NaN operand wins, the first if both; on equal
// values the second operand), integer arithmetic wraps.

#include <Python.h>
#include <structmember.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "bind_util.h"

namespace onnxplex::mlas::bind {
namespace {

namespace det = pybind11::detail;

enum Op : int { NEG, ABS, RELU, SQRT, RECIPROCAL, FLOOR, CEIL, ADD, SUB, MUL, DIV, MAX, MIN };

struct OpInfo {
  const char* name;
  int arity;
  bool integer;  // also defined on int64
};

constexpr OpInfo kOps[] = {
    {"neg", 1, true},         {"abs", 1, true},   {"relu", 1, true},  {"sqrt", 1, false},
    {"reciprocal", 1, false}, {"floor", 1, false}, {"ceil", 1, false}, {"add", 2, true},
    {"sub", 2, true},         {"mul", 2, true},   {"div", 2, false},  {"max", 2, true},
    {"min", 2, true},
};
constexpr int kNumOps = sizeof(kOps) / sizeof(kOps[0]);

struct SmallOp {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  int op;
  Py_ssize_t limit;
  PyObject* fallback;
};

template <typename T>
inline T max_of(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return a;
  }
  return a > b ? a : b;
}

template <typename T>
inline T min_of(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return a;
  }
  return a < b ? a : b;
}

template <typename T>
void unary(int op, const T* x, T* y, Py_ssize_t n) {
  switch (op) {
    case NEG:
      if constexpr (std::is_integral_v<T>) {
        for (Py_ssize_t i = 0; i < n; ++i) y[i] = static_cast<T>(0ull - static_cast<uint64_t>(x[i]));
      } else {
        for (Py_ssize_t i = 0; i < n; ++i) y[i] = -x[i];
      }
      break;
    case ABS:
      if constexpr (std::is_integral_v<T>) {
        for (Py_ssize_t i = 0; i < n; ++i)
          y[i] = x[i] < 0 ? static_cast<T>(0ull - static_cast<uint64_t>(x[i])) : x[i];
      } else {
        for (Py_ssize_t i = 0; i < n; ++i) y[i] = std::fabs(x[i]);
      }
      break;
    case RELU:
      for (Py_ssize_t i = 0; i < n; ++i) y[i] = max_of(x[i], T(0));
      break;
    case SQRT:
      if constexpr (std::is_floating_point_v<T>)
        for (Py_ssize_t i = 0; i < n; ++i) y[i] = std::sqrt(x[i]);
      break;
    case RECIPROCAL:
      for (Py_ssize_t i = 0; i < n; ++i) y[i] = T(1) / x[i];
      break;
    case FLOOR:
      if constexpr (std::is_floating_point_v<T>)
        for (Py_ssize_t i = 0; i < n; ++i) y[i] = std::floor(x[i]);
      break;
    case CEIL:
      if constexpr (std::is_floating_point_v<T>)
        for (Py_ssize_t i = 0; i < n; ++i) y[i] = std::ceil(x[i]);
      break;
    default:
      break;
  }
}

template <typename T>
inline T apply(int op, T a, T b) {
  switch (op) {
    case ADD:
      if constexpr (std::is_integral_v<T>)
        return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
      else
        return a + b;
    case SUB:
      if constexpr (std::is_integral_v<T>)
        return static_cast<T>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
      else
        return a - b;
    case MUL:
      if constexpr (std::is_integral_v<T>)
        return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
      else
        return a * b;
    case DIV:
      if constexpr (std::is_floating_point_v<T>) return a / b;
      return T(0);
    case MAX:
      return max_of(a, b);
    default:
      return min_of(a, b);
  }
}

// y[i] = a[i % na] op b[i % nb], na and nb dividing n (the broadcasts this file takes).
template <typename T, int OP>
void binary_loop(const T* a, Py_ssize_t na, const T* b, Py_ssize_t nb, T* y, Py_ssize_t n) {
  if (na == n && nb == n) {
    for (Py_ssize_t i = 0; i < n; ++i) y[i] = apply<T>(OP, a[i], b[i]);
  } else if (nb == 1) {
    const T s = b[0];
    for (Py_ssize_t i = 0; i < n; ++i) y[i] = apply<T>(OP, a[i % na], s);
  } else if (na == 1) {
    const T s = a[0];
    for (Py_ssize_t i = 0; i < n; ++i) y[i] = apply<T>(OP, s, b[i % nb]);
  } else if (na == n) {
    for (Py_ssize_t r = 0; r < n; r += nb)
      for (Py_ssize_t i = 0; i < nb; ++i) y[r + i] = apply<T>(OP, a[r + i], b[i]);
  } else {
    for (Py_ssize_t r = 0; r < n; r += na)
      for (Py_ssize_t i = 0; i < na; ++i) y[r + i] = apply<T>(OP, a[i], b[r + i]);
  }
}

template <typename T>
void binary(int op, const T* a, Py_ssize_t na, const T* b, Py_ssize_t nb, T* y, Py_ssize_t n) {
  switch (op) {
    case ADD: binary_loop<T, ADD>(a, na, b, nb, y, n); break;
    case SUB: binary_loop<T, SUB>(a, na, b, nb, y, n); break;
    case MUL: binary_loop<T, MUL>(a, na, b, nb, y, n); break;
    case DIV: binary_loop<T, DIV>(a, na, b, nb, y, n); break;
    case MAX: binary_loop<T, MAX>(a, na, b, nb, y, n); break;
    default: binary_loop<T, MIN>(a, na, b, nb, y, n); break;
  }
}

// The element type this file computes for array `o` (NPY_FLOAT_, NPY_DOUBLE_, NPY_LONG_-ish
// int64), or -1: not an exact ndarray, not contiguous and aligned, foreign byte order.
int kind_of(PyObject* o) {
  const auto& api = det::npy_api::get();
  if (Py_TYPE(o) != api.PyArray_Type_) return -1;
  const auto* arr = det::array_proxy(o);
  constexpr int need = det::npy_api::NPY_ARRAY_C_CONTIGUOUS_ | det::npy_api::NPY_ARRAY_ALIGNED_;
  if ((arr->flags & need) != need) return -1;
  const auto* d = det::array_descriptor_proxy(arr->descr);
  const char bo = d->byteorder;
  if (bo != '=' && bo != '|' && bo != (PY_LITTLE_ENDIAN ? '<' : '>')) return -1;
  const int t = d->type_num;
  if (t == det::npy_api::NPY_FLOAT32_ || t == det::npy_api::NPY_FLOAT64_ ||
      t == det::npy_api::NPY_INT64_)
    return t;
  return -1;
}

Py_ssize_t size_of(const det::PyArray_Proxy* a) {
  Py_ssize_t n = 1;
  for (int k = 0; k < a->nd; ++k) n *= a->dimensions[k];
  return n;
}

// The rank after dropping leading 1s.
int core_rank(const det::PyArray_Proxy* a) {
  int k = 0;
  while (k < a->nd && a->dimensions[k] == 1) ++k;
  return a->nd - k;
}

PyObject* new_array(int type_num, int nd, const Py_intptr_t* dims) {
  const auto& api = det::npy_api::get();
  PyObject* descr = api.PyArray_DescrFromType_(type_num);
  if (!descr) return nullptr;
  return api.PyArray_NewFromDescr_(api.PyArray_Type_, descr, nd, dims, nullptr, nullptr, 0,
                                   nullptr);  // (steals descr)
}

PyObject* call_fallback(SmallOp* self, PyObject* const* args, size_t nargsf, PyObject* kw) {
  return PyObject_Vectorcall(self->fallback, args, nargsf, kw);
}

template <typename T>
void run_unary(int op, PyObject* x, PyObject* y, Py_ssize_t n) {
  unary<T>(op, reinterpret_cast<const T*>(det::array_proxy(x)->data),
           reinterpret_cast<T*>(det::array_proxy(y)->data), n);
}

PyObject* small_call(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kw) {
  auto* self = reinterpret_cast<SmallOp*>(callable);
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  const OpInfo& info = kOps[self->op];
  if (kw || nargs != info.arity) return call_fallback(self, args, nargsf, kw);
  const int t = kind_of(args[0]);
  if (t < 0 || (t == det::npy_api::NPY_INT64_ && !info.integer))
    return call_fallback(self, args, nargsf, kw);
  const auto* a = det::array_proxy(args[0]);
  if (info.arity == 1) {
    const Py_ssize_t n = size_of(a);
    if (n > self->limit) return call_fallback(self, args, nargsf, kw);
    PyObject* y = new_array(t, a->nd, a->dimensions);
    if (!y) return nullptr;
    if (t == det::npy_api::NPY_FLOAT32_) run_unary<float>(self->op, args[0], y, n);
    else if (t == det::npy_api::NPY_FLOAT64_) run_unary<double>(self->op, args[0], y, n);
    else run_unary<int64_t>(self->op, args[0], y, n);
    return y;
  }
  if (kind_of(args[1]) != t) return call_fallback(self, args, nargsf, kw);
  const auto* b = det::array_proxy(args[1]);
  const Py_ssize_t na = size_of(a), nb = size_of(b);
  // The result's shape: the operand of more elements (the other one's rank if higher, with
  // leading 1s), when the other is one element or its shape less leading 1s is the
  // trailing part of it; anything else is numpy's to broadcast.
  const det::PyArray_Proxy* big = na >= nb ? a : b;
  const det::PyArray_Proxy* small = na >= nb ? b : a;
  const Py_ssize_t n = na >= nb ? na : nb;
  if (n > self->limit || n == 0) return call_fallback(self, args, nargsf, kw);
  if (size_of(small) != 1 && size_of(small) != n) {
    const int r = core_rank(small);
    if (r > big->nd ||
        std::memcmp(small->dimensions + (small->nd - r), big->dimensions + (big->nd - r),
                    sizeof(Py_intptr_t) * static_cast<size_t>(r)) != 0)
      return call_fallback(self, args, nargsf, kw);
  } else if (size_of(small) == n && n != 1) {
    const int rs = core_rank(small), rb = core_rank(big);
    if (rs != rb || std::memcmp(small->dimensions + (small->nd - rs),
                                big->dimensions + (big->nd - rb),
                                sizeof(Py_intptr_t) * static_cast<size_t>(rs)) != 0)
      return call_fallback(self, args, nargsf, kw);
  }
  Py_intptr_t dims[64];
  const int nd = a->nd > b->nd ? a->nd : b->nd;
  if (nd > 64) return call_fallback(self, args, nargsf, kw);
  // Each of the result's dims: the larger of the operands' (right-aligned, missing = 1).
  for (int k = 0; k < nd; ++k) {
    const int ka = k - (nd - a->nd), kb = k - (nd - b->nd);
    const Py_intptr_t da = ka >= 0 ? a->dimensions[ka] : 1;
    const Py_intptr_t db = kb >= 0 ? b->dimensions[kb] : 1;
    dims[k] = da > db ? da : db;
  }
  PyObject* y = new_array(t, nd, dims);
  if (!y) return nullptr;
  char* out = det::array_proxy(y)->data;
  if (t == det::npy_api::NPY_FLOAT32_)
    binary<float>(self->op, reinterpret_cast<const float*>(a->data), na,
                  reinterpret_cast<const float*>(b->data), nb, reinterpret_cast<float*>(out), n);
  else if (t == det::npy_api::NPY_FLOAT64_)
    binary<double>(self->op, reinterpret_cast<const double*>(a->data), na,
                   reinterpret_cast<const double*>(b->data), nb, reinterpret_cast<double*>(out), n);
  else
    binary<int64_t>(self->op, reinterpret_cast<const int64_t*>(a->data), na,
                    reinterpret_cast<const int64_t*>(b->data), nb, reinterpret_cast<int64_t*>(out), n);
  return y;
}

PyObject* small_tp_call(PyObject* self, PyObject* args, PyObject* kw) {
  return PyVectorcall_Call(self, args, kw);
}

int small_traverse(PyObject* op, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(op));
  Py_VISIT(reinterpret_cast<SmallOp*>(op)->fallback);
  return 0;
}

int small_clear(PyObject* op) {
  Py_CLEAR(reinterpret_cast<SmallOp*>(op)->fallback);
  return 0;
}

void small_dealloc(PyObject* op) {
  PyObject_GC_UnTrack(op);
  small_clear(op);
  PyTypeObject* type = Py_TYPE(op);
  type->tp_free(op);
  Py_DECREF(type);  // (instances of a heap type hold their type)
}

PyObject* small_repr(PyObject* op) {
  auto* self = reinterpret_cast<SmallOp*>(op);
  return PyUnicode_FromFormat("<SmallOp %s, up to %zd elements, else %R>", kOps[self->op].name,
                              self->limit, self->fallback);
}

PyObject* small_get_fallback(PyObject* op, void*) {
  PyObject* f = reinterpret_cast<SmallOp*>(op)->fallback;
  Py_INCREF(f);
  return f;
}

PyGetSetDef small_getset[] = {
    {"fallback", small_get_fallback, nullptr, "The kernel every other call goes to.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyMemberDef small_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(SmallOp, vectorcall), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

PyType_Slot small_slots[] = {
    {Py_tp_call, reinterpret_cast<void*>(small_tp_call)},
    {Py_tp_traverse, reinterpret_cast<void*>(small_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(small_clear)},
    {Py_tp_dealloc, reinterpret_cast<void*>(small_dealloc)},
    {Py_tp_repr, reinterpret_cast<void*>(small_repr)},
    {Py_tp_getset, small_getset},
    {Py_tp_members, small_members},
    {Py_tp_doc, const_cast<char*>("An elementwise kernel for small arrays (see small_op).")},
    {0, nullptr},
};

PyType_Spec small_spec = {
    "onnxplex.providers.cpu_mlas._mlas_native.SmallOp", sizeof(SmallOp), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL, small_slots};

PyTypeObject* small_type = nullptr;

}  // namespace

void register_small(py::module_& m) {
  small_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&small_spec));
  if (!small_type) throw py::error_already_set();
  m.attr("SmallOp") = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(small_type));

  py::dict ops;  // name -> whether it also computes int64 (all compute float32 and float64)
  for (const OpInfo& info : kOps) ops[info.name] = info.integer;
  m.attr("SMALL_OPS") = ops;

  m.def(
      "small_op",
      [](const std::string& name, py::object fallback, Py_ssize_t limit) {
        int op = -1;
        for (int k = 0; k < kNumOps; ++k)
          if (name == kOps[k].name) op = k;
        if (op < 0) throw py::value_error("small_op: unknown op '" + name + "'");
        if (!PyCallable_Check(fallback.ptr())) throw py::type_error("small_op: fallback must be callable");
        det::npy_api::get();  // (numpy's C API table, loaded once)
        auto* self = PyObject_GC_New(SmallOp, small_type);
        if (!self) throw py::error_already_set();
        self->vectorcall = small_call;
        self->op = op;
        self->limit = limit;
        self->fallback = fallback.release().ptr();
        PyObject_GC_Track(reinterpret_cast<PyObject*>(self));
        return py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(self));
      },
      py::arg("name"), py::arg("fallback"), py::arg("limit") = 16384,
      "An elementwise kernel computing small contiguous float32/float64 (and, for the integer "
      "ops, int64) arrays itself and passing every other call to `fallback` (see "
      "register_small.cpp). Ops: SMALL_OPS (name -> also int64).");
}

}  // namespace onnxplex::mlas::bind
