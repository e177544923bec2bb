// onnxplex._mempattern: memory patterns for a session's runs (onnxruntime's enable_mem_pattern).
//
// A run of a session allocates the same large intermediates in the same order every time its
// inputs have the same shapes. A Pattern learns that order once and then serves those
// allocations from one buffer of its own, at offsets planned ahead like a compiler's stack
// frame, instead of from malloc: glibc gives varied multi-megabyte blocks back to the system
// when they are freed (its heap top is trimmed, large chunks are unmapped), and the next run
// pays a page fault per fresh 4 KB page (DenseNet-121: ~2,400 a run, Whisper's encoder ~8,000).
//
// How: while a Pattern is active in a thread (begin() ... end()), numpy's allocation handler
// for that thread's context (NEP 49; a context variable, so other threads and the caller's own
// arrays keep numpy's handler) is this module's. Requests below kMinBytes go to numpy's default
// handler untouched. The others:
//   - recording run: allocated by the default handler; their sizes and the order of every
//     allocation and free are recorded. At end(), the blocks freed within the run get offsets
//     in one buffer by a best-fit simulation of that order (a block freed is reused by a later
//     one, as malloc would); blocks still alive at the end (the outputs) get none.
//   - planned runs: the k-th request gets its planned offset when its size is the planned one
//     and no live block of the buffer overlaps it; anything else goes to the default handler.
//     The overlap test makes a wrong plan (other shapes, data-dependent sizes) cost speed,
//     never correctness: the plan only chooses addresses, the live map decides.
// A block returned to the caller (an output that was an intermediate in the recorded run)
// keeps the buffer alive: it is freed when both the Pattern and its last live block are gone.
//
// Only the CPython C API. numpy's handler structs and its three handler functions are taken
// from numpy's C API table at import (stable since numpy 1.22, NEP 49): no numpy headers.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace {

// ---- numpy's NEP 49 structs (version 1), as numpy/ndarraytypes.h declares them
struct DataMemAllocator {
  void* ctx;
  void* (*malloc)(void* ctx, size_t size);
  void* (*calloc)(void* ctx, size_t nelem, size_t elsize);
  void* (*realloc)(void* ctx, void* ptr, size_t new_size);
  void (*free)(void* ctx, void* ptr, size_t size);
};
struct DataMemHandler {
  char name[127];
  uint8_t version;
  DataMemAllocator allocator;
};
using SetHandlerFn = PyObject* (*)(PyObject*);

SetHandlerFn set_handler = nullptr;     // PyDataMem_SetHandler (API table entry 304)
DataMemAllocator defaults{};            // numpy's default handler's functions (entry 306)
PyObject* handler_capsule = nullptr;    // ours, "mem_handler" capsule

constexpr size_t kMinBytes = 256 * 1024;   // smaller blocks: malloc reuses them hot
constexpr size_t kAlign = 64;
constexpr size_t kSkewRoom = 16 * kAlign;  // each block's start: 0-15 cache lines into its room
constexpr int kMaxRecordings = 3;          // plans a Pattern may learn before it gives up

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

enum class State { Warmup, Record, Planned, Off };

// Everything one Pattern knows; it outlives the Python object while blocks of its buffer live.
struct Shared {
  State state = State::Warmup;
  int recordings = 0;
  bool active = false;        // inside begin() .. end() (one thread at a time)
  bool orphan = false;        // the Python object is gone
  // recording
  std::vector<size_t> sizes;
  std::vector<int64_t> born, died;   // event numbers; died -1: alive at the end
  int64_t event = 0;
  // plan
  std::vector<int64_t> offsets;      // per request: offset in the buffer, or -1
  char* base = nullptr;
  size_t total = 0;
  std::map<size_t, size_t> live;     // buffer blocks alive: offset -> end
  size_t next = 0;                   // this run's request counter
  size_t misses = 0;                 // this run's
  // counters for stats()
  uint64_t hits_total = 0, misses_total = 0, runs_planned = 0;
};

// All shared state is behind one mutex: the handler runs for large blocks only (a few per
// step), and frees may come from any thread (an output freed by the caller later).
std::mutex mu;
std::map<uintptr_t, Shared*> buffers;             // base -> owner, for frees
std::unordered_map<void*, std::pair<Shared*, size_t>> recorded;  // block -> (owner, request)
thread_local Shared* current = nullptr;

