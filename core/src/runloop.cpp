// onnxplex._runloop: the executor's inner loop in C.
//
// _executor.compile_sequential turns a plan into one callable run(slots). Its Python version
// calls one closure per step (~0.4 us a step of interpreter work around the kernel call); a
// Runner does the same walk here. Per step it reads the input slots, calls the kernel through
// vectorcall, keeps the result when it is a numpy array of the accepted shape and declared
// dtype (everything else goes to the step's Python settle function, which checks, converts
// or raises), stores it and releases the slots whose last reader the step is.
//
// It knows nothing of ONNX, and of numpy only the array struct's dims and dtype fields. Steps
// that need more than the inline check (several outputs, sequences, maps) are Python
// closures call(slots) run in order with the rest. A kernel's exception (an Exception or
// SystemExit) goes to fail(i, exc), which raises it attributed to step i; other
// BaseExceptions (KeyboardInterrupt) pass through unchanged, as in the Python loop.
//
// The CPython C API only, plus pybind11's header-only view of numpy's array struct.

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pybind11/numpy.h>  // (pybind11::detail::array_proxy only)

#include <cstddef>
#include <cstring>
#include <vector>

namespace {

struct Entry {
  PyObject* kernel = nullptr;      // the kernel, or the general step's call(slots)
  bool general = false;
  std::vector<Py_ssize_t> ins;     // input slots, -1 for an omitted input (None)
  Py_ssize_t out = -1;             // the output slot (inline steps)
  PyObject* cell = nullptr;        // [accepted shape] list, or null: any shape
  PyObject* dtype = nullptr;       // declared dtype, or null: any dtype
  PyObject* slow = nullptr;        // slow(result) -> the value to store (checks, conversions)
  std::vector<Py_ssize_t> release; // slots set to None after the step
};

struct Runner {
  PyObject_HEAD
  std::vector<Entry>* entries;
  Py_ssize_t num_slots;
  PyObject* ndarray;
  PyObject* fail;
  PyObject* catchable;   // (Exception, SystemExit)
};

// Everything a Runner holds, for the garbage collector.
template <typename F>
int visit_all(Runner* self, F&& f) {
  PyObject* own[] = {self->ndarray, self->fail, self->catchable};
  for (PyObject* o : own)
    if (int r = f(o)) return r;
  if (self->entries)
    for (Entry& e : *self->entries)
      for (PyObject* o : {e.kernel, e.cell, e.dtype, e.slow})
        if (int r = f(o)) return r;
  return 0;
}

int runner_traverse(PyObject* op, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(op));
  return visit_all(reinterpret_cast<Runner*>(op),
                   [&](PyObject* o) { return o ? visit(o, arg) : 0; });
}

int runner_clear(PyObject* op) {
  auto* self = reinterpret_cast<Runner*>(op);
  Py_CLEAR(self->ndarray);
  Py_CLEAR(self->fail);
  Py_CLEAR(self->catchable);
  if (self->entries) {
    for (Entry& e : *self->entries) {
      Py_CLEAR(e.kernel);
      Py_CLEAR(e.cell);
      Py_CLEAR(e.dtype);
      Py_CLEAR(e.slow);
    }
  }
  return 0;
}

void runner_dealloc(PyObject* op) {
  auto* self = reinterpret_cast<Runner*>(op);
  PyObject_GC_UnTrack(op);
  runner_clear(op);
  delete self->entries;
  self->entries = nullptr;
  PyTypeObject* type = Py_TYPE(op);
  type->tp_free(op);
  Py_DECREF(type);  // (instances of a heap type hold their type)
}

bool read_slots(PyObject* seq, Py_ssize_t num_slots, bool allow_omitted, const char* what,
                std::vector<Py_ssize_t>& into) {
  PyObject* fast = PySequence_Fast(seq, "slot lists must be sequences");
  if (!fast) return false;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  into.reserve(static_cast<size_t>(n));
  for (Py_ssize_t k = 0; k < n; ++k) {
    Py_ssize_t s = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, k));
    if (s == -1 && PyErr_Occurred()) {
      Py_DECREF(fast);
      return false;
    }
    if (s >= num_slots || s < (allow_omitted ? -1 : 0)) {
      PyErr_Format(PyExc_ValueError, "%s slot %zd out of range (%zd slots)", what, s,
                   num_slots);
      Py_DECREF(fast);
      return false;
    }
    into.push_back(s);
  }
  Py_DECREF(fast);
  return true;
}

PyObject* none_to_null(PyObject* o) {
  if (o == Py_None) return nullptr;
  Py_INCREF(o);
  return o;
}

