// Shared by the SME2 kernels (aarch64 only). Knows nothing about Python.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu_features.h"

namespace onnxplex::kleidi::sme2 {

// Streaming vector length in 32-bit lanes, read once with RDSVL. Without SME it is 4 (128 bits),
// which keeps the tile getters harmless on CPUs that cannot run an SME2 variant: dispatch never
// runs one there.
inline size_t svl_words() {
  static const size_t words = [] {
    if (!cpu_features().sme) return size_t{4};
    uint64_t bytes;
    __asm__ volatile(".arch_extension sme\n rdsvl %0, #1\n" : "=r"(bytes));
    return static_cast<size_t>(bytes / 4);
  }();
  return words;
}

}  // namespace onnxplex::kleidi::sme2
