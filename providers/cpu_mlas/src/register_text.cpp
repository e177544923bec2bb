// Text kernels that work on the Python objects themselves (str items of object arrays), so
// they live with the bindings rather than in mlas_core:
//
// * case_map: StringNormalizer's LOWER / UPPER on ASCII strs (others call back to Python).
// * CharRuns: com.microsoft Tokenizer when every token is a run of characters of one class
//   (strings.py / _re2_syntax.py decide: tokenexp "[a-zA-Z0-9_]+", "\w+", "\S+", "\b\w\w+\b",
//   "." by characters, separators that each match one character of a class). One call
//   tokenizes all strings and writes the padded [N, T] object array.
// * NgramCounter: TfIdfVectorizer's count of a pool's n-grams (a trie over vocabulary ids,
//   the items looked up in the pool's dict), onnxruntime's order and weighting, [B, out]
//   float32.
//
// All three hold the GIL throughout (they create and read Python objects);
// their scratch is per call.
#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <pybind11/stl.h>

#include "bind_util.h"

namespace onnxplex::mlas::bind {

namespace {

// A new object array of x's shape (+ [cols] when cols >= 0). numpy zero-fills a new object
// array's memory: its items are NULL, not None, until written (every caller writes them all;
// put() releases NULL as nothing).
py::array new_objects(const py::array& x, py::ssize_t cols = -1) {
  static const auto* object = new py::dtype("O");
  std::vector<py::ssize_t> shape(x.shape(), x.shape() + x.ndim());
  if (cols >= 0) shape.push_back(cols);
  return py::array(*object, shape);
}

// A C-contiguous object array's items (a copy of the array when it is not contiguous).
py::array object_items(const py::array& x, const char* what) {
  if (x.dtype().kind() != 'O') throw py::type_error(std::string(what) + " must be an object array");
  if (x.flags() & py::array::c_style) return x;
  return py::array::ensure(x, py::array::c_style);
}

// Whether `s` is a str whose canonical (PEP 393) data can be read; raises on failure.
inline bool ready_str(PyObject* s) {
  if (!PyUnicode_Check(s)) return false;
#if PY_VERSION_HEX < 0x030C0000
  if (PyUnicode_READY(s) < 0) throw py::error_already_set();
#endif
  return true;
}

// Stores `obj` (a new reference) in an object array slot, releasing what was there.
inline void put(PyObject** slot, PyObject* obj) {
  PyObject* old = *slot;
  *slot = obj;
  Py_XDECREF(old);
}

// A cheap hash of a str's code units, 8 bytes at a time (tokens are short).
inline uint64_t hash_units(const char* data, size_t len, uint32_t kind) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(len) << 2 | kind);
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    std::memcpy(&w, data + i, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  }
  if (i < len) {  // the last 1-7 bytes, shifted in (a short memcpy to the stack and a wide
    uint64_t w = 0;   // load back stall on store forwarding)
    for (size_t j = i; j < len; ++j) {
      w |= static_cast<uint64_t>(static_cast<unsigned char>(data[j])) << (8 * (j - i));
    }
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  }
  h *= 0xC4CEB9FE1A85EC53ull;
  return h ^ (h >> 29);
}

// The tokens a CharRuns made from 1-byte (ASCII / Latin-1) text, by content: a repeated token
// is the same str object again, no allocation (text repeats its words). At most kMaxEntries
// tokens of at most kMaxLen characters are kept (references held until the tokenizer goes).
class TokenCache {
 public:
  static constexpr size_t kMaxEntries = 1 << 14, kMaxLen = 32;

