// Embedding lookup (kernels/elementwise.cu): residual[t] = float(table[tokens[t]]), the start of
// the fp32 residual stream. table: [vocab][hidden] bf16. Exact. Token ids outside [0, vocab)
// write zeros (the executor validates ids before).
#pragma once

#include <cstdint>

#include "kernels/device.h"

namespace servelab::kernels {

void embedding_lookup(const std::int32_t* tokens, std::int32_t num_tokens, const Bf16* table,
                      std::int32_t vocab, std::int32_t hidden, float* residual, Stream stream);

}  // namespace servelab::kernels
