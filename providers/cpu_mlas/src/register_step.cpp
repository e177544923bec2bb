// A model step whose kernel is a native plan, called by the executor's C loop without Python.
//
// A channels-last conv's kernel (contrib.py's NhwcFusedConv) is three Python calls deep
// before its planned native call (the node's closure, the conv driver, the plan for the input
// shape): ~1 us a call, and more in a model, where that code is out of cache after the kernels
// between two calls; a small CNN's 5-10 us convs pay it each. A PlannedStep is a callable of
// its own type, called through vectorcall like the SmallOp: once the Python kernel has planned
// a native call for an input shape and handed it over (install), a call with a float32,
// C-contiguous, aligned x of that shape (and a Z of the output's shape, an input scale S of
// [N or 1, 1, 1, C], when the plan adds or reads them; else None or absent) runs the plan
// here, on as many threads as the provider's pool has (its `size`); every other call goes to
// the Python kernel, unchanged. The kernel installs only a plan whose result is the node's
// whole output (the weights and the bias constants bound in it, the activation fused): the
// arguments the fast path does not read (W, B) are those constants.

#include <Python.h>
#include <structmember.h>

#include "bind_util.h"

namespace onnxplex::mlas::bind {
namespace {

namespace det = pybind11::detail;

struct PlannedStep {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* fallback;           // the Python kernel
  PyObject* pool;               // its `size`: the threads a call may use
  PyObject* plan;               // the installed NhwcConvPlan (a Python object), or null
  const NhwcConvPlan* native;   // ... and its C++ object
  Py_ssize_t calls;             // calls the plan ran here (for tests)
};

PyObject* size_name = nullptr;

// A float32 array, C-contiguous and aligned, in native byte order (its proxy), or null.
const det::PyArray_Proxy* plain_f32(PyObject* o) {
  const auto& api = det::npy_api::get();
  if (Py_TYPE(o) != api.PyArray_Type_) return nullptr;
  const auto* a = det::array_proxy(o);
  constexpr int need = det::npy_api::NPY_ARRAY_C_CONTIGUOUS_ | det::npy_api::NPY_ARRAY_ALIGNED_;
  if ((a->flags & need) != need) return nullptr;
  const auto* d = det::array_descriptor_proxy(a->descr);
  const char bo = d->byteorder;
  if (d->type_num != det::npy_api::NPY_FLOAT32_ ||
      (bo != '=' && bo != '|' && bo != (PY_LITTLE_ENDIAN ? '<' : '>')))
    return nullptr;
  return a;
}

bool same_shape(const det::PyArray_Proxy* a, const std::vector<py::ssize_t>& shape) {
  if (a->nd != static_cast<int>(shape.size())) return false;
  for (int k = 0; k < a->nd; ++k)
    if (a->dimensions[k] != shape[static_cast<size_t>(k)]) return false;
  return true;
}

// The kernel's arguments (x, W, B, Z, S) as `plan` takes them: x of its input shape; Z of its
// output shape when it adds one (else None or absent); S [N or 1, 1, 1, C] when it scales x
// (else None or absent): the pointers (Z's, S's null when unused) and S's step between
// images, or false.
struct Operands {
  const float *x = nullptr, *z = nullptr, *s = nullptr;
  size_t s_step = 0;
};

bool operands(PyObject* const* args, Py_ssize_t nargs, const NhwcConvPlan& plan,
              Operands& out) {
  if (nargs < 1 || nargs > 5) return false;
  const auto* x = plain_f32(args[0]);
  if (x == nullptr || !same_shape(x, plan.in_shape)) return false;
  out.x = reinterpret_cast<const float*>(x->data);
  PyObject* z = nargs > 3 ? args[3] : Py_None;
  PyObject* s = nargs > 4 ? args[4] : Py_None;
  if (plan.with_z) {
    const auto* za = z == Py_None ? nullptr : plain_f32(z);
    if (za == nullptr || !same_shape(za, plan.out_shape)) return false;
    out.z = reinterpret_cast<const float*>(za->data);
  } else if (z != Py_None) {
    return false;
  }
  if (plan.with_scale) {
    const auto* sa = s == Py_None ? nullptr : plain_f32(s);
    const py::ssize_t n = plan.in_shape[0], c = plan.in_shape.back();
    if (sa == nullptr || sa->nd != 4 || (sa->dimensions[0] != 1 && sa->dimensions[0] != n) ||
        sa->dimensions[1] != 1 || sa->dimensions[2] != 1 || sa->dimensions[3] != c)
      return false;
    out.s = reinterpret_cast<const float*>(sa->data);
    out.s_step = sa->dimensions[0] == 1 ? 0 : static_cast<size_t>(c);
  } else if (s != Py_None) {
    return false;
  }
  return true;
}

PyObject* step_call(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kw) {
  auto* self = reinterpret_cast<PlannedStep*>(callable);
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  const NhwcConvPlan* plan = self->native;
  Operands ops;
  if (plan == nullptr || kw != nullptr || !operands(args, nargs, *plan, ops))
    return PyObject_Vectorcall(self->fallback, args, nargsf, kw);
  PyObject* size = PyObject_GetAttr(self->pool, size_name);
  if (size == nullptr) return nullptr;
  const Py_ssize_t threads = PyLong_AsSsize_t(size);
  Py_DECREF(size);
  if (threads < 0 && PyErr_Occurred()) return nullptr;
  const auto& api = det::npy_api::get();
  PyObject* descr = api.PyArray_DescrFromType_(det::npy_api::NPY_FLOAT32_);
  if (descr == nullptr) return nullptr;
  std::vector<Py_intptr_t> dims(plan->out_shape.begin(), plan->out_shape.end());
  PyObject* y = api.PyArray_NewFromDescr_(api.PyArray_Type_, descr,
                                          static_cast<int>(dims.size()), dims.data(), nullptr,
                                          nullptr, 0, nullptr);  // (steals descr)
  if (y == nullptr) return nullptr;
  auto* yp = reinterpret_cast<float*>(det::array_proxy(y)->data);
  const auto n_threads = static_cast<size_t>(threads < 1 ? 1 : threads);
  // (the caller holds x, Z and S; the plan is held here for the call, as another thread may
  // install another one meanwhile)
  PyObject* held = self->plan;
  Py_INCREF(held);
  Py_BEGIN_ALLOW_THREADS
  if (plan->with_scale) {
    plan->run_scaled(ops.x, yp, ops.z, ops.s, ops.s_step, n_threads);
  } else {
    plan->run(ops.x, yp, ops.z, n_threads);
  }
  Py_END_ALLOW_THREADS
  Py_DECREF(held);
  ++self->calls;
  return y;
}

PyObject* step_tp_call(PyObject* self, PyObject* args, PyObject* kw) {
  return PyVectorcall_Call(self, args, kw);
}

int step_traverse(PyObject* op, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<PlannedStep*>(op);
  Py_VISIT(Py_TYPE(op));
  Py_VISIT(self->fallback);
  Py_VISIT(self->pool);
  Py_VISIT(self->plan);
  return 0;
}

int step_clear(PyObject* op) {
  auto* self = reinterpret_cast<PlannedStep*>(op);
  self->native = nullptr;
  Py_CLEAR(self->plan);
  Py_CLEAR(self->fallback);
  Py_CLEAR(self->pool);
  return 0;
}

void step_dealloc(PyObject* op) {
  PyObject_GC_UnTrack(op);
  step_clear(op);
  PyTypeObject* type = Py_TYPE(op);
  type->tp_free(op);
  Py_DECREF(type);  // (instances of a heap type hold their type)
}

PyObject* step_repr(PyObject* op) {
  auto* self = reinterpret_cast<PlannedStep*>(op);
  return PyUnicode_FromFormat("<PlannedStep %s, else %R>",
                              self->native != nullptr ? "planned" : "not planned",
                              self->fallback);
}

// install(plan): the NhwcConvPlan calls of its input shape run (None: every call falls back).
PyObject* step_install(PyObject* op, PyObject* plan) {
  auto* self = reinterpret_cast<PlannedStep*>(op);
  const NhwcConvPlan* native = nullptr;
  if (plan != Py_None) {
    try {
      native = py::handle(plan).cast<const NhwcConvPlan*>();
    } catch (const py::cast_error&) {
      PyErr_SetString(PyExc_TypeError, "install takes an NhwcConvPlan or None");
      return nullptr;
    }
  }
  Py_XINCREF(plan == Py_None ? nullptr : plan);
  PyObject* old = self->plan;
  self->plan = plan == Py_None ? nullptr : plan;
  self->native = native;
  Py_XDECREF(old);
  Py_RETURN_NONE;
}

PyObject* step_get(PyObject* op, void* which) {
  auto* self = reinterpret_cast<PlannedStep*>(op);
  const auto field = reinterpret_cast<intptr_t>(which);
  if (field == 2) return PyLong_FromSsize_t(self->calls);
  PyObject* v = field == 0 ? self->fallback : self->plan != nullptr ? self->plan : Py_None;
  Py_INCREF(v);
  return v;
}

PyMethodDef step_methods[] = {
    {"install", step_install, METH_O,
     "install(plan): run calls whose x fits this NhwcConvPlan here (None: none)."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef step_getset[] = {
    {"fallback", step_get, nullptr, "The Python kernel every other call goes to.",
     reinterpret_cast<void*>(0)},
    {"plan", step_get, nullptr, "The installed plan, or None.", reinterpret_cast<void*>(1)},
    {"calls", step_get, nullptr, "Calls the installed plans ran without Python.",
     reinterpret_cast<void*>(2)},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyMemberDef step_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(PlannedStep, vectorcall), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

PyType_Slot step_slots[] = {
    {Py_tp_call, reinterpret_cast<void*>(step_tp_call)},
    {Py_tp_traverse, reinterpret_cast<void*>(step_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(step_clear)},
    {Py_tp_dealloc, reinterpret_cast<void*>(step_dealloc)},
    {Py_tp_repr, reinterpret_cast<void*>(step_repr)},
    {Py_tp_methods, step_methods},
    {Py_tp_getset, step_getset},
    {Py_tp_members, step_members},
    {Py_tp_doc, const_cast<char*>("A conv step run from its native plan (see planned_step).")},
    {0, nullptr},
};

PyType_Spec step_spec = {
    "onnxplex.providers.cpu_mlas._mlas_native.PlannedStep", sizeof(PlannedStep), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL, step_slots};

PyTypeObject* step_type = nullptr;

}  // namespace

void register_step(py::module_& m) {
  step_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&step_spec));
  if (!step_type) throw py::error_already_set();
  m.attr("PlannedStep") = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(step_type));
  size_name = PyUnicode_InternFromString("size");
  if (!size_name) throw py::error_already_set();

  m.def(
      "planned_step",
      [](py::object fallback, py::object pool) {
        if (!PyCallable_Check(fallback.ptr()))
          throw py::type_error("planned_step: fallback must be callable");
        if (!py::hasattr(pool, "size")) throw py::type_error("planned_step: pool needs a size");
        det::npy_api::get();  // (numpy's C API table, loaded once)
        auto* self = PyObject_GC_New(PlannedStep, step_type);
        if (!self) throw py::error_already_set();
        self->vectorcall = step_call;
        self->fallback = fallback.release().ptr();
        self->pool = pool.release().ptr();
        self->plan = nullptr;
        self->native = nullptr;
        self->calls = 0;
        PyObject_GC_Track(reinterpret_cast<PyObject*>(self));
        return py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(self));
      },
      py::arg("fallback"), py::arg("pool"),
      "A channels-last conv step: calls whose x fits the NhwcConvPlan installed on it run that "
      "plan without Python, on pool.size threads; every other call goes to `fallback` "
      "(register_step.cpp).");
}

}  // namespace onnxplex::mlas::bind