void release_buffer(Shared* s) {   // (mu held)
  if (s->base != nullptr) {
    buffers.erase(reinterpret_cast<uintptr_t>(s->base));
    std::free(s->base);
    s->base = nullptr;
  }
}

// A recorded block freed (or resized): its request's death in the recording (mu held).
void note_freed(void* ptr) {
  auto it = recorded.find(ptr);
  if (it == recorded.end()) return;
  auto [s, k] = it->second;
  s->died[k] = s->event++;
  recorded.erase(it);
}

// The blocks s recorded and still alive: no longer followed (mu held).
void forget_recorded(const Shared* s) {
  for (auto it = recorded.begin(); it != recorded.end();)
    it = it->second.first == s ? recorded.erase(it) : std::next(it);
}

// The owner of ptr if it lies in a Pattern's buffer (mu held).
Shared* owner_of(void* ptr) {
  if (buffers.empty()) return nullptr;
  auto p = reinterpret_cast<uintptr_t>(ptr);
  auto it = buffers.upper_bound(p);
  if (it == buffers.begin()) return nullptr;
  --it;
  Shared* s = it->second;
  return p < it->first + s->total ? s : nullptr;
}

// Frees a block of s's buffer (mu held); true when s itself went with it.
bool drop_block(Shared* s, void* ptr) {
  s->live.erase(static_cast<size_t>(static_cast<char*>(ptr) - s->base));
  if (s->orphan && s->live.empty()) {
    release_buffer(s);
    delete s;
    return true;
  }
  return false;
}

bool overlaps_live(const Shared* s, size_t off, size_t size) {
  auto it = s->live.lower_bound(off);
  if (it != s->live.end() && it->first < off + size) return true;
  if (it != s->live.begin() && std::prev(it)->second > off) return true;
  return false;
}

// A planned block for the next request of `size` bytes, or null (mu held).
void* take_planned(Shared* s, size_t size) {
  size_t k = s->next++;
  if (k < s->offsets.size() && s->sizes[k] == size) {
    if (s->offsets[k] < 0) return nullptr;   // as planned: it outlives the run (an output)
    auto off = static_cast<size_t>(s->offsets[k]);
    if (!overlaps_live(s, off, size)) {
      s->live.emplace(off, off + size);
      ++s->hits_total;
      return s->base + off;
    }
  }
  ++s->misses;
  return nullptr;
}

// Offsets for the recorded blocks freed within the run: the allocations and frees replayed in
// their order over one address range, each block placed in the smallest free range that holds
// it (the lowest such), freed ranges merged with their neighbours. Each block gets its size in
// 64-byte lines and 16 lines more, and starts 0-15 lines into that room, varying by block:
// arrays a step reads and writes then do not share their offset within a 4 KB page as often
// (loads that alias an earlier store's 4 KB offset wait for it), and blocks of equal sizes still
// fit each other's places.
void plan(Shared* s) {
  size_t n = s->sizes.size();
  std::vector<std::pair<int64_t, int64_t>> events;   // (event, +k+1 alloc / -(k+1) free)
  for (size_t k = 0; k < n; ++k) {
    if (s->died[k] < 0) continue;
    events.emplace_back(s->born[k], static_cast<int64_t>(k) + 1);
    events.emplace_back(s->died[k], -static_cast<int64_t>(k) - 1);
  }
  std::sort(events.begin(), events.end());
  std::map<size_t, size_t> free_ranges;   // offset -> size
  std::vector<size_t> span(n, 0);
  s->offsets.assign(n, -1);
  size_t end = 0;
  for (auto& [when, code] : events) {
    (void)when;
    if (code > 0) {
      size_t k = static_cast<size_t>(code - 1);
      size_t skew = (k * 5 % 16) * kAlign;
      size_t need = round_up(s->sizes[k], kAlign) + kSkewRoom;   // (equal sizes share holes)
      auto best = free_ranges.end();
      for (auto it = free_ranges.begin(); it != free_ranges.end(); ++it)
        if (it->second >= need && (best == free_ranges.end() || it->second < best->second))
          best = it;
      size_t off;
      if (best != free_ranges.end()) {
        off = best->first;
        size_t left = best->second - need;
        free_ranges.erase(best);
        if (left) free_ranges.emplace(off + need, left);
      } else if (!free_ranges.empty() && std::prev(free_ranges.end())->first +
                                                 std::prev(free_ranges.end())->second == end) {
        auto last = std::prev(free_ranges.end());   // the free tail grows to fit
        off = last->first;
        end = off + need;
        free_ranges.erase(last);
      } else {
        off = end;
        end += need;
      }
      span[k] = need;
      s->offsets[k] = static_cast<int64_t>(off + skew);
    } else {
      size_t k = static_cast<size_t>(-code - 1);
      size_t off = static_cast<size_t>(s->offsets[k]) - (k * 5 % 16) * kAlign;
      size_t size = span[k];
      auto next = free_ranges.lower_bound(off);
      if (next != free_ranges.end() && next->first == off + size) {
        size += next->second;
        free_ranges.erase(next);
      }
      if (!free_ranges.empty()) {
        auto prev = free_ranges.lower_bound(off);
        if (prev != free_ranges.begin()) {
          --prev;
          if (prev->first + prev->second == off) {
            off = prev->first;
            size += prev->second;
            free_ranges.erase(prev);
          }
        }
      }
      free_ranges.emplace(off, size);
    }
  }
  s->total = end;
}