  // A new reference to s[start:end] (s a 1-byte str), or nullptr with a Python error set.
  PyObject* get(PyObject* s, py::ssize_t start, py::ssize_t end) {
    const auto len = static_cast<size_t>(end - start);
    if (len < 2 || len > kMaxLen) return PyUnicode_Substring(s, start, end);
    const char* p = reinterpret_cast<const char*>(PyUnicode_1BYTE_DATA(s)) + start;
    const uint64_t h = hash_units(p, len, 1);
    size_t at = 0;
    if (!slots_.empty()) {
      const size_t mask = slots_.size() - 1;
      for (at = h & mask; slots_[at] >= 0; at = (at + 1) & mask) {
        const Entry& e = entries_[static_cast<size_t>(slots_[at])];
        if (e.hash == h && static_cast<size_t>(PyUnicode_GET_LENGTH(e.obj.ptr())) == len &&
            std::memcmp(PyUnicode_1BYTE_DATA(e.obj.ptr()), p, len) == 0) {
          return Py_NewRef(e.obj.ptr());
        }
      }
    }
    // (no Python code runs between the probe above and the insert below)
    PyObject* tok = PyUnicode_Substring(s, start, end);
    if (tok == nullptr || entries_.size() >= kMaxEntries) return tok;
    entries_.push_back({h, py::reinterpret_borrow<py::object>(tok)});
    if (entries_.size() * 2 > slots_.size()) {
      slots_.assign(std::max<size_t>(1024, slots_.size() * 2), -1);
      for (size_t e = 0; e < entries_.size(); ++e) insert(e);
    } else {
      slots_[at] = static_cast<int32_t>(entries_.size() - 1);
    }
    return tok;
  }

 private:
  struct Entry {
    uint64_t hash;
    py::object obj;
  };

  void insert(size_t e) {
    const size_t mask = slots_.size() - 1;
    size_t at = entries_[e].hash & mask;
    while (slots_[at] >= 0) at = (at + 1) & mask;
    slots_[at] = static_cast<int32_t>(e);
  }

  std::vector<Entry> entries_;
  std::vector<int32_t> slots_;  // entry index or -1; a power of two, at most half full
};

class CharRuns {
 public:
  CharRuns(const std::vector<std::pair<uint32_t, uint32_t>>& ranges, bool single,
           py::ssize_t min_chars, bool mark, py::str pad)
      : single_(single), min_chars_(std::max<py::ssize_t>(min_chars, 1)), mark_(mark),
        pad_(std::move(pad)) {
    std::fill(std::begin(ascii_), std::end(ascii_), false);
    for (auto [lo, hi] : ranges) {
      if (lo > hi) throw py::value_error("CharRuns: a range must have lo <= hi");
      for (uint32_t c = lo; c <= std::min<uint32_t>(hi, 127); ++c) ascii_[c] = true;
      if (hi >= 128) wide_.emplace_back(std::max<uint32_t>(lo, 128), hi);
    }
    std::sort(wide_.begin(), wide_.end());
    start_ = py::reinterpret_steal<py::object>(PyUnicode_FromOrdinal(0x02));
    end_ = py::reinterpret_steal<py::object>(PyUnicode_FromOrdinal(0x03));
  }

  // x: an object array of str (any shape) -> x.shape + [T] tokens, padded; T is 0 when no item
  // has a token (no marks then), else the most tokens of an item (+ 2 with marks). A TypeError
  // for an item that is not a str.
  py::array call(const py::array& x_in) const {
    const py::array x = object_items(x_in, "Tokenizer input");
    const auto n = static_cast<size_t>(x.size());
    auto* const* items = static_cast<PyObject* const*>(x.data());
    // per call, not members: an allocation may run a finalizer that runs this kernel again
    std::vector<std::pair<py::ssize_t, py::ssize_t>> spans;
    std::vector<size_t> counts(n, 0);
    size_t width = 0;
    for (size_t i = 0; i < n; ++i) {
      PyObject* s = items[i];
      if (!ready_str(s)) throw py::type_error("Tokenizer input items must be str");
      const size_t before = spans.size();
      switch (PyUnicode_KIND(s)) {
        case PyUnicode_1BYTE_KIND:
          scan(PyUnicode_1BYTE_DATA(s), PyUnicode_GET_LENGTH(s), spans);
          break;
        case PyUnicode_2BYTE_KIND:
          scan(PyUnicode_2BYTE_DATA(s), PyUnicode_GET_LENGTH(s), spans);
          break;
        default:
          scan(PyUnicode_4BYTE_DATA(s), PyUnicode_GET_LENGTH(s), spans);
          break;
      }
      counts[i] = spans.size() - before;
      width = std::max(width, counts[i]);
    }
    if (width == 0) return new_objects(x, 0);
    const size_t cols = width + (mark_ ? 2 : 0);
    py::array out = new_objects(x, static_cast<py::ssize_t>(cols));
    auto** slot = static_cast<PyObject**>(out.mutable_data());
    PyObject* pad = pad_.ptr();
    size_t k = 0;
    for (size_t i = 0; i < n; ++i) {
      PyObject* s = items[i];
      PyObject** row = slot + i * cols;
      size_t j = 0;
      if (mark_) put(row + j++, Py_NewRef(start_.ptr()));
      for (size_t t = 0; t < counts[i]; ++t, ++k) {
        PyObject* tok = PyUnicode_KIND(s) == PyUnicode_1BYTE_KIND
                            ? cache_.get(s, spans[k].first, spans[k].second)
                            : PyUnicode_Substring(s, spans[k].first, spans[k].second);
        if (tok == nullptr) throw py::error_already_set();
        put(row + j++, tok);
      }
      if (mark_) put(row + j++, Py_NewRef(end_.ptr()));
      for (; j < cols; ++j) put(row + j, Py_NewRef(pad));
    }
    return out;
  }

