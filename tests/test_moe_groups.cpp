// host/moe_groups.h: a prefill chunk's expert choices grouped by expert, against the definition: every (token, j)
// pair lands in exactly one gathered row, inside its expert's range, rows of an expert in token order; and an
// expert index out of range is refused in one line.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>

#include "host/moe_groups.h"

using namespace monocu;

TEST_CASE("group_by_expert: each choice in one row, in its expert's range, token order within an expert") {
    std::mt19937 rng(5);
    for (int E : {1, 6, 32, 40, 256})
        for (int k : {1, 3, 4, 8}) {
            if (k > E) continue;
            for (int T : {1, 2, 17, 300}) {
                CAPTURE(E);
                CAPTURE(k);
                CAPTURE(T);
                std::vector<int> idx;
                std::vector<int> experts(E);
                for (int e = 0; e < E; e++) experts[e] = e;
                for (int t = 0; t < T; t++) {  // k distinct experts per token, as the routing gives them
                    std::shuffle(experts.begin(), experts.end(), rng);
                    idx.insert(idx.end(), experts.begin(), experts.begin() + k);
                }
                ExpertGroups g;
                group_by_expert(idx, k, E, g);
                REQUIRE(g.first.size() == (size_t)E + 1);
                CHECK(g.first[0] == 0);
                CHECK(g.first[E] == T * k);
                std::vector<int> seen(T * k, 0);
                for (size_t p = 0; p < idx.size(); p++) {
                    int r = g.row[p], e = idx[p];
                    REQUIRE(r >= 0);
                    REQUIRE(r < T * k);
                    seen[r]++;
                    CHECK(r >= g.first[e]);
                    CHECK(r < g.first[e + 1]);
                    CHECK(g.token[r] == (int)(p / k));
                }
                CHECK(std::count(seen.begin(), seen.end(), 1) == T * k);
                for (int e = 0; e < E; e++)
                    for (int r = g.first[e]; r + 1 < g.first[e + 1]; r++) CHECK(g.token[r] < g.token[r + 1]);
            }
        }
}

TEST_CASE("group_by_expert refuses an expert index out of range and a partial token") {
    ExpertGroups g;
    CHECK_THROWS_WITH_AS(group_by_expert({0, 5, 1}, 1, 5, g), doctest::Contains("expert index 5 outside [0, 5)"), UserError);
    CHECK_THROWS_WITH_AS(group_by_expert({0, -1}, 1, 5, g), doctest::Contains("expert index -1 outside [0, 5)"), UserError);
    CHECK_THROWS_WITH_AS(group_by_expert({0, 1, 2}, 2, 5, g), doctest::Contains("3 choices are not a whole number of tokens of 2"),
                         UserError);
}
