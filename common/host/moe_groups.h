// host/moe_groups.h — a prefill chunk's (token, expert) pairs grouped by expert, so that each expert multiplies
// the rows that chose it as one GEMM (runtime/moe_layer.cuh).
//
// Usage:
//   ExpertGroups g;
//   group_by_expert(idx, k, E, g);   // idx [T k]: token t's j-th expert at idx[t k + j]
//   g.first[e] .. g.first[e + 1]     // expert e's gathered rows
//   g.token[r]                       // the token of gathered row r
//   g.row[t k + j]                   // the gathered row of token t's j-th choice
// Within an expert, rows are in token order. An expert index outside [0, E) is an error (never an out-of-bounds
// write): the routing kernel never makes one, so one would mean memory went wrong.
#pragma once

#include <vector>

#include "host/errors.h"

namespace monocu {

struct ExpertGroups {
    std::vector<int> first;  // [E + 1]
    std::vector<int> token;  // [T k]
    std::vector<int> row;    // [T k]
};

inline void group_by_expert(const std::vector<int>& idx, int k, int E, ExpertGroups& g) {
    const size_t n = idx.size();
    if (k < 1 || n % (size_t)k != 0) die("moe: %zu choices are not a whole number of tokens of %d", n, k);
    g.first.assign((size_t)E + 1, 0);
    for (int e : idx) {
        if (e < 0 || e >= E) die("moe: expert index %d outside [0, %d)", e, E);
        g.first[(size_t)e + 1]++;
    }
    for (int e = 0; e < E; e++) g.first[(size_t)e + 1] += g.first[e];
    std::vector<int> next(g.first.begin(), g.first.end() - 1);
    g.token.resize(n), g.row.resize(n);
    for (size_t p = 0; p < n; p++) {
        int r = next[idx[p]]++;
        g.row[p] = r, g.token[r] = (int)(p / k);
    }
}

}  // namespace monocu