 private:
  bool in_class(uint32_t c) const {
    if (c < 128) return ascii_[c];
    auto it = std::upper_bound(wide_.begin(), wide_.end(),
                               std::make_pair(c, UINT32_MAX));
    return it != wide_.begin() && std::prev(it)->second >= c;
  }

  template <typename Char>
  void scan(const Char* p, py::ssize_t len,
            std::vector<std::pair<py::ssize_t, py::ssize_t>>& spans) const {
    py::ssize_t i = 0;
    while (i < len) {
      if (!in_class(p[i])) {
        ++i;
        continue;
      }
      if (single_) {
        if (min_chars_ <= 1) spans.emplace_back(i, i + 1);
        ++i;
        continue;
      }
      const py::ssize_t start = i;
      while (i < len && in_class(p[i])) ++i;
      if (i - start >= min_chars_) spans.emplace_back(start, i);
    }
  }

  bool ascii_[128];
  std::vector<std::pair<uint32_t, uint32_t>> wide_;  // code points >= 128, sorted
  bool single_;
  py::ssize_t min_chars_;
  bool mark_;
  py::str pad_;
  py::object start_, end_;
  mutable TokenCache cache_;  // (its calls run no Python code: safe across re-entry)
};

// A set of strs (their canonical code units and kind) -> ids: open addressing, a cheap hash of
// 8 bytes at a time (tokens are short; std::unordered_map<std::string> cost ~3x more).
class StrTable {
 public:
  void add(PyObject* s, int32_t id) {
    const Key k = key_of(s);
    if (find(k) >= 0) return;
    entries_.push_back({k.hash, k.kind, k.len, static_cast<uint32_t>(bytes_.size()), id});
    bytes_.append(k.data, k.len);
    if (entries_.size() * 2 > slots_.size()) rehash(std::max<size_t>(16, slots_.size() * 2));
    else insert(entries_.size() - 1);
  }

  // The id of str `s`, or -1.
  int32_t get(PyObject* s) const { return slots_.empty() ? -1 : find(key_of(s)); }

 private:
  struct Key {
    const char* data;
    uint32_t len;
    uint32_t kind;
    uint64_t hash;
  };
  struct Entry {
    uint64_t hash;
    uint32_t kind, len, offset;
    int32_t id;
  };

  static Key key_of(PyObject* s) {
    const auto kind = static_cast<uint32_t>(PyUnicode_KIND(s));
    const auto len = static_cast<uint32_t>(kind * static_cast<size_t>(PyUnicode_GET_LENGTH(s)));
    const auto* data = static_cast<const char*>(PyUnicode_DATA(s));
    return {data, len, kind, hash_units(data, len, kind)};
  }

