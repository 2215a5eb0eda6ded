// Fuzz target: the safetensors reader (engine/safetensors.h).
//
// The input is a .safetensors file. It is opened with TensorStore::open() (header parsing and
// validation) and every tensor listed is looked up and loaded to fp32 (the loads are bounded:
// a valid header's offsets lie inside the input). std::runtime_error, the reader's documented
// error for a malformed file, is the expected outcome; anything else escaping (another
// exception, a sanitizer report, a timeout, unbounded memory) is a finding.
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "engine/safetensors.h"
#include "tests/fuzz/fuzz_input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static servelab::fuzz::FuzzInputFile file("model.safetensors");
  const std::string& path = file.write(data, size);
  try {
    const servelab::TensorStore store = servelab::TensorStore::open(path);
    for (const std::string& name : store.names()) {
      const servelab::SafetensorsEntry& e = store.entry(name);
      (void)e.num_elements();
      try {
        const servelab::Tensor t = store.load(name);
        (void)t;
      } catch (const std::runtime_error&) {
        // A dtype that cannot be converted to fp32: expected, the other tensors still load.
      }
    }
  } catch (const std::runtime_error&) {
    // A malformed file, reported with the file (and tensor) named: expected.
  }
  return 0;
}
