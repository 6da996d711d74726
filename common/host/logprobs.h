// host/logprobs.h — a sampled token's log-probability and the most likely tokens', from one row of logits (the
// server's "logprobs"; the batched core copies the rows that want them back from the GPU).
//
// Usage:
//   TokenLogprobs lp = token_logprobs(row, vocab, token, 5);   // lp.logprob; lp.top: (token, logprob), best first
#pragma once

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace monocu {

// A sampled token's log-probability under the model (the log-softmax of its raw logits), and the most likely tokens'.
struct TokenLogprobs {
    float logprob = 0;
    std::vector<std::pair<int, float>> top;  // (token, log-probability), most likely first
};

// On the host, from one row of logits: one pass for the maximum, one for the sum, one keeping the best n.
inline TokenLogprobs token_logprobs(const float* row, int vocab, int token, int n) {
    float mx = -INFINITY;
    for (int v = 0; v < vocab; v++) mx = std::max(mx, row[v]);
    double sum = 0;
    for (int v = 0; v < vocab; v++) sum += std::exp((double)row[v] - mx);
    const float lse = mx + (float)std::log(sum);
    TokenLogprobs r;
    r.logprob = row[token] - lse;
    auto worse = [](const std::pair<int, float>& a, const std::pair<int, float>& b) { return a.second > b.second || (a.second == b.second && a.first < b.first); };
    std::vector<std::pair<int, float>> heap;  // the best n so far, the worst of them on top
    for (int v = 0; v < vocab && n > 0; v++) {
        if ((int)heap.size() == n && !worse({v, row[v]}, heap.front())) continue;
        heap.push_back({v, row[v]});
        std::push_heap(heap.begin(), heap.end(), worse);
        if ((int)heap.size() > n) std::pop_heap(heap.begin(), heap.end(), worse), heap.pop_back();
    }
    std::sort_heap(heap.begin(), heap.end(), worse);
    for (auto& [v, x] : heap) r.top.push_back({v, x - lse});
    return r;
}

}  // namespace monocu