  int32_t find(const Key& k) const {
    if (slots_.empty()) return -1;
    const size_t mask = slots_.size() - 1;
    for (size_t at = k.hash & mask;; at = (at + 1) & mask) {
      const int32_t e = slots_[at];
      if (e < 0) return -1;
      const Entry& en = entries_[static_cast<size_t>(e)];
      if (en.hash == k.hash && en.len == k.len && en.kind == k.kind &&
          std::memcmp(bytes_.data() + en.offset, k.data, k.len) == 0) {
        return en.id;
      }
    }
  }

  void insert(size_t e) {
    const size_t mask = slots_.size() - 1;
    size_t at = entries_[e].hash & mask;
    while (slots_[at] >= 0) at = (at + 1) & mask;
    slots_[at] = static_cast<int32_t>(e);
  }

  void rehash(size_t n) {
    slots_.assign(n, -1);
    for (size_t e = 0; e < entries_.size(); ++e) insert(e);
  }

  std::vector<Entry> entries_;
  std::vector<int32_t> slots_;  // entry index or -1; a power of two, at most half full
  std::string bytes_;
};

enum class Weighting { kTF = 0, kIDF = 1, kTFIDF = 2 };

// Outputs of at least this many floats (1 MB) are allocated zeroed by numpy.zeros.
constexpr size_t kCallocFloats = size_t{1} << 18;

class NgramCounter {
 public:
  // vocab: item (str, bytes or int) -> token id 0..V-1; gram_of[node]: the n-gram id ending
  // at trie node `node` (-1: a prefix only), nodes 0..V-1 being the 1-grams; edges:
  // node * V + token -> child node; indexes[g]: n-gram g's output column; weights (empty:
  // all 1) weigh n-gram g.
  NgramCounter(py::dict vocab, std::vector<int32_t> gram_of, const py::dict& edges, int64_t v,
               std::vector<int64_t> indexes, std::vector<float> weights, int mode, int min_n,
               int max_n, int max_skip, int64_t out_size)
      : vocab_(std::move(vocab)), gram_of_(std::move(gram_of)), v_(v),
        indexes_(std::move(indexes)), weights_(std::move(weights)),
        mode_(static_cast<Weighting>(mode)), min_n_(min_n), max_n_(max_n),
        max_skip_(max_skip), out_size_(out_size) {
    for (auto item : edges) {
      edges_.emplace(item.first.cast<int64_t>(), item.second.cast<int32_t>());
    }
    for (auto item : vocab_) {
      PyObject* key = item.first.ptr();
      if (PyLong_CheckExact(key)) {
        ints_.emplace(item.first.cast<int64_t>(), item.second.cast<int32_t>());
      } else if (PyUnicode_CheckExact(key) && ready_str(key)) {
        strs_.add(key, item.second.cast<int32_t>());
      }
    }
    for (int64_t col : indexes_) {
      if (col < 0 || col >= out_size_) throw py::value_error("NgramCounter: bad column");
    }
  }

  // x: [B, C] object (str / bytes items), int32 or int64 -> [B, out] float32.
  py::array call(const py::array& x_in) const {
    if (x_in.ndim() != 2) throw py::value_error("NgramCounter: input must be [B, C]");
    const auto b = static_cast<size_t>(x_in.shape(0));
    const auto c = static_cast<size_t>(x_in.shape(1));
    const py::ssize_t shape[2] = {static_cast<py::ssize_t>(b),
                                  static_cast<py::ssize_t>(out_size_)};
    const size_t total = b * static_cast<size_t>(out_size_);
    py::array_t<float> y;
    if (total >= kCallocFloats) {  // numpy.zeros: calloc'd pages come zeroed, written once
      static const auto* zeros = new py::object(py::module_::import("numpy").attr("zeros"));
      y = (*zeros)(py::make_tuple(shape[0], shape[1]), "float32");
    } else {  // (calling numpy.zeros costs ~1.5 us more than this)
      y = py::array_t<float>({shape[0], shape[1]});
      std::fill(y.mutable_data(), y.mutable_data() + total, 0.0f);
    }
    float* yp = y.mutable_data();
    // per call, not members: a lookup may run Python code (an item's __eq__), which may run
    // this kernel again
    Scratch sc(c, static_cast<size_t>(out_size_));
    const char kind = x_in.dtype().kind();
    if (kind == 'O') {
      const py::array x = object_items(x_in, "TfIdfVectorizer input");
      auto* const* items = static_cast<PyObject* const*>(x.data());
      for (size_t r = 0; r < b; ++r) {
        for (size_t j = 0; j < c; ++j) sc.ids[j] = lookup(items[r * c + j]);
        count_row(sc, yp + r * static_cast<size_t>(out_size_));
      }
    } else if (kind == 'i') {   // (the kernel passes int32 and int64 only)
      const auto x = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(x_in);
      if (!x) throw py::type_error("TfIdfVectorizer: input must be int32 or int64");
      const int64_t* xp = x.data();
      for (size_t r = 0; r < b; ++r) {
        for (size_t j = 0; j < c; ++j) {
          auto it = ints_.find(xp[r * c + j]);
          sc.ids[j] = it == ints_.end() ? -1 : it->second;
        }
        count_row(sc, yp + r * static_cast<size_t>(out_size_));
      }
    } else {
      throw py::type_error("TfIdfVectorizer: input must be string, int32 or int64");
    }
    return std::move(y);
  }