// Runner(num_slots, ndarray, fail, entries): each entry is (call,) for a general step or
// (kernel, ins, out, cell, dtype, slow, release) for a step whose one output is checked here.
PyObject* runner_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"num_slots", "ndarray", "fail", "entries", nullptr};
  Py_ssize_t num_slots;
  PyObject *ndarray, *fail, *entries;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "nOOO:Runner", const_cast<char**>(kwlist),
                                   &num_slots, &ndarray, &fail, &entries))
    return nullptr;
  if (!PyType_Check(ndarray) ||
      std::strcmp(reinterpret_cast<PyTypeObject*>(ndarray)->tp_name, "numpy.ndarray") != 0 ||
      !PyCallable_Check(fail)) {  // (passes() reads the arrays' struct)
    PyErr_SetString(PyExc_TypeError,
                    "Runner: ndarray must be numpy.ndarray and fail a callable");
    return nullptr;
  }
  PyObject* list = PySequence_Fast(entries, "Runner: entries must be a sequence");
  if (!list) return nullptr;
  auto* self = reinterpret_cast<Runner*>(type->tp_alloc(type, 0));
  if (!self) {
    Py_DECREF(list);
    return nullptr;
  }
  self->entries = new std::vector<Entry>();
  self->num_slots = num_slots;
  Py_INCREF(ndarray);
  self->ndarray = ndarray;
  Py_INCREF(fail);
  self->fail = fail;
  self->catchable = PyTuple_Pack(2, PyExc_Exception, PyExc_SystemExit);
  bool ok = self->catchable != nullptr;
  Py_ssize_t n = ok ? PySequence_Fast_GET_SIZE(list) : 0;
  self->entries->reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; ok && i < n; ++i) {
    PyObject* t = PySequence_Fast_GET_ITEM(list, i);
    Py_ssize_t size = PyTuple_Check(t) ? PyTuple_GET_SIZE(t) : -1;
    if (size != 1 && size != 7) {
      PyErr_Format(PyExc_TypeError, "Runner: entry %zd must be a 1- or 7-tuple", i);
      ok = false;
      break;
    }
    self->entries->emplace_back();
    Entry& e = self->entries->back();
    e.kernel = PyTuple_GET_ITEM(t, 0);
    Py_INCREF(e.kernel);
    if (!PyCallable_Check(e.kernel)) {
      PyErr_Format(PyExc_TypeError, "Runner: entry %zd's kernel is not callable", i);
      ok = false;
      break;
    }
    if (size == 1) {
      e.general = true;
      continue;
    }
    e.out = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 2));
    if (e.out == -1 && PyErr_Occurred()) {
      ok = false;
      break;
    }
    if (e.out < 0 || e.out >= num_slots) {
      PyErr_Format(PyExc_ValueError, "Runner: entry %zd's output slot %zd out of range", i,
                   e.out);
      ok = false;
      break;
    }
    e.cell = none_to_null(PyTuple_GET_ITEM(t, 3));
    e.dtype = none_to_null(PyTuple_GET_ITEM(t, 4));
    e.slow = PyTuple_GET_ITEM(t, 5);
    Py_INCREF(e.slow);
    if (e.cell && (!PyList_Check(e.cell) || PyList_GET_SIZE(e.cell) != 1)) {
      PyErr_Format(PyExc_TypeError, "Runner: entry %zd's cell must be a 1-item list", i);
      ok = false;
      break;
    }
    ok = read_slots(PyTuple_GET_ITEM(t, 1), num_slots, true, "input", e.ins) &&
         read_slots(PyTuple_GET_ITEM(t, 6), num_slots, false, "released", e.release);
  }
  Py_DECREF(list);
  if (!ok) {
    Py_DECREF(self);
    return nullptr;
  }
  return reinterpret_cast<PyObject*>(self);
}

// Called with step i's exception set: hand it to fail(i, exc) (which raises it attributed
// to the step) or let it pass unchanged. Returns null, the error set.
PyObject* failed(Runner* self, size_t i) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb && value) PyException_SetTraceback(value, tb);
  if (!value || !PyErr_GivenExceptionMatches(type, self->catchable)) {
    PyErr_Restore(type, value, tb);
    return nullptr;
  }
  PyObject* r = PyObject_CallFunction(self->fail, "nO", static_cast<Py_ssize_t>(i), value);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  if (r) {  // fail() must raise
    Py_DECREF(r);
    PyErr_SetString(PyExc_SystemError, "Runner: fail() returned instead of raising");
  }
  return nullptr;
}

