// host/sampling_params.h — how the next token is chosen: the settings one sequence samples with. The sampler that
// applies them is ops/sampling.cuh; the flags, generation_config.json, a server request or a batch file's line set them.
#pragma once

#include <cstdint>

namespace monocu {

struct SamplingParams {
    float temperature = 0.f;  // 0: greedy
    int top_k = 0;            // 0: off
    float top_p = 1.f, min_p = 0.f, repetition_penalty = 1.f;
    float presence_penalty = 0.f, frequency_penalty = 0.f;  // OpenAI's, over the generated tokens
    uint64_t seed = 0;
    bool penalised() const { return repetition_penalty != 1.f || presence_penalty != 0.f || frequency_penalty != 0.f; }
};

// Whether two settings choose the same tokens from the same logits: the seed counts only where tokens are drawn.
inline bool same_choice(const SamplingParams& a, const SamplingParams& b) {
    return a.temperature == b.temperature && a.top_k == b.top_k && a.top_p == b.top_p && a.min_p == b.min_p &&
           a.repetition_penalty == b.repetition_penalty && a.presence_penalty == b.presence_penalty &&
           a.frequency_penalty == b.frequency_penalty && (a.temperature <= 0.f || a.seed == b.seed);
}

}  // namespace monocu
