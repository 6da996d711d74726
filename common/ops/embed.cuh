// ops/embed.cuh — token embedding gather: x[t] = embed_tokens[ids[t]] widened to float.
//
// Usage:
//   embedding(table, d_ids, x, T, dim, vocab, stream);   // table bf16 [vocab][dim], x float [T][dim]
// Ids come from the tokenizer (checked against the vocabulary on the host) or from the sampler
// (always in range); an id outside [0, vocab) still cannot read out of bounds: its row is NaN.
#pragma once

#include "gpu/memory.cuh"
#include "gpu/pdl.cuh"
#include "gpu/profile.cuh"

namespace monocu {

static __global__ void embedding_kernel(const bf16* __restrict__ table, const int* __restrict__ ids,
                                        float* __restrict__ x, int dim, int vocab) {
    pdl_launch_dependents();
    pdl_wait();  // ids may come from the sampler's previous step
    int t = blockIdx.x, id = ids[t];
    bool ok = id >= 0 && id < vocab;
    const bf16* row = table + (size_t)(ok ? id : 0) * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) x[(size_t)t * dim + i] = ok ? __bfloat162float(row[i]) : NAN;
}

inline void embedding(const bf16* table, const int* ids, float* x, int T, int dim, int vocab, cudaStream_t stream) {
    if (T <= 0) return;
    OpScope op("embedding", stream);
    launch(embedding_kernel, T, 256, 0, stream, table, ids, x, dim, vocab);
}

}  // namespace monocu