 private:
  // A str is found by its code units (no Python hash of a fresh token); other items (bytes,
  // str subclasses, numbers) in the pool's dict.
  int32_t lookup(PyObject* item) const {
    if (PyUnicode_CheckExact(item) && ready_str(item)) return strs_.get(item);
    PyObject* id = PyDict_GetItemWithError(vocab_.ptr(), item);  // borrowed
    if (id == nullptr) {
      if (PyErr_Occurred()) throw py::error_already_set();
      return -1;
    }
    return static_cast<int32_t>(PyLong_AsLong(id));
  }

  int32_t child(int32_t node, int32_t tok) const {
    if (edges_.empty()) return -1;
    auto it = edges_.find(static_cast<int64_t>(node) * v_ + tok);
    return it == edges_.end() ? -1 : it->second;
  }

  struct Scratch {
    Scratch(size_t c, size_t out) : ids(c), acc(out, 0.0), seen(out, 0) {
      found.reserve(2 * c);
      touched.reserve(c);
    }
    std::vector<int32_t> ids, found;
    std::vector<double> acc;  // a row's sums by column
    std::vector<char> seen;
    std::vector<size_t> touched;  // the columns acc holds
  };

  // onnxruntime's loop (strings.py `small`): skip by skip, position by position, shortest
  // first; 1-grams in the first pass only. Sums in double, one rounding to float32.
  void count_row(Scratch& sc, float* y) const {
    const auto c = static_cast<int64_t>(sc.ids.size());
    const int32_t* ids = sc.ids.data();
    sc.found.clear();
    int first_size = min_n_;
    for (int skip = 1; skip <= max_skip_ + 1; ++skip) {
      const int64_t starts = c - static_cast<int64_t>(skip) * (first_size - 1);
      for (int64_t s = 0; s < starts; ++s) {
        int32_t node = ids[s];
        if (node < 0) continue;
        if (first_size == 1 && gram_of_[node] >= 0) sc.found.push_back(gram_of_[node]);
        int64_t pos = s + skip;
        for (int n = 2; n <= max_n_ && pos < c; ++n, pos += skip) {
          const int32_t tok = ids[pos];
          node = tok >= 0 ? child(node, tok) : -1;
          if (node < 0) break;
          if (n >= first_size && gram_of_[node] >= 0) sc.found.push_back(gram_of_[node]);
        }
      }
      if (first_size == 1) {
        first_size = 2;
        if (first_size > max_n_) break;
      }
    }
    for (int32_t g : sc.found) {
      const auto col = static_cast<size_t>(indexes_[g]);
      const double w = weights_.empty() ? 1.0 : static_cast<double>(weights_[g]);
      if (!sc.seen[col]) {
        sc.seen[col] = 1;
        sc.touched.push_back(col);
      }
      sc.acc[col] = mode_ == Weighting::kIDF ? w : sc.acc[col] + w;
    }
    for (size_t col : sc.touched) {
      y[col] = static_cast<float>(sc.acc[col]);
      sc.acc[col] = 0.0;
      sc.seen[col] = 0;
    }
    sc.touched.clear();
  }