// 1 when r can be stored as it is: a numpy array (exactly) of the accepted shape and dtype.
// The array's dims and dtype are read from the object itself (pybind11's mirror of numpy's
// PyArrayObject, header-only: no numpy headers or API table needed), which saves the shape
// tuple a `.shape` would build, ~75 ns a step.
int passes(Runner* self, const Entry& e, PyObject* r) {
  if (Py_TYPE(r) != reinterpret_cast<PyTypeObject*>(self->ndarray)) return 0;
  const auto* arr = pybind11::detail::array_proxy(r);
  if (e.cell) {
    PyObject* shape = PyList_GET_ITEM(e.cell, 0);
    if (!PyTuple_Check(shape) || PyTuple_GET_SIZE(shape) != arr->nd) return 0;
    for (int k = 0; k < arr->nd; ++k) {
      const Py_ssize_t d = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, k));
      if (d == -1 && PyErr_Occurred()) return -1;
      if (d != arr->dimensions[k]) return 0;
    }
  }
  if (e.dtype && arr->descr != e.dtype)  // (equal dtypes need not be one object)
    return PyObject_RichCompareBool(arr->descr, e.dtype, Py_EQ);
  return 1;
}

PyObject* runner_call(PyObject* op, PyObject* args, PyObject* kwargs) {
  auto* self = reinterpret_cast<Runner*>(op);
  PyObject* slots;
  if (kwargs && PyDict_GET_SIZE(kwargs)) {
    PyErr_SetString(PyExc_TypeError, "Runner() takes no keyword arguments");
    return nullptr;
  }
  if (!PyArg_ParseTuple(args, "O!:Runner", &PyList_Type, &slots)) return nullptr;
  if (PyList_GET_SIZE(slots) != self->num_slots) {
    PyErr_Format(PyExc_ValueError, "Runner: %zd slots given, the plan has %zd",
                 PyList_GET_SIZE(slots), self->num_slots);
    return nullptr;
  }
  std::vector<PyObject*> argv;
  const std::vector<Entry>& entries = *self->entries;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.general) {
      PyObject* r = PyObject_CallOneArg(e.kernel, slots);
      if (!r) return failed(self, i);
      Py_DECREF(r);
      continue;
    }
    // (a kernel cannot resize this run's list, which only the executor sees; the items are
    // held for the call, since nothing stops a kernel from running code that stores slots)
    size_t n = e.ins.size();
    argv.resize(n);
    for (size_t k = 0; k < n; ++k) {
      PyObject* v = e.ins[k] < 0 ? Py_None : PyList_GET_ITEM(slots, e.ins[k]);
      Py_INCREF(v);
      argv[k] = v;
    }
    PyObject* r = PyObject_Vectorcall(e.kernel, argv.data(), n, nullptr);
    for (size_t k = 0; k < n; ++k) Py_DECREF(argv[k]);
    if (!r) return failed(self, i);
    int ok = passes(self, e, r);
    if (ok < 0) {
      Py_DECREF(r);
      return failed(self, i);
    }
    if (!ok) {
      PyObject* v = PyObject_CallOneArg(e.slow, r);
      Py_DECREF(r);
      if (!v) return failed(self, i);
      r = v;
    }
    if (PyList_SetItem(slots, e.out, r) < 0) return failed(self, i);  // (steals r)
    for (Py_ssize_t s : e.release) {
      Py_INCREF(Py_None);
      if (PyList_SetItem(slots, s, Py_None) < 0) return failed(self, i);
    }
  }
  Py_RETURN_NONE;
}

PyType_Slot runner_slots[] = {
    {Py_tp_new, reinterpret_cast<void*>(runner_new)},
    {Py_tp_call, reinterpret_cast<void*>(runner_call)},
    {Py_tp_dealloc, reinterpret_cast<void*>(runner_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(runner_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(runner_clear)},
    {Py_tp_doc, const_cast<char*>(
        "Runner(num_slots, ndarray, fail, entries): run(slots) calls the steps in order.")},
    {0, nullptr},
};

PyType_Spec runner_spec = {"onnxplex._runloop.Runner", sizeof(Runner), 0,
                           Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, runner_slots};

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "onnxplex._runloop",
    "The executor's inner loop (see onnxplex._executor.compile_sequential).", -1,
    nullptr, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__runloop(void) {
  PyObject* m = PyModule_Create(&module_def);
  if (!m) return nullptr;
  PyObject* type = PyType_FromSpec(&runner_spec);
  if (!type || PyModule_AddObject(m, "Runner", type) < 0) {  // (steals type on success)
    Py_XDECREF(type);
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
