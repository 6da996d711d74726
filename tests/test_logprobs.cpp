// host/logprobs.h against a plain reference: the log-softmax in double and a full sort, on fresh random rows (ties
// included), for every top count the API allows.
#include <doctest/doctest.h>

#include <numeric>
#include <random>

#include "host/logprobs.h"

using namespace monocu;

TEST_CASE("logprobs: a token's log-probability and the top n equal a full log-softmax and sort") {
    std::mt19937 g(17);
    for (int trial = 0; trial < 40; trial++) {
        const int vocab = 1 + (int)(g() % 5000);
        std::vector<float> row(vocab);
        std::normal_distribution<float> nd(0.f, 1.f + (float)(trial % 7) * 3.f);
        for (float& x : row) x = trial % 5 == 0 ? std::round(nd(g)) : nd(g);  // rounded rows: many ties
        double mx = *std::max_element(row.begin(), row.end()), sum = 0;
        for (float x : row) sum += std::exp((double)x - mx);
        const double lse = mx + std::log(sum);
        std::vector<int> order(vocab);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });  // ties: lower id first
        const int token = (int)(g() % vocab);
        for (int n : {0, 1, 5, 20}) {
            CAPTURE(vocab);
            CAPTURE(n);
            TokenLogprobs lp = token_logprobs(row.data(), vocab, token, n);
            CHECK(lp.logprob == doctest::Approx(row[token] - lse).epsilon(1e-5));
            CHECK(lp.logprob <= 1e-6f);
            REQUIRE(lp.top.size() == (size_t)std::min(n, vocab));
            for (size_t k = 0; k < lp.top.size(); k++) {
                CHECK(lp.top[k].first == order[k]);
                CHECK(lp.top[k].second == doctest::Approx(row[order[k]] - lse).epsilon(1e-5));
            }
        }
    }
}