// ---- numpy's handler functions

// Notes a recorded block (mu held).
void note_recorded(Shared* s, void* p, size_t size) {
  recorded[p] = {s, s->sizes.size()};
  s->sizes.push_back(size);
  s->born.push_back(s->event++);
  s->died.push_back(-1);
}

void* h_malloc(void*, size_t size) {
  Shared* s = current;   // (its state changes only in end(), on this thread)
  if (s != nullptr && size >= kMinBytes) {
    if (s->state == State::Planned) {
      std::lock_guard<std::mutex> lock(mu);
      if (void* p = take_planned(s, size)) return p;
    } else if (s->state == State::Record) {
      void* p = defaults.malloc(defaults.ctx, size);
      if (p != nullptr) {
        std::lock_guard<std::mutex> lock(mu);
        note_recorded(s, p, size);
      }
      return p;
    }
  }
  return defaults.malloc(defaults.ctx, size);
}

void* h_calloc(void*, size_t nelem, size_t elsize) {
  Shared* s = current;
  size_t size = nelem * elsize;
  if (s != nullptr && size >= kMinBytes && (elsize == 0 || size / elsize == nelem)) {
    if (s->state == State::Planned) {
      void* p;
      {
        std::lock_guard<std::mutex> lock(mu);
        p = take_planned(s, size);
      }
      if (p != nullptr) {
        std::memset(p, 0, size);
        return p;
      }
    } else if (s->state == State::Record) {
      void* p = defaults.calloc(defaults.ctx, nelem, elsize);
      if (p != nullptr) {
        std::lock_guard<std::mutex> lock(mu);
        note_recorded(s, p, size);
      }
      return p;
    }
  }
  return defaults.calloc(defaults.ctx, nelem, elsize);
}

void h_free(void*, void* ptr, size_t size) {
  if (ptr == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (Shared* s = owner_of(ptr)) {
      drop_block(s, ptr);
      return;
    }
    note_freed(ptr);
  }
  defaults.free(defaults.ctx, ptr, size);
}

void* h_realloc(void*, void* ptr, size_t new_size) {
  if (ptr != nullptr) {
    std::unique_lock<std::mutex> lock(mu);
    if (Shared* s = owner_of(ptr)) {
      size_t off = static_cast<size_t>(static_cast<char*>(ptr) - s->base);
      auto it = s->live.find(off);
      size_t old = it != s->live.end() ? it->second - off : 0;
      lock.unlock();
      void* p = defaults.malloc(defaults.ctx, new_size);
      if (p == nullptr) return nullptr;   // (the old block stays, as realloc's contract)
      std::memcpy(p, ptr, std::min(old, new_size));
      lock.lock();
      drop_block(s, ptr);
      return p;
    }
    note_freed(ptr);   // (a recorded block resized: its request counts as freed)
  }
  return defaults.realloc(defaults.ctx, ptr, new_size);
}

DataMemHandler handler = {"onnxplex_mempattern", 1,
                          {nullptr, h_malloc, h_calloc, h_realloc, h_free}};

// ---- the Pattern type