  py::dict vocab_;
  std::vector<int32_t> gram_of_;
  std::unordered_map<int64_t, int32_t> edges_, ints_;
  StrTable strs_;
  int64_t v_;
  std::vector<int64_t> indexes_;
  std::vector<float> weights_;
  Weighting mode_;
  int min_n_, max_n_, max_skip_;
  int64_t out_size_;
};

// StringNormalizer's case change: ASCII strs here (unchanged ones are the same object
// again), any other item through `other` (a Python function of one str). A TypeError for an
// item that is not a str.
py::array case_map(const py::array& x_in, bool upper, const py::function& other) {
  const py::array x = object_items(x_in, "StringNormalizer input");
  py::array out = new_objects(x);
  const auto n = static_cast<size_t>(x.size());
  auto* const* items = static_cast<PyObject* const*>(x.data());
  auto** slot = static_cast<PyObject**>(out.mutable_data());
  const unsigned char lo = upper ? 'a' : 'A';
  for (size_t i = 0; i < n; ++i) {
    PyObject* s = items[i];
    if (!ready_str(s)) throw py::type_error("StringNormalizer input items must be str");
    PyObject* r = nullptr;
    if (PyUnicode_CheckExact(s) && PyUnicode_IS_ASCII(s)) {
      const auto* p = static_cast<const unsigned char*>(PyUnicode_DATA(s));
      const py::ssize_t len = PyUnicode_GET_LENGTH(s);
      py::ssize_t k = 0;
      while (k < len && static_cast<unsigned char>(p[k] - lo) >= 26) ++k;
      if (k == len) {
        r = Py_NewRef(s);
      } else {
        r = PyUnicode_New(len, 127);
        if (r == nullptr) throw py::error_already_set();
        auto* q = static_cast<unsigned char*>(PyUnicode_DATA(r));
        std::memcpy(q, p, static_cast<size_t>(len));
        for (; k < len; ++k) {
          if (static_cast<unsigned char>(q[k] - lo) < 26) q[k] ^= 0x20;
        }
      }
    } else {
      r = other(py::handle(s)).release().ptr();
    }
    put(slot + i, r);
  }
  return out;
}

}  // namespace

void register_text(py::module_& m) {
  py::class_<CharRuns>(m, "CharRuns",
                       "Tokenizer whose tokens are runs of one character class (immutable).")
      .def(py::init<const std::vector<std::pair<uint32_t, uint32_t>>&, bool, py::ssize_t, bool,
                    py::str>(),
           py::arg("ranges"), py::arg("single"), py::arg("min_chars"), py::arg("mark"),
           py::arg("pad"),
           "ranges: the class's code point ranges (lo, hi); single: each character of the "
           "class is a token, else each maximal run of them; runs shorter than min_chars are "
           "dropped; mark frames each row with U+0002 ... U+0003; pad fills the rows.")
      .def("run", &CharRuns::call, py::arg("x"),
           "An object array of str -> x.shape + [T] tokens (T 0 when none has a token).");
  m.def("case_map", &case_map, py::arg("x"), py::arg("upper"), py::arg("other"),
        "An object array of str -> its items in lower (upper) case, same shape: ASCII strs "
        "here (unchanged ones not copied), the others by other(item).");
  py::class_<NgramCounter>(m, "NgramCounter", "TfIdfVectorizer's n-gram counts (immutable).")
      .def(py::init<py::dict, std::vector<int32_t>, const py::dict&, int64_t,
                    std::vector<int64_t>, std::vector<float>, int, int, int, int, int64_t>(),
           py::arg("vocab"), py::arg("gram_of"), py::arg("edges"), py::arg("v"),
           py::arg("indexes"), py::arg("weights"), py::arg("mode"), py::arg("min_n"),
           py::arg("max_n"), py::arg("max_skip"), py::arg("out_size"))
      .def("run", &NgramCounter::call, py::arg("x"),
           "[B, C] items (object, int32 or int64) -> [B, out] float32.");
}

}  // namespace onnxplex::mlas::bind
