// onnxplex._arena: a cache of large numpy data buffers for the executor's runs.
//
// Kernels allocate their outputs through numpy (np.empty, ufuncs, pybind11's arrays), and numpy
// through malloc. glibc returns large freed blocks to the system (munmap, or a trim of the
// heap's top) and hands the next ones out as fresh pages, each faulted in and zeroed on first
// touch: a DenseNet-121 run, whose intermediates take many sizes of a few MB, took ~2,400 page
// faults (~9 MB of new pages) and ~7% of its time that way; onnxruntime's runs take none (its
// arena keeps the buffers). While a run is going on, the session sets this module's numpy
// allocation handler (NEP 49: the handler is a context variable, so only the running thread's
// allocations use it, and every array keeps the handler it was made with for its free): blocks
// of kMinBytes or more freed into it are kept, up to a limit, and handed out again for
// requests of the same rounded size. Smaller blocks go straight to malloc and free (malloc's
// own bins keep them). The cache is shared by every session and thread (one mutex).
//
// A kept block is a malloc block, so realloc works on it; its size class is read from
// malloc_usable_size when it is freed (not from the size numpy reports), so a block is only
// ever handed out for requests it holds.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define NPY_NO_DEPRECATED_API NPY_1_22_API_VERSION
#define NPY_TARGET_VERSION NPY_1_22_API_VERSION   // (PyDataMem_SetHandler: numpy 1.22 on)
#include <numpy/arrayobject.h>

#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace {

constexpr size_t kMinBytes = size_t{256} << 10;  // below: malloc's bins serve them well
constexpr size_t kPage = 4096;

struct Cache {
  std::mutex mutex;
  std::unordered_map<size_t, std::vector<void*>> blocks;  // size class -> free blocks
  size_t cached = 0;
  size_t limit = size_t{256} << 20;
  size_t hits = 0, misses = 0, spilled = 0;
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: arrays may be freed during shutdown
  return *c;
}

size_t round_up(size_t n) { return (n + kPage - 1) / kPage * kPage; }

// A kept block of at least `size` bytes (its class: size rounded up to pages), or null.
void* take(size_t size) {
  const size_t cls = round_up(size);
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto it = c.blocks.find(cls);
  if (it == c.blocks.end() || it->second.empty()) {
    ++c.misses;
    return nullptr;
  }
  void* p = it->second.back();
  it->second.pop_back();
  c.cached -= cls;
  ++c.hits;
  return p;
}

void* arena_malloc(void*, size_t size) {
  if (size < kMinBytes) return std::malloc(size);
  void* p = take(size);
  return p != nullptr ? p : std::malloc(round_up(size));
}

void* arena_calloc(void*, size_t nelem, size_t elsize) {
  const size_t size = nelem * elsize;
  if (elsize != 0 && size / elsize != nelem) return nullptr;  // overflow
  if (size < kMinBytes) return std::calloc(nelem, elsize);
  void* p = take(size);
  if (p == nullptr) return std::calloc(1, round_up(size));  // (fresh pages: zero already)
  std::memset(p, 0, size);
  return p;
}

void* arena_realloc(void*, void* ptr, size_t new_size) {
  return std::realloc(ptr, new_size < kMinBytes ? new_size : round_up(new_size));
}

void arena_free(void*, void* ptr, size_t) {
  if (ptr == nullptr) return;
  // The class the block really holds (whatever size numpy reports for it): its usable size
  // rounded down to pages. A block malloc'd with a page multiple holds at least that.
  const size_t usable = malloc_usable_size(ptr);
  if (usable < kMinBytes) {
    std::free(ptr);
    return;
  }
  const size_t cls = usable / kPage * kPage;
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.cached + cls <= c.limit) {
      c.blocks[cls].push_back(ptr);
      c.cached += cls;
      return;
    }
    ++c.spilled;
  }
  std::free(ptr);
}

PyDataMem_Handler handler = {
    "onnxplex_arena",
    1,
    {nullptr, arena_malloc, arena_calloc, arena_realloc, arena_free},
};

PyObject* handler_capsule = nullptr;  // kept for the process's life (arrays refer to it)

PyObject* activate(PyObject*, PyObject*) {
  return PyDataMem_SetHandler(handler_capsule);   // the previous handler: give it to restore()
}

PyObject* restore(PyObject*, PyObject* previous) {
  PyObject* ours = PyDataMem_SetHandler(previous);
  if (ours == nullptr) return nullptr;
  Py_DECREF(ours);
  Py_RETURN_NONE;
}

PyObject* release(PyObject*, PyObject*) {
  std::unordered_map<size_t, std::vector<void*>> blocks;
  size_t freed = 0;
  {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    blocks.swap(c.blocks);
    freed = c.cached;
    c.cached = 0;
  }
  for (auto& kv : blocks)
    for (void* p : kv.second) std::free(p);
  return PyLong_FromSize_t(freed);
}

PyObject* set_limit(PyObject*, PyObject* arg) {
  const size_t limit = PyLong_AsSize_t(arg);
  if (limit == static_cast<size_t>(-1) && PyErr_Occurred()) return nullptr;
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.limit = limit;
  Py_RETURN_NONE;
}

PyObject* stats(PyObject*, PyObject*) {
  Cache& c = cache();
  size_t cached, limit, hits, misses, spilled, blocks = 0;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    cached = c.cached;
    limit = c.limit;
    hits = c.hits;
    misses = c.misses;
    spilled = c.spilled;
    for (const auto& kv : c.blocks) blocks += kv.second.size();
  }
  return Py_BuildValue("{s:n,s:n,s:n,s:n,s:n,s:n,s:n}", "cached_bytes", cached, "cached_blocks",
                       blocks, "limit_bytes", limit, "hits", hits, "misses", misses, "spilled",
                       spilled, "min_bytes", kMinBytes);
}

PyMethodDef methods[] = {
    {"activate", activate, METH_NOARGS,
     "Make the cache numpy's allocation handler in the current context; returns the previous "
     "handler, for restore()."},
    {"restore", restore, METH_O, "Put back the handler activate() returned."},
    {"release", release, METH_NOARGS, "Free every kept block; returns how many bytes."},
    {"set_limit", set_limit, METH_O, "At most this many bytes are kept."},
    {"stats", stats, METH_NOARGS,
     "Bytes and blocks kept, the limit, and the hits, misses and spills since import."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_arena",
                      "A cache of large numpy buffers for the executor's runs (see arena.cpp).",
                      -1, methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__arena(void) {
  import_array();   // (returns NULL with the error set when numpy cannot be imported)
  PyObject* m = PyModule_Create(&module);
  if (m == nullptr) return nullptr;
  handler_capsule = PyCapsule_New(&handler, "mem_handler", nullptr);
  if (handler_capsule == nullptr) {
    Py_DECREF(m);
    return nullptr;
  }
  Py_INCREF(handler_capsule);   // (the module's reference; the static one is never dropped)
  if (PyModule_AddObject(m, "handler", handler_capsule) < 0) {
    Py_DECREF(handler_capsule);
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