struct Pattern {
  PyObject_HEAD
  Shared* shared;
  PyObject* saved;   // the handler begin() replaced (a capsule), while active
  Shared* outer;     // the thread's Pattern before begin() (a run inside a run)
};

PyObject* Pattern_new(PyTypeObject* type, PyObject* args, PyObject* kwds) {
  static const char* kw[] = {nullptr};
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "", const_cast<char**>(kw))) return nullptr;
  auto* self = reinterpret_cast<Pattern*>(type->tp_alloc(type, 0));
  if (self == nullptr) return nullptr;
  self->shared = new Shared();
  return reinterpret_cast<PyObject*>(self);
}

void Pattern_dealloc(Pattern* self) {
  if (Shared* s = self->shared) {
    std::lock_guard<std::mutex> lock(mu);
    forget_recorded(s);
    if (s->live.empty()) {
      release_buffer(s);
      delete s;
    } else {
      s->orphan = true;   // its last live block frees it (drop_block)
    }
  }
  Py_XDECREF(self->saved);
  PyTypeObject* type = Py_TYPE(self);
  type->tp_free(reinterpret_cast<PyObject*>(self));
  Py_DECREF(type);
}

// begin() -> bool: the pattern takes the calling thread's large allocations until end(); False
// (nothing installed) when it is off, busy in another thread, or in its warm-up run.
PyObject* Pattern_begin(Pattern* self, PyObject*) {
  Shared* s = self->shared;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (s->active || s->state == State::Off) Py_RETURN_FALSE;
    if (s->state == State::Warmup) {   // (a first run builds caches it never frees)
      s->state = State::Record;
      Py_RETURN_FALSE;
    }
    s->active = true;
    s->next = 0;
    s->misses = 0;
    if (s->state == State::Record) {
      s->sizes.clear();
      s->born.clear();
      s->died.clear();
      s->event = 0;
    }
  }
  PyObject* old = set_handler(handler_capsule);
  if (old == nullptr) {
    std::lock_guard<std::mutex> lock(mu);
    s->active = false;
    return nullptr;
  }
  self->saved = old;
  self->outer = current;
  current = s;
  Py_RETURN_TRUE;
}

// After a run (mu held): a recording becomes the plan (or the pattern turns off); a planned
// run that strayed from its plan has the pattern record again, a bounded number of times.
void finish_run(Shared* s) {
  s->active = false;
  if (s->state == State::Record) {
    forget_recorded(s);   // (alive at the end: unplanned)
    ++s->recordings;
    if (!s->live.empty()) {   // blocks of an older plan still out: keep that buffer
      s->state = s->recordings < kMaxRecordings ? State::Record : State::Off;
      return;
    }
    release_buffer(s);
    plan(s);
    if (s->total == 0) {   // (nothing planned)
      s->state = State::Off;
      return;
    }
    s->base = static_cast<char*>(std::aligned_alloc(4096, round_up(s->total, 4096)));
    if (s->base == nullptr) {
      s->state = State::Off;
      s->total = 0;
      return;
    }
    buffers[reinterpret_cast<uintptr_t>(s->base)] = s;
    s->state = State::Planned;
  } else if (s->state == State::Planned) {
    ++s->runs_planned;
    s->misses_total += s->misses;
    // Requests that went elsewhere, or fewer than planned: the order changed (other sizes
    // from data, a different path); learn it again, a bounded number of times.
    if (s->misses || s->next != s->offsets.size())
      s->state = s->recordings < kMaxRecordings ? State::Record : State::Off;
  }
}

// end() -> bool: whether the pattern may still serve later runs (False: it is off for good).
PyObject* Pattern_end(Pattern* self, PyObject*) {
  Shared* s = self->shared;
  PyObject* prev = nullptr;
  bool ran = self->saved != nullptr;
  if (ran) {
    current = self->outer;
    prev = set_handler(self->saved);
    Py_CLEAR(self->saved);
  }
  bool on;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (ran) finish_run(s);
    on = s->state != State::Off;
  }
  if (ran && prev == nullptr) return nullptr;
  Py_XDECREF(prev);
  return PyBool_FromLong(on);
}

PyObject* Pattern_stats(Pattern* self, PyObject*) {
  Shared* s = self->shared;
  std::lock_guard<std::mutex> lock(mu);
  const char* state = s->state == State::Warmup   ? "warmup"
                      : s->state == State::Record ? "record"
                      : s->state == State::Planned ? "planned"
                                                   : "off";
  Py_ssize_t planned = std::count_if(s->offsets.begin(), s->offsets.end(),
                                     [](int64_t o) { return o >= 0; });
  return Py_BuildValue("{s:s,s:n,s:n,s:n,s:K,s:K,s:K,s:i,s:n}", "state", state, "requests",
                       static_cast<Py_ssize_t>(s->sizes.size()), "planned", planned,
                       "buffer_bytes", static_cast<Py_ssize_t>(s->base ? s->total : 0),
                       "hits", static_cast<unsigned long long>(s->hits_total), "misses",
                       static_cast<unsigned long long>(s->misses_total), "planned_runs",
                       static_cast<unsigned long long>(s->runs_planned), "recordings",
                       s->recordings, "live", static_cast<Py_ssize_t>(s->live.size()));
}

PyMethodDef Pattern_methods[] = {
    {"begin", reinterpret_cast<PyCFunction>(Pattern_begin), METH_NOARGS,
     "begin() -> bool: take this thread's large numpy allocations until end()."},
    {"end", reinterpret_cast<PyCFunction>(Pattern_end), METH_NOARGS,
     "end() -> bool: give the thread's allocations back to the handler begin() replaced; "
     "False once the pattern is off for good."},
    {"stats", reinterpret_cast<PyCFunction>(Pattern_stats), METH_NOARGS,
     "stats() -> dict: state, requests recorded, planned, buffer bytes, hits, misses."},
    {nullptr, nullptr, 0, nullptr}};

PyType_Slot pattern_slots[] = {
    {Py_tp_new, reinterpret_cast<void*>(Pattern_new)},
    {Py_tp_dealloc, reinterpret_cast<void*>(Pattern_dealloc)},
    {Py_tp_methods, Pattern_methods},
    {Py_tp_doc, const_cast<char*>("A session's memory pattern for one set of input shapes.")},
    {0, nullptr}};

PyType_Spec pattern_spec = {"onnxplex._mempattern.Pattern", sizeof(Pattern), 0,
                            Py_TPFLAGS_DEFAULT, pattern_slots};

int load_numpy_api() {
  PyObject* mod = PyImport_ImportModule("numpy._core._multiarray_umath");
  if (mod == nullptr) {
    PyErr_Clear();
    mod = PyImport_ImportModule("numpy.core._multiarray_umath");
    if (mod == nullptr) return -1;
  }
  PyObject* cap = PyObject_GetAttrString(mod, "_ARRAY_API");
  Py_DECREF(mod);
  if (cap == nullptr) return -1;
  auto table = static_cast<void**>(PyCapsule_GetPointer(cap, nullptr));
  Py_DECREF(cap);
  if (table == nullptr) return -1;
  set_handler = reinterpret_cast<SetHandlerFn>(table[304]);
  PyObject* def = *reinterpret_cast<PyObject**>(table[306]);
  auto* h = static_cast<DataMemHandler*>(PyCapsule_GetPointer(def, "mem_handler"));
  if (h == nullptr) return -1;
  if (h->version != 1) {
    PyErr_SetString(PyExc_ImportError, "numpy's allocation handler is not version 1");
    return -1;
  }
  defaults = h->allocator;
  handler_capsule = PyCapsule_New(&handler, "mem_handler", nullptr);
  return handler_capsule == nullptr ? -1 : 0;
}

PyModuleDef module = {PyModuleDef_HEAD_INIT, "onnxplex._mempattern",
                      "Memory patterns: a session's large intermediates served from one "
                      "planned buffer (see core/src/mempattern.cpp).",
                      -1, nullptr, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__mempattern(void) {
  if (load_numpy_api() < 0) return nullptr;
  PyObject* m = PyModule_Create(&module);
  if (m == nullptr) return nullptr;
  PyObject* type = PyType_FromSpec(&pattern_spec);
  if (!type || PyModule_AddObject(m, "Pattern", type) < 0) {  // (steals type on success)
    Py_XDECREF(type);
    Py_DECREF(m);
    return nullptr;
  }
  PyModule_AddIntConstant(m, "MIN_BYTES", static_cast<long>(kMinBytes));
  return m;
}
