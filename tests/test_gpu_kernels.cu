// Every GPU kernel of the kit against a plain CPU reference (double precision) on fresh random data.
// Outputs are poisoned with NaN bytes first, so an unwritten element fails the check.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <set>

#include "ops/attention.cuh"
#include "ops/kv_cache.cuh"
#include "host/quant.h"
#include "ops/embed.cuh"
#include "ops/flash_decode.cuh"
#include "ops/gemm.cuh"
#include "ops/gemv.cuh"
#include "gpu_util.cuh"
#include "ops/linear.cuh"
#include "ops/rmsnorm.cuh"
#include "ops/qk_prep.cuh"
#include "ops/rope.cuh"
#include "ops/moe.cuh"
#include "ops/sampling.cuh"
#include "ops/short_conv.cuh"
#include "ops/swiglu.cuh"

using namespace monocu;
using namespace monocu_test;

// ---- elementwise and norms ----

TEST_CASE("embedding gathers rows and widens them to float") {
    Rng r(1);
    int vocab = 300, dim = 136, T = 9;
    auto table = random_bf16_values((size_t)vocab * dim, r);
    std::vector<int> ids(T);
    for (int& i : ids) i = r.uniform_int(0, vocab - 1);
    DeviceVec<bf16> d_table(to_bf16(table));
    DeviceVec<int> d_ids(ids);
    DeviceVec<float> d_x((size_t)T * dim);
    embedding(d_table.p, d_ids.p, d_x.p, T, dim, vocab, 0);
    std::vector<double> ref((size_t)T * dim);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < dim; i++) ref[(size_t)t * dim + i] = table[(size_t)ids[t] * dim + i];
    auto e = compare(d_x.download(), ref);
    CHECK(e.non_finite == 0);
    CHECK(e.max_abs == 0.0);
}

static std::vector<double> rmsnorm_ref(const std::vector<float>& x, const std::vector<float>& w, int rows, int dim, double eps) {
    std::vector<double> out(x.size());
    for (int t = 0; t < rows; t++) {
        double ss = 0;
        for (int i = 0; i < dim; i++) ss += (double)x[(size_t)t * dim + i] * x[(size_t)t * dim + i];
        double inv = 1.0 / std::sqrt(ss / dim + eps);
        for (int i = 0; i < dim; i++) out[(size_t)t * dim + i] = x[(size_t)t * dim + i] * inv * w[i];
    }
    return out;
}

TEST_CASE("rmsnorm matches the reference on odd sizes") {
    Rng r(2);
    for (int dim : {8, 96, 1000, 2560}) {
        CAPTURE(dim);
        int T = 7;
        auto x = random_floats((size_t)T * dim, r, 3.f);
        auto w = random_bf16_values(dim, r);
        DeviceVec<float> d_x(x);
        DeviceVec<bf16> d_w(to_bf16(w)), d_out((size_t)T * dim);
        rmsnorm(d_x.p, d_w.p, d_out.p, T, dim, 1e-6f, 0);
        CHECK_CLOSE(compare(from_bf16(d_out.download()), rmsnorm_ref(x, w, T, dim, 1e-6)), 5e-3);
    }
}

TEST_CASE("swiglu of interleaved gate/up pairs") {
    Rng r(3);
    int T = 5, ffn = 1000;
    auto gu = random_floats((size_t)T * ffn * 2, r, 2.f);
    DeviceVec<float> d_gu(gu);
    DeviceVec<bf16> d_h((size_t)T * ffn);
    swiglu_interleaved(d_gu.p, d_h.p, T, ffn, 0);
    std::vector<double> ref((size_t)T * ffn);
    for (size_t i = 0; i < ref.size(); i++) {
        double g = gu[2 * i], u = gu[2 * i + 1];
        ref[i] = g / (1 + std::exp(-g)) * u;
    }
    CHECK_CLOSE(compare(from_bf16(d_h.download()), ref), 5e-3);
    // GPT-OSS's clamped form: gate clamped above, up both sides, then gate sigmoid(alpha gate) (up + 1).
    auto big = random_floats((size_t)T * ffn * 2, r, 8.f);
    d_gu.upload(big);
    d_h.poison();
    swiglu_interleaved(d_gu.p, d_h.p, T, ffn, 0, GluAct{1.702f, 7.f});
    int clamped = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        double g = big[2 * i], u = big[2 * i + 1];
        clamped += g > 7 || std::fabs(u) > 7;
        g = std::min(g, 7.0), u = std::max(-7.0, std::min(u, 7.0));
        ref[i] = g / (1 + std::exp(-1.702 * g)) * (u + 1);
    }
    CHECK(clamped > (int)ref.size() / 4);
    CHECK_CLOSE(compare(from_bf16(d_h.download()), ref), 5e-3);
}

// LFM2's gated short convolution against a plain reference: a sequence run as one pass, as passes of uneven
// sizes (the state carries across), and token by token (decode); with and without bias; L = 1..4; a pass
// restarting at position 0 ignores a stale state.
static std::vector<double> short_conv_ref(const std::vector<float>& bcx, int T, const std::vector<float>& w, const std::vector<float>* bias,
                                          int dim, int L) {
    std::vector<double> y((size_t)T * dim);
    for (int t = 0; t < T; t++)
        for (int d = 0; d < dim; d++) {
            double acc = bias ? (*bias)[d] : 0.0;
            for (int k = 0; k < L; k++) {
                int u = t - (L - 1) + k;
                if (u >= 0) acc += (double)w[(size_t)d * L + k] * bcx[(size_t)u * 3 * dim + d] * bcx[(size_t)u * 3 * dim + 2 * dim + d];
            }
            y[(size_t)t * dim + d] = bcx[(size_t)t * 3 * dim + dim + d] * acc;
        }
    return y;
}

TEST_CASE("short_conv: whole, in uneven passes and token by token, as the reference; the state carries, position 0 resets it") {
    Rng r(40);
    for (int L : {1, 2, 3, 4})
        for (bool with_bias : {false, true}) {
            CAPTURE(L);
            CAPTURE(with_bias);
            const int dim = 200, T = 75;  // dim not a multiple of the block, T not of the token run
            auto bcx = random_floats((size_t)T * 3 * dim, r, 1.5f);
            auto w = random_bf16_values((size_t)dim * L, r, 0.5f), bias = random_bf16_values(dim, r, 0.5f);
            std::vector<double> ref = short_conv_ref(bcx, T, w, with_bias ? &bias : nullptr, dim, L);
            std::vector<int> pos(T);
            for (int t = 0; t < T; t++) pos[t] = t;
            DeviceVec<float> d_bcx(bcx), d_state((size_t)std::max(L - 1, 1) * dim);
            DeviceVec<bf16> d_w(to_bf16(w)), d_bias(to_bf16(bias)), d_y((size_t)T * dim);
            DeviceVec<int> d_pos(pos);
            const bf16* b = with_bias ? d_bias.p : nullptr;
            for (std::vector<int> passes : {std::vector<int>{T}, std::vector<int>{1, 2, 33, 39}, std::vector<int>(T, 1)}) {
                CAPTURE(passes.size());
                d_y.poison();
                d_state.poison();  // position 0 must not read it
                int at = 0;
                for (int n : passes) {
                    short_conv(d_bcx.p + (size_t)at * 3 * dim, n, d_pos.p + at, d_w.p, b, d_state.p, d_y.p + (size_t)at * dim, dim, L, 0);
                    at += n;
                }
                CHECK_CLOSE(compare(from_bf16(d_y.download()), ref), 5e-3);
            }
        }
}

// The batched core's decode rows (short_conv_rows): S sequences, each its own state slot (in a shuffled order, one
// slot unused), stepped token by token all in one launch per step: each sequence's outputs are the reference's.
TEST_CASE("short_conv_rows: many sequences' decode tokens in one launch, each through its own state slot") {
    Rng r(42);
    for (int L : {1, 3, 4}) {
        CAPTURE(L);
        const int dim = 200, S = 5, T = 9, slots = S + 1;
        const std::vector<int> slot_of = {3, 0, 5, 1, 4};  // slot 2 holds nobody
        std::vector<std::vector<float>> bcx(S);
        auto w = random_bf16_values((size_t)dim * L, r, 0.5f), bias = random_bf16_values(dim, r, 0.5f);
        for (auto& x : bcx) x = random_floats((size_t)T * 3 * dim, r, 1.5f);
        const size_t stride = (size_t)std::max(L - 1, 1) * dim;
        DeviceVec<float> d_states(slots * stride), d_rows((size_t)S * 3 * dim);
        DeviceVec<bf16> d_w(to_bf16(w)), d_bias(to_bf16(bias)), d_y((size_t)S * dim);
        DeviceVec<int> d_slots(slot_of), d_pos((size_t)S);
        d_states.poison();  // position 0 must not read it
        std::vector<std::vector<float>> got(S, std::vector<float>((size_t)T * dim));
        for (int t = 0; t < T; t++) {
            std::vector<float> rows;
            for (int z = 0; z < S; z++) rows.insert(rows.end(), bcx[z].begin() + (size_t)t * 3 * dim, bcx[z].begin() + (size_t)(t + 1) * 3 * dim);
            CUDA_CHECK(cudaMemcpy(d_rows.p, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice));
            std::vector<int> pos(S, t);
            CUDA_CHECK(cudaMemcpy(d_pos.p, pos.data(), S * 4, cudaMemcpyHostToDevice));
            d_y.poison();
            short_conv_rows(d_rows.p, S, d_pos.p, d_slots.p, d_w.p, d_bias.p, d_states.p, stride, d_y.p, dim, L, 0);
            std::vector<float> y = from_bf16(d_y.download());
            for (int z = 0; z < S; z++) std::copy(y.begin() + (size_t)z * dim, y.begin() + (size_t)(z + 1) * dim, got[z].begin() + (size_t)t * dim);
        }
        for (int z = 0; z < S; z++) {
            CAPTURE(z);
            CHECK_CLOSE(compare(got[z], short_conv_ref(bcx[z], T, w, &bias, dim, L)), 5e-3);
        }
    }
}

// Mixture-of-experts routing against a plain reference: sigmoid with a choice bias (LFM2) and softmax (Qwen3-MoE,
// Mixtral), with and without renormalisation, k not dividing E, E past one warp's 32, and ties broken toward the
// lower expert index; then the weighted sum of the experts' outputs into the residual.
TEST_CASE("moe_route and moe_combine: scores, choice bias, top-k with ties to the lower index, weights, the sum") {
    Rng r(41);
    for (MoeScore score : {MoeScore::Sigmoid, MoeScore::Softmax})
        for (int E : {6, 32, 40, 256})
            for (int k : {1, 3, 4})
                for (bool norm : {false, true}) {
                    if (k > E) continue;
                    CAPTURE(E);
                    CAPTURE(k);
                    CAPTURE(norm);
                    CAPTURE(score == MoeScore::Sigmoid);
                    const int T = 9;
                    std::vector<float> logits = random_floats((size_t)T * E, r, 2.f), bias = random_floats(E, r, 0.3f);
                    for (int t = 0; t < T; t += 2)  // ties: a token whose scores repeat in pairs
                        for (int e = 1; e < E; e += 2) logits[(size_t)t * E + e] = logits[(size_t)t * E + e - 1];
                    const bool with_bias = score == MoeScore::Sigmoid;
                    MoeRouter rt{score, k, norm, norm ? 1e-6f : 0.f, 1.5f};
                    DeviceVec<float> d_logits(logits), d_bias(bias), d_w((size_t)T * k);
                    DeviceVec<int> d_idx((size_t)T * k);
                    moe_route(rt, d_logits.p, with_bias ? d_bias.p : nullptr, T, E, d_idx.p, d_w.p, 0);
                    std::vector<int> idx = d_idx.download();
                    std::vector<float> w = d_w.download();
                    for (int t = 0; t < T; t++) {
                        std::vector<double> s(E), c(E);
                        double mx = -1e300, sum = 0;
                        for (int e = 0; e < E; e++) mx = std::max(mx, (double)logits[(size_t)t * E + e]);
                        for (int e = 0; e < E; e++) {
                            double l = logits[(size_t)t * E + e];
                            s[e] = score == MoeScore::Sigmoid ? 1 / (1 + std::exp(-l)) : std::exp(l - mx);
                            sum += s[e];
                        }
                        for (int e = 0; e < E; e++) {
                            if (score == MoeScore::Softmax) s[e] /= sum;
                            c[e] = s[e] + (with_bias ? bias[e] : 0.0);
                        }
                        std::vector<int> order(E);
                        for (int e = 0; e < E; e++) order[e] = e;
                        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return c[a] > c[b]; });
                        double total = 0;
                        for (int j = 0; j < k; j++) total += s[order[j]];
                        for (int j = 0; j < k; j++) {
                            CAPTURE(t);
                            CAPTURE(j);
                            CHECK(idx[(size_t)t * k + j] == order[j]);
                            double want = (norm ? s[order[j]] / (total + 1e-6) : s[order[j]]) * 1.5;
                            CHECK(std::fabs(w[(size_t)t * k + j] - want) <= 1e-5 * std::max(1.0, std::fabs(want)));
                        }
                    }
                }
    {  // forced choices (--force-routing) for positions below n: those experts, weighted by our own scores
        const int T = 6, E = 40, k = 3, n = 4;
        std::vector<float> logits = random_floats((size_t)T * E, r, 2.f);
        std::vector<int> forced = {39, 0, 17, 5, 6, 7, 33, 32, 1, 2, 20, 38}, pos = {3, 0, 1, 2, 4, 5};
        DeviceVec<float> d_logits(logits), d_w((size_t)T * k);
        DeviceVec<int> d_idx((size_t)T * k), d_forced(forced), d_pos(pos);
        MoeRouter rt{MoeScore::Sigmoid, k, true, 1e-6f, 1.f};
        moe_route(rt, d_logits.p, nullptr, T, E, d_idx.p, d_w.p, 0, MoeForced{d_forced.p, n, d_pos.p});
        std::vector<int> idx = d_idx.download();
        std::vector<float> w = d_w.download();
        for (int t = 0; t < T; t++) {
            CAPTURE(t);
            std::vector<int> want(k);
            std::vector<double> sc(E);
            for (int e = 0; e < E; e++) sc[e] = 1 / (1 + std::exp(-(double)logits[(size_t)t * E + e]));
            if (pos[t] < n) {
                for (int j = 0; j < k; j++) want[j] = forced[(size_t)pos[t] * k + j];
            } else {
                std::vector<int> order(E);
                for (int e = 0; e < E; e++) order[e] = e;
                std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return sc[a] > sc[b]; });
                want.assign(order.begin(), order.begin() + k);
            }
            double total = 0;
            for (int e : want) total += sc[e];
            for (int j = 0; j < k; j++) {
                CHECK(idx[(size_t)t * k + j] == want[j]);
                CHECK(std::fabs(w[(size_t)t * k + j] - sc[want[j]] / (total + 1e-6)) < 1e-5);
            }
        }
    }
    const int T = 5, k = 3, dim = 300;
    auto y = random_floats((size_t)T * k * dim, r), x = random_floats((size_t)T * dim, r), w = random_floats((size_t)T * k, r);
    std::vector<int> rows(T * k);
    for (int i = 0; i < T * k; i++) rows[i] = (i * 7) % (T * k);  // a permutation (7 and 15 are coprime)
    for (bool mapped : {false, true}) {
        CAPTURE(mapped);
        DeviceVec<float> d_y(y), d_x(x), d_w(w);
        DeviceVec<int> d_rows(rows);
        moe_combine(d_y.p, d_w.p, mapped ? d_rows.p : nullptr, T, k, dim, d_x.p, 0);
        std::vector<double> ref((size_t)T * dim);
        for (int t = 0; t < T; t++)
            for (int d = 0; d < dim; d++) {
                double acc = x[(size_t)t * dim + d];
                for (int j = 0; j < k; j++) {
                    size_t row = mapped ? rows[t * k + j] : t * k + j;
                    acc += (double)w[(size_t)t * k + j] * y[row * dim + d];
                }
                ref[(size_t)t * dim + d] = acc;
            }
        CHECK_CLOSE(compare(d_x.download(), ref), 1e-5);
    }
}

// expert_bias_rows (a prefill chunk's gathered rows, each given its expert's bias before the experts' GEMMs add onto
// them): every row its own expert's bias, an expert without one (null) giving zeros; output poisoned first.
TEST_CASE("expert_bias_rows: each gathered row takes its expert's bias") {
    Rng r(47);
    const int E = 5, rows = 37, n = 300;
    std::vector<std::vector<float>> bias(E);
    std::vector<std::unique_ptr<DeviceVec<bf16>>> d_bias;
    std::vector<const void*> table;
    for (int e = 0; e < E; e++) {
        bias[e] = from_bf16(to_bf16(random_floats(n, r)));
        d_bias.push_back(std::make_unique<DeviceVec<bf16>>(to_bf16(bias[e])));
        table.push_back(e == 2 ? nullptr : d_bias.back()->p);
    }
    std::vector<int> expert(rows);
    for (int i = 0; i < rows; i++) expert[i] = (int)(r.g() % E);
    DeviceVec<const void*> d_table(table);
    DeviceVec<int> d_expert(expert);
    DeviceVec<float> d_y((size_t)rows * n);
    d_y.poison();
    expert_bias_rows(d_y.p, d_table.p, d_expert.p, rows, n, 0);
    std::vector<float> y = d_y.download();
    int wrong = 0;
    for (int i = 0; i < rows; i++)
        for (int c = 0; c < n; c++) wrong += y[(size_t)i * n + c] != (expert[i] == 2 ? 0.f : bias[expert[i]][c]);
    CHECK(wrong == 0);
}

// ---- rope ----

// The fused decode router (one launch: logits of rmsnorm(x), then the routing by the last block) against the two-launch
// path it replaces: the GEMV's logits within fp32 summation order, the routing's choices and weights on those logits;
// repeated steps (the block counter resets itself), E over many blocks, a router bias, a choice bias, forced choices.
TEST_CASE("moe_router_decode: the logits of the fused RMSNorm GEMV and moe_route's choices on them, step after step") {
    Rng r(43);
    GpuMemory mem;
    const int dim = 2880;
    for (int E : {7, 32, 128, 256})
        for (bool gpt_oss : {false, true}) {
            CAPTURE(E);
            CAPTURE(gpt_oss);
            const int k = std::min(4, E);
            MoeRouter rt = gpt_oss ? MoeRouter{MoeScore::Softmax, k, true, 0.f, 1.f} : MoeRouter{MoeScore::Sigmoid, k, true, 1e-6f, 2.f};
            std::vector<float> w = random_bf16_values((size_t)E * dim, r, 0.05f), gb = random_bf16_values(E, r, 0.5f), cb = random_floats(E, r, 0.1f);
            DeviceVec<bf16> d_w(to_bf16(w)), d_gb(to_bf16(gb)), d_nw(to_bf16(random_bf16_values(dim, r)));
            DeviceVec<float> d_cb(cb), d_logits(E), d_ref_logits(E), d_wt(k), d_ref_wt(k);
            DeviceVec<int> d_idx(k), d_ref_idx(k), d_pos(std::vector<int>{0});
            DeviceVec<unsigned> d_counter(std::vector<unsigned>{0u});
            Linear gate;
            gate.N = E, gate.K = dim, gate.w = d_w.p, gate.bias = gpt_oss ? d_gb.p : nullptr;
            const float* choice = gpt_oss ? nullptr : d_cb.p;
            for (int step = 0; step < 3; step++) {
                CAPTURE(step);
                DeviceVec<float> d_x(random_floats(dim, r, 2.f));
                d_logits.poison(), d_idx.poison(), d_wt.poison();
                MoeForced forced;
                std::vector<int> fidx = {E - 1, 0, E / 2, 1};
                fidx.resize(k);
                DeviceVec<int> d_fidx(fidx);
                if (step == 2) forced.idx = d_fidx.p, forced.n = 1, forced.pos = d_pos.p;
                DeviceVec<bf16> d_xn(dim), d_ref_xn(dim);
                d_xn.poison();
                moe_router_decode(rt, gate, d_x.p, d_nw.p, 1e-5f, choice, E, forced, d_logits.p, d_idx.p, d_wt.p, d_counter.p, 0, d_xn.p);
                rmsnorm(d_x.p, d_nw.p, d_ref_xn.p, 1, dim, 1e-5f, 0);  // the normalised x it hands the experts: the prefill's
                auto xn = from_bf16(d_xn.download()), ref_xn = from_bf16(d_ref_xn.download());
                size_t far = 0;
                for (int i = 0; i < dim; i++) far += !(std::fabs(xn[i] - ref_xn[i]) <= std::fabs(ref_xn[i]) * (1.f / 128));  // 1 bf16 ulp
                CHECK(far == 0);
                gemv_rmsnorm(gate, d_x.p, d_nw.p, 1e-5f, d_ref_logits.p, 0);
                auto ours = d_logits.download(), ref = d_ref_logits.download();
                for (int e = 0; e < E; e++) CHECK(std::fabs(ours[e] - ref[e]) <= 1e-4f * std::max(1.f, std::fabs(ref[e])));
                moe_route(rt, d_logits.p, choice, 1, E, d_ref_idx.p, d_ref_wt.p, 0, forced);  // on our logits: the same choice
                CHECK(d_idx.download() == d_ref_idx.download());
                CHECK(d_wt.download() == d_ref_wt.download());
                CHECK(d_counter.download()[0] == 0u);
                if (step == 2) CHECK(d_idx.download() == fidx);
            }
        }
}

TEST_CASE("rope table: fp32 angles as transformers computes them, cos/sin accurate") {
    RopeConfig rc;
    rc.theta = 1e6;
    auto t = rope_cos_sin_host(rc, 128, 40960);
    for (int pos : {0, 1, 1000, 40959})
        for (int i : {0, 1, 31, 63}) {
            double inv = 1.0 / std::pow(1e6, 2.0 * i / 128);
            double a = pos * inv;
            // fp32 inv_freq and product: allow their rounding (relative 1e-6 of the angle).
            double tol = 4e-7 * std::fabs(a) + 1e-6;
            CHECK(std::fabs(t[(size_t)pos * 64 + i].cos - std::cos(a)) < tol);
            CHECK(std::fabs(t[(size_t)pos * 64 + i].sin - std::sin(a)) < tol);
        }
    rc.type = "longrope";
    CHECK_THROWS_WITH_AS(rope_inv_freq(rc, 128), doctest::Contains("rope_type 'longrope' is not supported"), UserError);
    rc.type = "yarn";  // supported (host/rope.h, tests/test_rope.cpp), but not without its original context
    CHECK_THROWS_WITH_AS(rope_inv_freq(rc, 128), doctest::Contains("needs original_max_position_embeddings"), UserError);
}

// The cache row as floats: bf16 as is, FP8 times its scale.
static float cache_value(const std::vector<uint8_t>& raw, const std::vector<float>& scales, KvType t, size_t row, int hd, int i) {
    if (t != KvType::FP8) {
        uint16_t b;
        std::memcpy(&b, &raw[(row * hd + i) * 2], 2);
        return t == KvType::BF16 ? bf16_bits_to_float(b) : f16_bits_to_float(b);
    }
    return e4m3_to_float(raw[row * hd + i]) * scales[row];
}

// One head of x normalised over head_dim with weight w (Qwen3's q_norm / k_norm), then rotate-half RoPE at
// the (cos, sin) row of position pos: the CPU reference of qk_norm_rope_cache and of the fused decode.
static std::vector<double> head_norm_rope_ref(const float* x, const std::vector<float>& w, const std::vector<RopeCosSin>& cs, int pos,
                                              int hd, double eps) {
    double ss = 0;
    for (int i = 0; i < hd; i++) ss += (double)x[i] * x[i];
    double inv = 1 / std::sqrt(ss / hd + eps);
    int half = hd / 2;
    std::vector<double> out(hd);
    for (int i = 0; i < hd; i++) {
        int j = i < half ? i : i - half;
        double a = x[j] * inv * w[j], b = x[j + half] * inv * w[j + half];
        double c = cs[(size_t)pos * half + j].cos, sn = cs[(size_t)pos * half + j].sin;
        out[i] = i < half ? a * c - b * sn : b * c + a * sn;
    }
    return out;
}

TEST_CASE("qk_norm_rope_cache: per-head RMSNorm, rotate-half RoPE, cache rows at pos..pos+T-1, bf16 and FP8 cache") {
    Rng r(4);
    for (KvType kt : {KvType::BF16, KvType::FP8})
        for (int hd : {64, 128})
        for (std::pair<int, int> heads : {std::pair<int, int>{4, 2}, {7, 1}}) {  // (7, 1): q, k and v heads share warps
            CAPTURE(hd);
            CAPTURE((int)kt);
            CAPTURE(heads.first);
            int T = 5, pos0 = 11, nh = heads.first, nkv = heads.second, ctx = 32, row = (nh + 2 * nkv) * hd;
            float eps = 1e-6f;
            RopeConfig rc;
            rc.theta = 10000;
            GpuMemory mem;
            RopeTable rope = make_rope_table(rc, hd, ctx, mem, 0);
            KvCache kv = kv_cache_create(kt, 1, nkv, ctx, hd, mem);
            auto cs = rope_cos_sin_host(rc, hd, ctx);
            auto qkv = random_floats((size_t)T * row, r, 2.f);
            auto qn = random_bf16_values(hd, r), kn = random_bf16_values(hd, r);
            DeviceVec<float> d_qkv(qkv);
            DeviceVec<bf16> d_qn(to_bf16(qn)), d_kn(to_bf16(kn));
            DeviceVec<__half> d_q((size_t)T * nh * hd);
            DeviceVec<int> d_pos(std::vector<int>{pos0});
            qk_norm_rope_cache(d_qkv.p, T, d_pos.p, d_qn.p, d_kn.p, rope, d_q.p, kt, kv.layer(0), nh, nkv, hd, ctx, eps, 0);
            CUDA_CHECK(cudaDeviceSynchronize());
            size_t cache_bytes = kv.layer_elems() * kv.elem_bytes();
            std::vector<uint8_t> k(cache_bytes), v(cache_bytes);
            std::vector<float> ks((size_t)nkv * ctx, 1.f), vs((size_t)nkv * ctx, 1.f);
            CUDA_CHECK(cudaMemcpy(k.data(), kv.k, cache_bytes, cudaMemcpyDeviceToHost));
            CUDA_CHECK(cudaMemcpy(v.data(), kv.v, cache_bytes, cudaMemcpyDeviceToHost));
            if (kt == KvType::FP8) {
                CUDA_CHECK(cudaMemcpy(ks.data(), kv.k_scale, ks.size() * 4, cudaMemcpyDeviceToHost));
                CUDA_CHECK(cudaMemcpy(vs.data(), kv.v_scale, vs.size() * 4, cudaMemcpyDeviceToHost));
            }
            auto q = from_half(d_q.download());
            std::vector<double> ref_q, ref_k, ref_v;
            std::vector<float> got_q, got_k, got_v;
            for (int t = 0; t < T; t++)
                for (int h = 0; h < nh + 2 * nkv; h++) {
                    const float* x = &qkv[(size_t)t * row + (size_t)h * hd];
                    if (h >= nh + nkv) {
                        for (int i = 0; i < hd; i++) {
                            ref_v.push_back(x[i]);
                            got_v.push_back(cache_value(v, vs, kt, (size_t)(h - nh - nkv) * ctx + pos0 + t, hd, i));
                        }
                        continue;
                    }
                    auto rotated = head_norm_rope_ref(x, h < nh ? qn : kn, cs, pos0 + t, hd, eps);
                    for (int i = 0; i < hd; i++) {
                        double val = rotated[i];
                        if (h < nh) {
                            ref_q.push_back(val);
                            got_q.push_back(q[((size_t)t * nh + h) * hd + i]);
                        } else {
                            ref_k.push_back(val);
                            got_k.push_back(cache_value(k, ks, kt, (size_t)(h - nh) * ctx + pos0 + t, hd, i));
                        }
                    }
                }
            double cache_bound = kt == KvType::BF16 ? 5e-3 : 4e-2;  // e4m3: 3 mantissa bits
            CHECK_CLOSE(compare(got_q, ref_q), 6e-4);  // fp16 (~3e-4); bf16 queries would be ~1.1e-3
            CHECK_CLOSE(compare(got_k, ref_k), cache_bound);
            CHECK_CLOSE(compare(got_v, ref_v), cache_bound);
            // Rows outside pos0..pos0+T-1 keep their poison (0xFF bytes): nothing else was written.
            size_t untouched = 0;
            for (int h = 0; h < nkv; h++)
                for (int p = 0; p < ctx; p++)
                    if (p < pos0 || p >= pos0 + T) untouched += k[((size_t)h * ctx + p) * hd * kv.elem_bytes()] == 0xFF ? 1 : 0;
            CHECK(untouched == (size_t)nkv * (ctx - T));
        }
}

TEST_CASE("qk_norm_rope_cache with an fp16 copy beside the cache: the chunk's keys and values in fp16, the cache as without it") {
    Rng r(14);
    for (KvType kt : {KvType::BF16, KvType::FP8})
        for (int hd : {64, 128}) {
            CAPTURE((int)kt);
            CAPTURE(hd);
            int T = 5, pos0 = 0, nh = 8, nkv = 2, ctx = 16, fresh_rows = 8, row = (nh + 2 * nkv) * hd;
            float eps = 1e-6f;
            RopeConfig rc;
            rc.theta = 10000;
            GpuMemory mem;
            RopeTable rope = make_rope_table(rc, hd, ctx, mem, 0);
            auto cs = rope_cos_sin_host(rc, hd, ctx);
            KvCache plain = kv_cache_create(kt, 1, nkv, ctx, hd, mem), with_copy = kv_cache_create(kt, 1, nkv, ctx, hd, mem);
            auto qkv = random_floats((size_t)T * row, r, 2.f);
            auto kn = random_bf16_values(hd, r);
            DeviceVec<float> d_qkv(qkv);
            DeviceVec<bf16> d_qn(to_bf16(random_bf16_values(hd, r))), d_kn(to_bf16(kn));
            DeviceVec<__half> d_q((size_t)T * nh * hd), fresh_k((size_t)nkv * fresh_rows * hd), fresh_v((size_t)nkv * fresh_rows * hd);
            DeviceVec<int> d_pos(std::vector<int>{pos0});
            qk_norm_rope_cache(d_qkv.p, T, d_pos.p, d_qn.p, d_kn.p, rope, d_q.p, kt, plain.layer(0), nh, nkv, hd, ctx, eps, 0);
            KvLayer fresh;
            fresh.k = fresh_k.p, fresh.v = fresh_v.p;
            qk_norm_rope_cache(d_qkv.p, T, d_pos.p, d_qn.p, d_kn.p, rope, d_q.p, kt, with_copy.layer(0), nh, nkv, hd, ctx, eps, 0, fresh,
                               fresh_rows);
            // The copy: rows 0..T-1 hold rope(k_norm(k)) and v to fp16 precision; the rows after keep their poison.
            auto raw_k = fresh_k.download();
            auto got_k = from_half(raw_k), got_v = from_half(fresh_v.download());
            std::vector<double> ref_k, ref_v;
            std::vector<float> copy_k, copy_v;
            size_t poisoned = 0;
            for (int h = 0; h < nkv; h++)
                for (int t = 0; t < fresh_rows; t++) {
                    size_t at = ((size_t)h * fresh_rows + t) * hd;
                    if (t >= T) {
                        poisoned += static_cast<__half_raw>(raw_k[at]).x == 0xFFFF;
                        continue;
                    }
                    const float* x = &qkv[(size_t)t * row + (size_t)(nh + h) * hd];
                    auto rotated = head_norm_rope_ref(x, kn, cs, pos0 + t, hd, eps);
                    for (int i = 0; i < hd; i++) {
                        ref_k.push_back(rotated[i]), copy_k.push_back(got_k[at + i]);
                        ref_v.push_back(qkv[(size_t)t * row + (size_t)(nh + nkv + h) * hd + i]), copy_v.push_back(got_v[at + i]);
                    }
                }
            CHECK_CLOSE(compare(copy_k, ref_k), 6e-4);  // fp16; a bf16 copy would be ~1.1e-3
            CHECK_CLOSE(compare(copy_v, ref_v), 6e-4);
            CHECK(poisoned == (size_t)nkv * (fresh_rows - T));
            // The cache is written exactly as without the copy.
            size_t bytes = plain.layer_elems() * plain.elem_bytes();
            std::vector<uint8_t> a(bytes), b(bytes);
            for (bool values : {false, true}) {
                CUDA_CHECK(cudaMemcpy(a.data(), values ? plain.v : plain.k, bytes, cudaMemcpyDeviceToHost));
                CUDA_CHECK(cudaMemcpy(b.data(), values ? with_copy.v : with_copy.k, bytes, cudaMemcpyDeviceToHost));
                CHECK(a == b);
            }
            CHECK_THROWS_AS(qk_norm_rope_cache(d_qkv.p, T, d_pos.p, d_qn.p, d_kn.p, rope, d_q.p, kt, with_copy.layer(0), nh, nkv, hd, ctx,
                                               eps, 0, fresh, T - 1),
                            UserError);
            // fp16 names the copy only: no cache of it, and neither the cache writer nor decode takes it.
            CHECK_THROWS_AS(kv_cache_create(KvType::F16, 1, nkv, ctx, hd, mem), UserError);
            CHECK_THROWS_AS(qk_norm_rope_cache(d_qkv.p, T, d_pos.p, d_qn.p, d_kn.p, rope, d_q.p, KvType::F16, fresh, nh, nkv, hd, ctx, eps, 0),
                            UserError);
        }
}

TEST_CASE("qk_norm_rope_cache: values past fp16's range saturate in the fp16 copy (no inf), and the bf16 cache keeps them") {
    int T = 3, nh = 2, nkv = 1, hd = 64, ctx = 8, fresh_rows = 4, row = (nh + 2 * nkv) * hd;
    RopeConfig rc;
    rc.theta = 10000;
    GpuMemory mem;
    RopeTable rope = make_rope_table(rc, hd, ctx, mem, 0);
    KvCache kv = kv_cache_create(KvType::BF16, 1, nkv, ctx, hd, mem);
    Rng r(15);
    auto qkv = random_floats((size_t)T * row, r);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < hd; i++) qkv[(size_t)t * row + (size_t)(nh + nkv) * hd + i] = (i % 2 ? -1.f : 1.f) * 1e5f * (1 + t);
    qkv[(size_t)(nh + nkv) * hd + 5] = NAN;  // a NaN stays NaN: saturation must not hide a broken model
    DeviceVec<float> d_qkv(qkv);
    DeviceVec<bf16> d_qn(to_bf16(random_bf16_values(hd, r))), d_kn(to_bf16(random_bf16_values(hd, r)));
    DeviceVec<__half> d_q((size_t)T * nh * hd), fresh_k((size_t)nkv * fresh_rows * hd), fresh_v((size_t)nkv * fresh_rows * hd);
    DeviceVec<int> d_pos(std::vector<int>{0});
    KvLayer fresh;
    fresh.k = fresh_k.p, fresh.v = fresh_v.p;
    qk_norm_rope_cache(d_qkv.p, T, d_pos.p, d_qn.p, d_kn.p, rope, d_q.p, KvType::BF16, kv.layer(0), nh, nkv, hd, ctx, 1e-6f, 0, fresh,
                       fresh_rows);
    auto copy = from_half(fresh_v.download());
    std::vector<bf16> cache((size_t)nkv * ctx * hd);
    CUDA_CHECK(cudaMemcpy(cache.data(), kv.v, cache.size() * 2, cudaMemcpyDeviceToHost));
    auto cached = from_bf16(cache);
    size_t saturated = 0, kept = 0;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < hd; i++) {
            if (t == 0 && i == 5) continue;
            saturated += copy[(size_t)t * hd + i] == (i % 2 ? -65504.f : 65504.f);
            kept += std::fabs(cached[(size_t)t * hd + i] - (i % 2 ? -1e5f : 1e5f) * (1 + t)) <= 1e3f * (1 + t);
        }
    CHECK(saturated == (size_t)T * hd - 1);
    CHECK(kept == (size_t)T * hd - 1);
    CHECK(std::isnan(copy[5]));
    CHECK(std::isnan(cached[5]));
}

// ---- matmuls ----

static std::vector<double> matmul_ref(const std::vector<float>& W, const std::vector<float>& x, int T, int N, int K) {
    std::vector<double> y((size_t)T * N);
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)W[(size_t)n * K + k] * x[(size_t)t * K + k];
            y[(size_t)t * N + n] = s;
        }
    return y;
}

TEST_CASE("gemv: plain, residual add, fused rmsnorm, fused rmsnorm + swiglu, odd shapes, K split over warps and clusters") {
    Rng r(5);
    // {0, 0}: the launch rule; a layout that does not fit the shape falls back to {1, 1}
    for (GemvLayout lay : {GemvLayout{0, 0, 0}, GemvLayout{1, 1}, GemvLayout{2, 1}, GemvLayout{4, 1}, GemvLayout{8, 1}, GemvLayout{1, 2},
                           GemvLayout{1, 4}, GemvLayout{1, 8}})
    for (auto shape : std::vector<std::pair<int, int>>{{1, 8}, {3, 64}, {17, 1000}, {256, 2560}, {515, 136}, {4097, 4104}, {300, 8192}}) {
        int N = shape.first, K = shape.second;
        gemv_forced_layout() = lay;
        CAPTURE(lay.S);
        CAPTURE(lay.KS);
        CAPTURE(N);
        CAPTURE(K);
        auto W = random_bf16_values((size_t)N * K, r);
        auto xb = random_bf16_values(K, r);
        DeviceVec<bf16> d_W(to_bf16(W)), d_xb(to_bf16(xb));
        DeviceVec<float> d_y(N);
        Linear L;
        L.N = N, L.K = K, L.w = d_W.p;
        gemv(L, d_xb.p, d_y.p, 0);
        auto ref = matmul_ref(W, xb, 1, N, K);
        CHECK_CLOSE(compare(d_y.download(), ref), 1e-5);

        auto y0 = random_floats(N, r);
        d_y.upload(y0);
        gemv_add(L, d_xb.p, d_y.p, 0);
        std::vector<double> ref_add(N);
        for (int n = 0; n < N; n++) ref_add[n] = ref[n] + y0[n];
        CHECK_CLOSE(compare(d_y.download(), ref_add), 1e-5);

        // Fused RMSNorm: the normalised input is rounded to bf16 (as the prefill path does).
        auto xf = random_floats(K, r, 2.f);
        auto nw = random_bf16_values(K, r);
        auto normed = rmsnorm_ref(xf, nw, 1, K, 1e-6);
        std::vector<float> normed_b(K);
        for (int k = 0; k < K; k++) normed_b[k] = round_to_bf16((float)normed[k]);
        DeviceVec<float> d_xf(xf);
        DeviceVec<bf16> d_nw(to_bf16(nw));
        d_y.poison();
        gemv_rmsnorm(L, d_xf.p, d_nw.p, 1e-6f, d_y.p, 0);
        CHECK_CLOSE(compare(d_y.download(), matmul_ref(W, normed_b, 1, N, K)), 2e-3);

        if (N % 2 == 0) {
            DeviceVec<bf16> d_h(N / 2);
            gemv_rmsnorm_swiglu(L, d_xf.p, d_nw.p, 1e-6f, d_h.p, 0);
            auto gu = matmul_ref(W, normed_b, 1, N, K);
            std::vector<double> ref_h(N / 2);
            for (int i = 0; i < N / 2; i++) ref_h[i] = gu[2 * i] / (1 + std::exp(-gu[2 * i])) * gu[2 * i + 1];
            CHECK_CLOSE(compare(from_bf16(d_h.download()), ref_h), 1e-2);
        }
    }
    gemv_forced_layout() = GemvLayout{0, 0, 0};
}

TEST_CASE("gemv with an L2 prefetch of another buffer: the same bits, before or after the wait, any size") {
    Rng r(15);
    const int N = 4097, K = 2560;
    auto W = random_bf16_values((size_t)N * K, r);
    auto xb = random_bf16_values(K, r);
    DeviceVec<bf16> d_W(to_bf16(W)), d_xb(to_bf16(xb));
    DeviceVec<float> d_plain(N), d_y(N);
    Linear L;
    L.N = N, L.K = K, L.w = d_W.p;
    gemv(L, d_xb.p, d_plain.p, 0);
    auto plain = d_plain.download();
    CHECK_CLOSE(compare(plain, matmul_ref(W, xb, 1, N, K)), 1e-5);
    DeviceVec<uint8_t> other((size_t)(9u << 20) + 13);  // larger than kL2AheadBytes, and not a multiple of 16
    Linear next;
    next.N = 1, next.K = (int)other.n, next.fmt = WFormat::FP8, next.w = other.p;  // weight_bytes() = other.n
    for (size_t bytes : {(size_t)1, (size_t)4099, other.n})
        for (bool after_wait : {false, true}) {
            CAPTURE(bytes);
            CAPTURE(after_wait);
            auto y0 = random_floats(N, r);
            DeviceVec<float> d_ref(y0);
            d_y.upload(y0);
            gemv_add(L, d_xb.p, d_y.p, 0, L2Prefetch{other.p, bytes, after_wait});
            gemv_add(L, d_xb.p, d_ref.p, 0);
            auto y = d_y.download(), ref = d_ref.download();
            CHECK(std::memcmp(y.data(), ref.data(), N * sizeof(float)) == 0);
            CHECK(y[7] != y0[7]);  // the add happened
        }
    L2Prefetch ahead = l2_ahead(next, true);  // capped at kL2AheadBytes of the weights
    CHECK(ahead.p == other.p);
    CHECK(ahead.bytes == kL2AheadBytes);
    CHECK(ahead.after_wait);
    next.N = 1, next.K = 1000, next.fmt = WFormat::BF16;
    CHECK(l2_ahead(next, false).bytes == 2000);
    next.w = other.p + 8;  // not 16-byte aligned: no prefetch
    CHECK(l2_ahead(next, false).bytes == 0);
}

TEST_CASE("gemv launches hold a kernel to kGemvMaxWarpsPerSm warps per SM, asking for more shared memory where needed") {
    Rng r(15);
    const int N = 64, K = 4096;
    DeviceVec<bf16> d_W(to_bf16(random_bf16_values((size_t)N * K, r))), d_x(to_bf16(random_bf16_values(K, r)));
    DeviceVec<float> d_y(N);
    Linear L;
    L.N = N, L.K = K, L.w = d_W.p;
    gemv(L, d_x.p, d_y.p, 0);  // sets the kernel's attributes, as every first launch does
    // bf16's 2-row kernel (blocks of 8 warps, 64-72 registers: 3 or 4 blocks would fit) and INT4's (blocks of 12)
    auto check = [&](auto kernel, int warps, const char* name) {
        const int max_blocks = kGemvMaxWarpsPerSm / warps;
        int uncapped = 0, capped = 0;
        size_t base = (size_t)K * 2, smem = gemv_capped_smem(kernel, base, warps);
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&uncapped, kernel, warps * 32, base));
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&capped, kernel, warps * 32, smem));
        MESSAGE(std::string(name), ": ", uncapped, " blocks of ", warps, " warps per SM with its own ", base, " bytes, ", capped, " with ", smem);
        CHECK(smem >= base);
        CHECK(capped <= max_blocks);
        CHECK(capped >= 1);
        if (uncapped <= max_blocks) CHECK(smem == base);  // no padding where the registers already cap it
        else CHECK(smem > base);
        CHECK(gemv_capped_smem(kernel, base, warps) == smem);  // remembered
    };
    check(gemv_kernel<Bf16Weights, GemvInput::BF16, GemvOutput::STORE_F32, 2>, gemv_warps<Bf16Weights>(2), "bf16 gemv");
    check(gemv_kernel<Int4Weights, GemvInput::BF16, GemvOutput::STORE_F32, 2>, gemv_warps<Int4Weights>(2), "int4 2-row gemv");
    CHECK(gemv_warps<Bf16Weights>(2) == 8);
    CHECK(gemv_warps<Fp8Weights>(2) == 8);
    CHECK(gemv_warps<Int4Weights>(2) == 12);
    CHECK(gemv_warps<Int4Weights>(4) == 8);
}

TEST_CASE("the looping (SwiGLU) GEMV's grid: at most the resident blocks, each taking an equal share of row groups") {
    auto kernel = gemv_kernel<Fp8Weights, GemvInput::F32_RMSNORM, GemvOutput::SWIGLU_BF16, 4>;
    static_assert(gemv_loops<GemvOutput::SWIGLU_BF16, 4>(), "the 4-row SwiGLU GEMV loops");
    const size_t smem = 20000;
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, gemv_warps<Fp8Weights>(4) * 32, smem));
    const int resident = per_sm * gemv_device().sms;
    REQUIRE(resident > 0);
    for (int groups : {1, 7, resident - 1, resident, resident + 1, 2 * resident + 5, 608, 1216, 100000}) {
        CAPTURE(groups);
        const int grid = gemv_resident_grid(kernel, smem, groups, gemv_warps<Fp8Weights>(4));
        // block b takes groups b, b + grid, ...: the first block the most, the last the fewest
        const int most = CEIL_DIV(groups, grid), fewest = CEIL_DIV(groups - (grid - 1), grid);
        CHECK(grid <= std::min(groups, resident));
        CHECK(most == CEIL_DIV(groups, resident));  // no block takes more groups than one wave of blocks must
        CHECK(fewest >= 1);
        CHECK(most - fewest <= 1);
    }
}

TEST_CASE("gemm (cuBLAS, bf16 in, fp32 out): store and accumulate") {
    Rng r(6);
    int T = 37, N = 200, K = 96;
    auto W = random_bf16_values((size_t)N * K, r), A = random_bf16_values((size_t)T * K, r);
    DeviceVec<bf16> d_W(to_bf16(W)), d_A(to_bf16(A));
    DeviceVec<float> d_C((size_t)T * N);
    Gemm g;
    gemm_bf16(g, d_A.p, d_W.p, d_C.p, T, N, K, false, 0);
    auto ref = matmul_ref(W, A, T, N, K);
    CHECK_CLOSE(compare(d_C.download(), ref), 1e-5);
    auto C0 = random_floats((size_t)T * N, r);
    d_C.upload(C0);
    gemm_bf16(g, d_A.p, d_W.p, d_C.p, T, N, K, true, 0);
    for (size_t i = 0; i < ref.size(); i++) ref[i] += C0[i];
    CHECK_CLOSE(compare(d_C.download(), ref), 1e-5);
}

// ---- attention ----

// softmax(q k^T / sqrt(d) + causal) v for query rows at positions pos0 + t, keys 0 .. pos0 + t.
// Causal attention in double; with a sliding window W > 0 the query at position p sees keys p - W + 1 .. p; with sinks
// (GPT-OSS) head h's e^(sinks[h]) joins the softmax's denominator.
static std::vector<double> attention_ref(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                                         int T, int pos0, int nh, int nkv, int hd, int ctx, int window = 0,
                                         const std::vector<float>* sinks = nullptr) {
    std::vector<double> out((size_t)T * nh * hd, 0.0);
    int G = nh / nkv;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            int kvh = h / G, n = pos0 + t + 1, first = window > 0 ? std::max(0, n - window) : 0;
            std::vector<double> s(n, -1e300);
            double mx = -1e300;
            for (int j = first; j < n; j++) {
                double d = 0;
                for (int i = 0; i < hd; i++) d += (double)q[((size_t)t * nh + h) * hd + i] * k[((size_t)kvh * ctx + j) * hd + i];
                s[j] = d / std::sqrt((double)hd);
                mx = std::max(mx, s[j]);
            }
            double z = 0;
            for (int j = first; j < n; j++) z += (s[j] = std::exp(s[j] - mx));
            if (sinks) z += std::exp((double)(*sinks)[h] - mx);
            for (int j = first; j < n; j++)
                for (int i = 0; i < hd; i++) out[((size_t)t * nh + h) * hd + i] += s[j] / z * v[((size_t)kvh * ctx + j) * hd + i];
        }
    return out;
}

// A one-layer KV cache filled from host values; kref / vref are the values it really holds
// (bf16- or fp16-rounded, or FP8 codes times their row scale), which is what the reference must use.
struct TestCache {
    KvType type;
    int hd;
    std::unique_ptr<DeviceVec<uint8_t>> k, v;
    std::unique_ptr<DeviceVec<float>> ks, vs;
    std::vector<float> kref, vref;
    KvLayer layer() const {
        KvLayer L;
        L.k = k->p, L.v = v->p;
        if (type == KvType::FP8) L.k_scale = ks->p, L.v_scale = vs->p;
        return L;
    }
};

static void encode_cache_rows(KvType t, const std::vector<float>& x, int hd, std::vector<uint8_t>& raw, std::vector<float>& scales,
                              std::vector<float>& ref) {
    size_t rows = x.size() / hd;
    raw.assign(x.size() * (t == KvType::FP8 ? 1 : 2), 0);
    scales.assign(rows, 1.f);
    ref.resize(x.size());
    for (size_t r = 0; r < rows; r++) {
        float amax = 0.f;
        for (int i = 0; i < hd; i++) amax = std::fmax(amax, std::fabs(x[r * hd + i]));
        float s = amax > 0 ? amax / 448.f : 1.f;
        if (t == KvType::FP8) scales[r] = s;
        for (int i = 0; i < hd; i++) {
            size_t e = r * hd + i;
            if (t == KvType::BF16) {
                uint16_t b = float_to_bf16_bits(x[e]);
                std::memcpy(&raw[2 * e], &b, 2);
                ref[e] = bf16_bits_to_float(b);
            } else if (t == KvType::F16) {
                uint16_t h = static_cast<__half_raw>(__float2half_rn(x[e])).x;
                std::memcpy(&raw[2 * e], &h, 2);
                ref[e] = f16_bits_to_float(h);
            } else {
                raw[e] = float_to_e4m3(x[e] / s);
                ref[e] = e4m3_to_float(raw[e]) * s;
            }
        }
    }
}

static TestCache make_test_cache(KvType t, const std::vector<float>& k, const std::vector<float>& v, int hd) {
    TestCache c;
    c.type = t, c.hd = hd;
    std::vector<uint8_t> raw;
    std::vector<float> sc;
    encode_cache_rows(t, k, hd, raw, sc, c.kref);
    c.k = std::make_unique<DeviceVec<uint8_t>>(raw);
    c.ks = std::make_unique<DeviceVec<float>>(sc);
    encode_cache_rows(t, v, hd, raw, sc, c.vref);
    c.v = std::make_unique<DeviceVec<uint8_t>>(raw);
    c.vs = std::make_unique<DeviceVec<float>>(sc);
    return c;
}

TEST_CASE("prefill attention (tensor cores, fp16): GQA 1/2/4/7/8, head_dim 64/128, earlier context, sliding windows, bf16/FP8 cache, fp16 copy, split keys") {
    Rng r(7);
    GpuMemory mem;
    PrefillSplit split64 = prefill_split_create(16, 64, 256, 8, mem), split128 = prefill_split_create(16, 128, 256, 8, mem);
    struct Chunk { int T, pos0, window; };
    for (KvType kt : {KvType::BF16, KvType::FP8, KvType::F16})
        for (int hd : {64, 128})
            for (int G : {1, 2, 4, 7, 8})
                for (Chunk tp : {Chunk{1, 0, 0}, Chunk{17, 0, 0}, Chunk{64, 0, 0}, Chunk{100, 0, 0}, Chunk{203, 37, 0}, Chunk{5, 130, 0},
                                 Chunk{100, 0, 33}, Chunk{203, 37, 50}, Chunk{5, 130, 7}, Chunk{130, 0, 64}, Chunk{70, 200, 1}}) {
                    if (G == 7 && tp.window == 0 && tp.T < 100) continue;  // GQA 7 (Llama-shaped 28/4): the longer chunks
                    int T = tp.T, pos0 = tp.pos0, nkv = 2, nh = nkv * G, ctx = pos0 + T + 3;
                    AttnParams ap;
                    ap.window = tp.window;
                    CAPTURE(tp.window);
                    CAPTURE((int)kt);
                    CAPTURE(hd);
                    CAPTURE(G);
                    CAPTURE(T);
                    CAPTURE(pos0);
                    auto q = round_to_half(random_floats((size_t)T * nh * hd, r, 1.5f));
                    TestCache cache = make_test_cache(kt, random_floats((size_t)nkv * ctx * hd, r, 1.5f),
                                                      random_floats((size_t)nkv * ctx * hd, r), hd);
                    DeviceVec<__half> d_q(to_half(q));
                    DeviceVec<bf16> d_out((size_t)T * nh * hd);
                    DeviceVec<int> d_pos(std::vector<int>{pos0});
                    d_out.poison();
                    auto ref = attention_ref(q, cache.kref, cache.vref, T, pos0, nh, nkv, hd, ctx, tp.window);
                    // Whole, then with the keys cut into 2, 3 and 8 runs (split keys: some runs see no key of a row,
                    // or none at all) and merged.
                    PrefillSplit& sp = hd == 64 ? split64 : split128;
                    for (int splits : {0, 1, 2, 3, 8}) {  // 0: the kit's choice (Hopper's kernel where built and fitting)
                        CAPTURE(splits);
                        d_out.poison();
                        prefill_attention(d_q.p, kt, cache.layer(), d_pos.p, d_out.p, T, nh, nkv, hd, ctx, ap, 0, &sp, pos0 + T, splits,
                                          splits ? AttnKernel::Portable : AttnKernel::Auto);
                        // bf16 output (~1.1e-3 of rounding alone). Over the fp16 copy the MMA inputs are fp16 and add
                        // little; an FP8 cache's tiles are scaled into fp16, one more rounding; over a bf16 cache q
                        // and P go to bf16.
                        CHECK_CLOSE(compare(from_bf16(d_out.download()), ref), kt == KvType::F16 ? 2.5e-3 : kt == KvType::FP8 ? 4e-3 : 5e-3);
                    }
                }
}

// A plan with another split count (and partial buffers to match): the kernels must not depend on the plan's.
static FlashDecode with_splits(const FlashDecode& planned, int splits, GpuMemory& mem) {
    FlashDecode fd = planned;
    fd.n_splits = splits;
    fd.part_o = mem.alloc<float>((size_t)fd.n_heads * splits * fd.head_dim, "test");
    fd.part_ml = mem.alloc<float2>((size_t)fd.n_heads * splits, "test");
    return fd;
}

TEST_CASE("flash-decoding: contexts 1..16k, GQA 1/2/4/8, head_dim 64/128, several split counts, sliding windows, bf16 and FP8 cache") {
    Rng r(8);
    GpuMemory mem;
    for (KvType kt : {KvType::BF16, KvType::FP8})
        for (int hd : {64, 128})
            for (int G : {1, 2, 4, 8})
                for (int len : {1, 2, 63, 64, 65, 1000, 4096, 16384}) {
                    if (len == 16384 && G != 4 && G != 8) continue;  // the longest context on the common GQA ratios
                    if (kt == KvType::FP8 && (len == 2 || len == 63 || len == 1000)) continue;
                    int nkv = 2, nh = nkv * G, ctx = len + 5;
                    auto q = random_bf16_values((size_t)nh * hd, r, 1.5f);
                    TestCache cache = make_test_cache(kt, random_floats((size_t)nkv * ctx * hd, r, 1.5f),
                                                      random_floats((size_t)nkv * ctx * hd, r), hd);
                    DeviceVec<bf16> d_q(to_bf16(q)), d_out((size_t)nh * hd);
                    DeviceVec<int> d_pos(std::vector<int>{len - 1});
                    FlashDecode planned = flash_decode_plan(nh, nkv, hd, ctx, mem);
                    for (int window : {0, 1, 37, 1500}) {
                    if (window && (len < 64 || hd == 64)) continue;
                    AttnParams ap;
                    ap.window = window;
                    auto ref = attention_ref(q, cache.kref, cache.vref, 1, len - 1, nh, nkv, hd, ctx, window);
                    for (int splits : {1, 3, 16, planned.n_splits, 100}) {  // 100: the merge takes two batches of splits
                        CAPTURE(window);
                        CAPTURE((int)kt);
                        CAPTURE(hd);
                        CAPTURE(G);
                        CAPTURE(len);
                        CAPTURE(splits);
                        FlashDecode fd = with_splits(planned, splits, mem);
                        d_out.poison();
                        flash_decode(fd, d_q.p, kt, cache.layer(), d_pos.p, d_out.p, 0, ap);
                        CHECK_CLOSE(compare(from_bf16(d_out.download()), ref), 1e-2);
                    }
                    }
                    if (len == 1) CHECK_THROWS_AS(flash_decode(planned, d_q.p, KvType::F16, cache.layer(), d_pos.p, d_out.p, 0), UserError);
                }
}

// Paged KV (the batched core): sequences' rows scattered over a pool of 16-row blocks in a shuffled order, each
// sequence reading its positions through its block table. kref / vref hold, per sequence, the values as a contiguous
// [nkv][len][hd] cache would (for attention_ref).
struct PagedCache {
    KvType type;
    int hd, nkv, pool_rows, stride;                    // stride: blocks per table row
    std::unique_ptr<DeviceVec<uint8_t>> k, v;
    std::unique_ptr<DeviceVec<float>> ks, vs;
    std::unique_ptr<DeviceVec<int>> tables;
    std::vector<std::vector<float>> kref, vref;
    KvLayer layer() const {
        KvLayer L;
        L.k = k->p, L.v = v->p, L.pages = tables->p, L.page_shift = 4, L.pages_stride = stride;
        if (type == KvType::FP8) L.k_scale = ks->p, L.v_scale = vs->p;
        return L;
    }
};

static PagedCache make_paged_cache(KvType t, const std::vector<int>& lens, int nkv, int hd, Rng& r, uint8_t unused = 0xA5) {
    PagedCache c;
    c.type = t, c.hd = hd, c.nkv = nkv;
    int blocks = 3;  // a few the tables never name
    c.stride = 0;
    for (int len : lens) blocks += (len + 15) / 16, c.stride = std::max(c.stride, (len + 15) / 16);
    c.pool_rows = blocks * 16;
    std::vector<int> order(blocks);
    for (int b = 0; b < blocks; b++) order[b] = b;
    for (int b = blocks - 1; b > 0; b--) std::swap(order[b], order[r.uniform_int(0, b)]);  // shuffled
    const size_t eb = t == KvType::FP8 ? 1 : 2;
    std::vector<uint8_t> K((size_t)nkv * c.pool_rows * hd * eb, unused), V = K;  // unused rows: garbage (0xFF: NaN)
    std::vector<float> KS((size_t)nkv * c.pool_rows, 1e30f), VS = KS;
    std::vector<int> tables(lens.size() * c.stride, -1);
    int next = 0;
    for (size_t s = 0; s < lens.size(); s++) {
        const int len = lens[s];
        for (int b = 0; b < (len + 15) / 16; b++) tables[s * c.stride + b] = order[next++];
        auto kx = random_floats((size_t)nkv * len * hd, r, 1.5f), vx = random_floats((size_t)nkv * len * hd, r);
        std::vector<uint8_t> kr, vr;
        std::vector<float> ksc, vsc, kf, vf;
        encode_cache_rows(t, kx, hd, kr, ksc, kf);
        encode_cache_rows(t, vx, hd, vr, vsc, vf);
        c.kref.push_back(kf), c.vref.push_back(vf);
        for (int h = 0; h < nkv; h++)
            for (int p = 0; p < len; p++) {
                size_t src = (size_t)h * len + p, dst = (size_t)h * c.pool_rows + tables[s * c.stride + p / 16] * 16 + p % 16;
                std::memcpy(&K[dst * hd * eb], &kr[src * hd * eb], hd * eb);
                std::memcpy(&V[dst * hd * eb], &vr[src * hd * eb], hd * eb);
                KS[dst] = ksc[src], VS[dst] = vsc[src];
            }
    }
    c.k = std::make_unique<DeviceVec<uint8_t>>(K), c.v = std::make_unique<DeviceVec<uint8_t>>(V);
    c.ks = std::make_unique<DeviceVec<float>>(KS), c.vs = std::make_unique<DeviceVec<float>>(VS);
    c.tables = std::make_unique<DeviceVec<int>>(tables);
    return c;
}

TEST_CASE("paged KV: flash-decoding of many sequences in one launch and prefill attention, through shuffled block tables") {
    Rng r(21);
    GpuMemory mem;
    const int nkv = 2;
    for (KvType kt : {KvType::BF16, KvType::FP8})
        for (int hd : {64, 128})
            for (int G : {1, 4, 8})
                for (int window : {0, 37}) {
                    CAPTURE((int)kt);
                    CAPTURE(hd);
                    CAPTURE(G);
                    CAPTURE(window);
                    const int nh = nkv * G;
                    std::vector<int> lens = {1, 16, 17, 64, 300, 1000, 2047};
                    const int S = (int)lens.size();
                    PagedCache pc = make_paged_cache(kt, lens, nkv, hd, r);
                    AttnParams ap;
                    ap.window = window;
                    // Decode: sequence z's query at position lens[z] - 1.
                    auto q = random_bf16_values((size_t)S * nh * hd, r, 1.5f);
                    std::vector<int> pos;
                    for (int len : lens) pos.push_back(len - 1);
                    DeviceVec<bf16> d_q(to_bf16(q)), d_out((size_t)S * nh * hd);
                    DeviceVec<int> d_pos(pos);
                    FlashDecode fd = flash_decode_plan(nh, nkv, hd, pc.pool_rows, mem, S, 2048);
                    for (int n : {1, S}) {  // one sequence (the plan's splits), all of them (fewer each)
                        CAPTURE(n);
                        d_out.poison();
                        flash_decode(fd, d_q.p, kt, pc.layer(), d_pos.p, d_out.p, 0, ap, n);
                        std::vector<float> out = from_bf16(d_out.download());
                        for (int z = 0; z < n; z++) {
                            CAPTURE(z);
                            std::vector<float> qz(q.begin() + (size_t)z * nh * hd, q.begin() + (size_t)(z + 1) * nh * hd);
                            auto ref = attention_ref(qz, pc.kref[z], pc.vref[z], 1, lens[z] - 1, nh, nkv, hd, lens[z], window);
                            std::vector<float> got(out.begin() + (size_t)z * nh * hd, out.begin() + (size_t)(z + 1) * nh * hd);
                            CHECK_CLOSE(compare(got, ref), 1e-2);
                        }
                    }
                    // Prefill: a chunk of sequence 5 (1000 rows) at position 600 attends to rows 0 .. 600 + T - 1 through its table.
                    const int z = 5, T = 130, pos0 = 600;
                    auto qp = round_to_half(random_floats((size_t)T * nh * hd, r, 1.5f));
                    DeviceVec<__half> d_qp(to_half(qp));
                    DeviceVec<bf16> d_po((size_t)T * nh * hd);
                    DeviceVec<int> d_p0(std::vector<int>{pos0});
                    KvLayer L = pc.layer();
                    L.pages += z * pc.stride;
                    auto ref = attention_ref(qp, pc.kref[z], pc.vref[z], T, pos0, nh, nkv, hd, lens[z], window);
                    PrefillSplit sp = prefill_split_create(nh, hd, T, 4, mem);
                    for (int splits : {0, 1, 4}) {  // the kit's choice, the portable kernel whole, and split keys through the table
                        CAPTURE(splits);
                        d_po.poison();
                        prefill_attention(d_qp.p, kt, L, d_p0.p, d_po.p, T, nh, nkv, hd, pc.pool_rows, ap, 0, &sp, pos0 + T, splits,
                                          splits ? AttnKernel::Portable : AttnKernel::Auto);
                        CHECK_CLOSE(compare(from_bf16(d_po.download()), ref), kt == KvType::FP8 ? 4e-3 : 5e-3);
                    }
                }
}

// The Hopper kernel (attention_sm90.cuh) on its own: tiles of 128 queries and 128 keys, so chunk lengths around and
// across them; GQA 1/4/7; windows shorter than the chunk; sinks; fp16 copy and bf16 cache; contiguous and paged. The
// cache rows past the chunk's last key are NaN (as unwritten memory is): the kernel must never let them in.
TEST_CASE("prefill attention on Hopper (wgmma, TMA, warp-specialised): tile edges, GQA 1/4/7, windows, sinks, FP8, paged, NaN past the keys") {
    AttnParams probe;
    if (!prefill_attention_sm90_fits(KvType::BF16, 128, probe, 1, KvLayer{})) {
        MESSAGE("skipped: not built for sm_90a (the Hopper kernel is not in this build)");
        return;
    }
    Rng r(38);
    struct Chunk { int T, pos0, window; };
    for (KvType kt : {KvType::F16, KvType::BF16, KvType::FP8})
        for (int hd : {64, 128})
            for (int G : {1, 4, 7})
                for (Chunk tp : {Chunk{1, 0, 0}, Chunk{127, 0, 0}, Chunk{128, 0, 0}, Chunk{129, 0, 0}, Chunk{300, 0, 0}, Chunk{203, 37, 0},
                                 Chunk{5, 130, 0}, Chunk{300, 0, 33}, Chunk{203, 300, 50}, Chunk{130, 0, 1}, Chunk{385, 640, 0},
                                 Chunk{257, 0, 200}}) {
                    if (G == 7 && tp.T < 128) continue;
                    const int T = tp.T, pos0 = tp.pos0, nkv = 2, nh = nkv * G, ctx = pos0 + T + 40, n = pos0 + T;
                    for (bool sinks_on : {false, true}) {
                        if (sinks_on && (G != 4 || tp.T < 128)) continue;
                        CAPTURE((int)kt);
                        CAPTURE(hd);
                        CAPTURE(G);
                        CAPTURE(T);
                        CAPTURE(pos0);
                        CAPTURE(tp.window);
                        CAPTURE(sinks_on);
                        std::vector<float> sinks(nh);
                        for (int h = 0; h < nh; h++) sinks[h] = -4.f + 8.f * h / (nh - 1);
                        DeviceVec<float> d_sinks(sinks);
                        AttnParams ap;
                        ap.window = tp.window;
                        if (sinks_on) ap.sinks = d_sinks.p;
                        auto q = round_to_half(random_floats((size_t)T * nh * hd, r, 1.5f));
                        TestCache cache = make_test_cache(kt, random_floats((size_t)nkv * ctx * hd, r, 1.5f), random_floats((size_t)nkv * ctx * hd, r), hd);
                        {  // rows n .. ctx - 1 of each head: NaN (and NaN scales)
                            const int eb = kt == KvType::FP8 ? 1 : 2;
                            std::vector<uint8_t> kk = cache.k->download(), vv = cache.v->download();
                            std::vector<float> ks = cache.ks->download(), vs = cache.vs->download();
                            for (int h = 0; h < nkv; h++)
                                for (int p = n; p < ctx; p++) {
                                    for (int i = 0; i < hd * eb; i++) kk[((size_t)h * ctx + p) * hd * eb + i] = vv[((size_t)h * ctx + p) * hd * eb + i] = 0xFF;
                                    ks[(size_t)h * ctx + p] = vs[(size_t)h * ctx + p] = NAN;
                                }
                            cache.k = std::make_unique<DeviceVec<uint8_t>>(kk), cache.v = std::make_unique<DeviceVec<uint8_t>>(vv);
                            cache.ks = std::make_unique<DeviceVec<float>>(ks), cache.vs = std::make_unique<DeviceVec<float>>(vs);
                        }
                        DeviceVec<__half> d_q(to_half(q));
                        DeviceVec<bf16> d_out((size_t)T * nh * hd);
                        DeviceVec<int> d_pos(std::vector<int>{pos0});
                        auto ref = attention_ref(q, cache.kref, cache.vref, T, pos0, nh, nkv, hd, ctx, tp.window, sinks_on ? &sinks : nullptr);
                        d_out.poison();
                        prefill_attention(d_q.p, kt, cache.layer(), d_pos.p, d_out.p, T, nh, nkv, hd, ctx, ap, 0, nullptr, n, 0, AttnKernel::Hopper);
                        CHECK_CLOSE(compare(from_bf16(d_out.download()), ref), kt == KvType::F16 ? 2.5e-3 : kt == KvType::FP8 ? 4e-3 : 5e-3);
                    }
                }
    // Paged: a chunk ending at its sequence's last key (the block's other rows unused: NaN), blocks of 16 rows.
    for (KvType kt : {KvType::BF16, KvType::FP8})
    for (int hd : {64, 128})
        for (int G : {1, 4}) {
            CAPTURE((int)kt);
            CAPTURE(hd);
            CAPTURE(G);
            const int nkv = 2, nh = nkv * G;
            std::vector<int> lens = {100, 777, 1500};
            PagedCache pc = make_paged_cache(kt, lens, nkv, hd, r, 0xFF);
            const int z = 1, T = 300, pos0 = lens[z] - T;
            auto q = round_to_half(random_floats((size_t)T * nh * hd, r, 1.5f));
            DeviceVec<__half> d_q(to_half(q));
            DeviceVec<bf16> d_out((size_t)T * nh * hd);
            DeviceVec<int> d_pos(std::vector<int>{pos0});
            KvLayer L = pc.layer();
            L.pages += z * pc.stride;
            for (int window : {0, 150}) {
                CAPTURE(window);
                AttnParams ap;
                ap.window = window;
                auto ref = attention_ref(q, pc.kref[z], pc.vref[z], T, pos0, nh, nkv, hd, lens[z], window);
                d_out.poison();
                prefill_attention(d_q.p, kt, L, d_pos.p, d_out.p, T, nh, nkv, hd, pc.pool_rows, ap, 0, nullptr, lens[z], 0, AttnKernel::Hopper);
                CHECK_CLOSE(compare(from_bf16(d_out.download()), ref), kt == KvType::FP8 ? 4e-3 : 5e-3);
            }
        }
}

TEST_CASE("attention sinks (GPT-OSS): prefill and flash-decoding add each head's sink to the denominator, with and without a window") {
    Rng r(9);
    GpuMemory mem;
    const int hd = 64, nkv = 2;
    PrefillSplit split = prefill_split_create(16, hd, 256, 8, mem);
    for (KvType kt : {KvType::BF16, KvType::FP8})
        for (int G : {1, 8})
            for (int window : {0, 16}) {
                const int nh = nkv * G;
                // Sinks from far below to far above the scores (|q.k| / 8 is a few units here): some heads barely
                // change, some attend mostly to nothing.
                std::vector<float> sinks(nh);
                for (int h = 0; h < nh; h++) sinks[h] = -6.f + 12.f * h / std::max(nh - 1, 1);
                DeviceVec<float> d_sinks(sinks);
                AttnParams ap;
                ap.window = window, ap.sinks = d_sinks.p;
                CAPTURE((int)kt);
                CAPTURE(G);
                CAPTURE(window);
                {  // prefill: a chunk at 0 and one after earlier context
                    for (int pos0 : {0, 45}) {
                        CAPTURE(pos0);
                        int T = 70, ctx = pos0 + T + 2;
                        auto q = round_to_half(random_floats((size_t)T * nh * hd, r, 1.5f));
                        TestCache cache = make_test_cache(kt, random_floats((size_t)nkv * ctx * hd, r, 1.5f), random_floats((size_t)nkv * ctx * hd, r), hd);
                        DeviceVec<__half> d_q(to_half(q));
                        DeviceVec<bf16> d_out((size_t)T * nh * hd);
                        DeviceVec<int> d_pos(std::vector<int>{pos0});
                        auto ref = attention_ref(q, cache.kref, cache.vref, T, pos0, nh, nkv, hd, ctx, window, &sinks);
                        auto plain = attention_ref(q, cache.kref, cache.vref, T, pos0, nh, nkv, hd, ctx, window);
                        for (int splits : {1, 3}) {  // the split-key merge adds the sink too
                            CAPTURE(splits);
                            d_out.poison();
                            prefill_attention(d_q.p, kt, cache.layer(), d_pos.p, d_out.p, T, nh, nkv, hd, ctx, ap, 0, &split, 0, splits);
                            CHECK_CLOSE(compare(from_bf16(d_out.download()), ref), kt == KvType::FP8 ? 4e-3 : 5e-3);
                            CHECK(compare(from_bf16(d_out.download()), plain).rel_l2 > 0.05);  // the sinks matter here
                        }
                    }
                }
                for (int len : {1, 40, 3000}) {  // decode, over several split counts
                    CAPTURE(len);
                    int ctx = len + 3;
                    auto q = random_bf16_values((size_t)nh * hd, r, 1.5f);
                    TestCache cache = make_test_cache(kt, random_floats((size_t)nkv * ctx * hd, r, 1.5f), random_floats((size_t)nkv * ctx * hd, r), hd);
                    DeviceVec<bf16> d_q(to_bf16(q)), d_out((size_t)nh * hd);
                    DeviceVec<int> d_pos(std::vector<int>{len - 1});
                    FlashDecode planned = flash_decode_plan(nh, nkv, hd, ctx, mem);
                    auto ref = attention_ref(q, cache.kref, cache.vref, 1, len - 1, nh, nkv, hd, ctx, window, &sinks);
                    for (int splits : {1, 7, planned.n_splits}) {
                        CAPTURE(splits);
                        FlashDecode fd = with_splits(planned, splits, mem);
                        d_out.poison();
                        flash_decode(fd, d_q.p, kt, cache.layer(), d_pos.p, d_out.p, 0, ap);
                        CHECK_CLOSE(compare(from_bf16(d_out.download()), ref), 1e-2);
                    }
                }
            }
    // Sinks with KV eviction are refused in one line.
    AttnParams bad;
    DeviceVec<float> d_s(std::vector<float>{0.f});
    bad.sinks = d_s.p, bad.kv_budget = 8;
    CHECK_THROWS_AS(attn_params_check(bad, "test"), UserError);
}

TEST_CASE("flash-decoding fused with q/k norm, RoPE and the cache write: reference output, exactly the new row written") {
    Rng r(10);
    GpuMemory mem;
    for (KvType kt : {KvType::BF16, KvType::FP8})
        for (int hd : {64, 128})
            for (int G : {1, 4, 8})
                for (int len : {1, 64, 65, 1000, 4096}) {
                    int nkv = 2, nh = nkv * G, ctx = len + 5, pos = len - 1, qkv_row = (nh + 2 * nkv) * hd;
                    float eps = 1e-6f;
                    CAPTURE((int)kt);
                    CAPTURE(hd);
                    CAPTURE(G);
                    CAPTURE(len);
                    RopeConfig rc;
                    rc.theta = 1000000;
                    RopeTable rope = make_rope_table(rc, hd, ctx, mem, 0);
                    auto cs = rope_cos_sin_host(rc, hd, ctx);
                    auto qkv = random_floats(qkv_row, r, 2.f);
                    auto qn = random_bf16_values(hd, r), kn = random_bf16_values(hd, r);
                    DeviceVec<float> d_qkv(qkv);
                    DeviceVec<bf16> d_qn(to_bf16(qn)), d_kn(to_bf16(kn)), d_out((size_t)nh * hd);
                    DeviceVec<int> d_pos(std::vector<int>{pos});
                    FlashDecode planned = flash_decode_plan(nh, nkv, hd, ctx, mem);
                    for (int splits : {1, 3, planned.n_splits}) {
                        CAPTURE(splits);
                        TestCache cache = make_test_cache(kt, random_floats((size_t)nkv * ctx * hd, r, 1.5f),
                                                          random_floats((size_t)nkv * ctx * hd, r), hd);
                        std::vector<uint8_t> k_before = cache.k->download(), v_before = cache.v->download();
                        FlashDecode fd = with_splits(planned, splits, mem);
                        d_out.poison();
                        flash_decode_fused(fd, DecodeQkv{d_qkv.p, d_qn.p, d_kn.p, rope.cos_sin, eps}, kt, cache.layer(), d_pos.p,
                                           d_out.p, 0);
                        std::vector<uint8_t> k_after = cache.k->download(), v_after = cache.v->download();
                        std::vector<float> ks_after = cache.ks->download(), vs_after = cache.vs->download();
                        // The new rows hold k = rope(k_norm(k_raw)) and v = v_raw; every other row is as it was.
                        std::vector<double> ref_k, ref_v;
                        std::vector<float> got_k, got_v, kfull = cache.kref, vfull = cache.vref;
                        size_t eb = kt == KvType::BF16 ? 2 : 1, changed_elsewhere = 0;
                        for (int h = 0; h < nkv; h++) {
                            size_t row = (size_t)h * ctx + pos;
                            auto kr = head_norm_rope_ref(&qkv[(size_t)(nh + h) * hd], kn, cs, pos, hd, eps);
                            for (int i = 0; i < hd; i++) {
                                ref_k.push_back(kr[i]);
                                ref_v.push_back(qkv[(size_t)(nh + nkv + h) * hd + i]);
                                got_k.push_back(kfull[row * hd + i] = cache_value(k_after, ks_after, kt, row, hd, i));
                                got_v.push_back(vfull[row * hd + i] = cache_value(v_after, vs_after, kt, row, hd, i));
                            }
                        }
                        for (size_t b = 0; b < k_after.size(); b++)  // row index h * ctx + p: only p == pos may change
                            if (b / (hd * eb) % ctx != (size_t)pos && (k_after[b] != k_before[b] || v_after[b] != v_before[b]))
                                changed_elsewhere++;
                        double cache_bound = kt == KvType::BF16 ? 5e-3 : 4e-2;
                        CHECK_CLOSE(compare(got_k, ref_k), cache_bound);
                        CHECK_CLOSE(compare(got_v, ref_v), cache_bound);
                        CHECK(changed_elsewhere == 0);
                        // The output against attention over what the cache holds, with q = rope(q_norm(q_raw)) in bf16.
                        std::vector<float> q_ref;
                        for (int h = 0; h < nh; h++)
                            for (double x : head_norm_rope_ref(&qkv[(size_t)h * hd], qn, cs, pos, hd, eps)) q_ref.push_back(round_to_bf16((float)x));
                        auto ref = attention_ref(q_ref, kfull, vfull, 1, pos, nh, nkv, hd, ctx);
                        CHECK_CLOSE(compare(from_bf16(d_out.download()), ref), 1e-2);
                    }
                }
}

TEST_CASE("flash-decoding fused without q/k norm and without RoPE (Llama's and NoPE layers), with a window: raw q, k, v") {
    Rng r(15);
    GpuMemory mem;
    for (KvType kt : {KvType::BF16, KvType::FP8})
        for (int window : {0, 100}) {
            int hd = 128, nkv = 2, G = 4, nh = nkv * G, len = 1000, ctx = len + 5, pos = len - 1, qkv_row = (nh + 2 * nkv) * hd;
            CAPTURE((int)kt);
            CAPTURE(window);
            auto qkv = random_floats(qkv_row, r, 2.f);
            DeviceVec<float> d_qkv(qkv);
            DeviceVec<bf16> d_out((size_t)nh * hd);
            DeviceVec<int> d_pos(std::vector<int>{pos});
            FlashDecode fd = flash_decode_plan(nh, nkv, hd, ctx, mem);
            TestCache cache = make_test_cache(kt, random_floats((size_t)nkv * ctx * hd, r, 1.5f), random_floats((size_t)nkv * ctx * hd, r), hd);
            AttnParams ap;
            ap.window = window;
            d_out.poison();
            flash_decode_fused(fd, DecodeQkv{d_qkv.p, nullptr, nullptr, nullptr, 1e-6f}, kt, cache.layer(), d_pos.p, d_out.p, 0, ap);
            std::vector<uint8_t> k_after = cache.k->download(), v_after = cache.v->download();
            std::vector<float> ks_after = cache.ks->download(), vs_after = cache.vs->download();
            std::vector<float> kfull = cache.kref, vfull = cache.vref, got_k;
            std::vector<double> ref_k;
            for (int h = 0; h < nkv; h++) {
                size_t row = (size_t)h * ctx + pos;
                for (int i = 0; i < hd; i++) {
                    ref_k.push_back(qkv[(size_t)(nh + h) * hd + i]);
                    got_k.push_back(kfull[row * hd + i] = cache_value(k_after, ks_after, kt, row, hd, i));
                    vfull[row * hd + i] = cache_value(v_after, vs_after, kt, row, hd, i);
                }
            }
            CHECK_CLOSE(compare(got_k, ref_k), kt == KvType::BF16 ? 5e-3 : 4e-2);  // the new row is k as projected
            std::vector<float> q_ref(qkv.begin(), qkv.begin() + (size_t)nh * hd);
            for (float& x : q_ref) x = round_to_bf16(x);
            auto ref = attention_ref(q_ref, kfull, vfull, 1, pos, nh, nkv, hd, ctx, window);
            CHECK_CLOSE(compare(from_bf16(d_out.download()), ref), 1e-2);
        }
}

TEST_CASE("a projection's bias: GEMV (decode) and GEMM (prefill), stacked parts, store and residual add") {
    Rng r(16);
    GpuMemory mem;
    Linears lin;
    const int N = 96, K = 256, T = 7;
    auto w = random_bf16_values((size_t)N * K, r, 0.05f);
    auto b = random_bf16_values(N, r, 1.f);
    DeviceVec<bf16> d_w(to_bf16(w)), d_b(to_bf16(b));
    Linear L;
    L.N = N, L.K = K, L.w = d_w.p, L.bias = d_b.p, L.label = "test_proj";
    lin.plan.layer({{&L}});
    linears_alloc(lin, T, false, mem);
    auto x = random_bf16_values((size_t)T * K, r, 1.f);
    auto y0 = random_floats((size_t)T * N, r, 1.f);
    DeviceVec<bf16> d_x(to_bf16(x));
    for (int rows : {1, T})
        for (bool add : {false, true}) {
            CAPTURE(rows);
            CAPTURE(add);
            DeviceVec<float> d_y(y0);
            if (!add) d_y.poison();
            if (add) linear_add(L, d_x.p, d_y.p, rows, lin, 0);
            else linear(L, d_x.p, d_y.p, rows, lin, 0);
            std::vector<double> ref((size_t)rows * N);
            for (int t = 0; t < rows; t++)
                for (int n = 0; n < N; n++) {
                    double acc = b[n] + (add ? y0[(size_t)t * N + n] : 0.0);
                    for (int k = 0; k < K; k++) acc += (double)w[(size_t)n * K + k] * x[(size_t)t * K + k];
                    ref[(size_t)t * N + n] = acc;
                }
            CHECK_CLOSE(compare(d_y.download(), ref), 1e-5);
        }
}

// ---- sampling ----

TEST_CASE("greedy: argmax with torch's tie rule, and the repetition penalty moves it") {
    GpuMemory mem;
    Rng r(9);
    int vocab = 151936;
    Sampler s = sampler_create(vocab, mem, 0);
    auto logits = random_floats(vocab, r);
    logits[777] = 50.f;
    logits[100000] = 50.f;  // tie: the lower index wins
    logits[5] = 49.f;
    DeviceVec<float> d_l(logits);
    SamplingParams greedy;
    sample(s, greedy, d_l.p, 0);
    CHECK(DeviceVec<int>::download_one(s.d_token) == 777);
    // Penalise 777 and 100000 (seen): 50 / 1.1 = 45.5 < 49, so token 5 wins.
    std::vector<int> seen = {777, 100000};
    DeviceVec<int> d_seen(seen);
    sampler_mark_seen(s, d_seen.p, 2, 0);
    greedy.repetition_penalty = 1.1f;
    sample(s, greedy, d_l.p, 0);
    CHECK(DeviceVec<int>::download_one(s.d_token) == 5);
}

// The survivors and their probabilities, in descending order, as transformers' warpers define them.
static std::vector<std::pair<int, double>> filtered_ref(const std::vector<float>& logits, const SamplingParams& p) {
    int V = (int)logits.size();
    std::vector<int> idx(V);
    for (int i = 0; i < V; i++) idx[i] = i;
    std::vector<double> s(V);
    for (int i = 0; i < V; i++) s[i] = logits[i] / p.temperature;
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return s[a] > s[b]; });
    int K = p.top_k > 0 ? std::min(p.top_k, V) : V;
    double Z = 0;
    for (int i = 0; i < K; i++) Z += std::exp(s[idx[i]] - s[idx[0]]);
    int n = 0;
    double before = 0;
    while (n < K) {
        double pr = std::exp(s[idx[n]] - s[idx[0]]) / Z;
        if (p.top_p < 1 && before >= p.top_p) break;
        if (pr * Z < p.min_p) break;  // p_i / p_max < min_p
        before += pr;
        n++;
    }
    n = std::max(n, 1);
    double S = 0;
    for (int i = 0; i < n; i++) S += std::exp(s[idx[i]] - s[idx[0]]);
    std::vector<std::pair<int, double>> out;
    for (int i = 0; i < n; i++) out.push_back({idx[i], std::exp(s[idx[i]] - s[idx[0]]) / S});
    return out;
}

TEST_CASE("sampling: top-k / top-p / min-p survivors and draw frequencies match the reference; seeds reproduce") {
    GpuMemory mem;
    Rng r(10);
    int vocab = 1000;
    Sampler s = sampler_create(vocab, mem, 0);
    auto logits = random_floats(vocab, r, 2.f);
    DeviceVec<float> d_l(logits);
    std::vector<SamplingParams> cases(4);
    cases[0].temperature = 0.7f, cases[0].top_k = 50, cases[0].top_p = 0.9f, cases[0].min_p = 0.05f;
    cases[1].temperature = 1.5f, cases[1].top_k = 0, cases[1].top_p = 1.f, cases[1].min_p = 0.f;
    cases[2].temperature = 1.f, cases[2].top_k = 5;
    cases[3].temperature = 0.5f, cases[3].top_p = 0.5f;
    for (size_t ci = 0; ci < cases.size(); ci++) {
        CAPTURE(ci);
        SamplingParams p = cases[ci];
        p.seed = 42 + ci;
        auto ref = filtered_ref(logits, p);
        std::map<int, double> want;
        for (auto& kv : ref) want[kv.first] = kv.second;
        sampler_reset(s, 0);
        const int draws = 20000;
        std::map<int, int> got;
        std::vector<int> first_run;
        for (int i = 0; i < draws; i++) {
            sample(s, p, d_l.p, 0);
            int tok = DeviceVec<int>::download_one(s.d_token);
            got[tok]++;
            if (i < 50) first_run.push_back(tok);
            if (i == 0) CHECK(DeviceVec<int>::download_one(s.d_kept) == (int)ref.size());
        }
        size_t outside = 0;
        double worst = 0;
        for (auto& kv : got) outside += want.count(kv.first) ? 0 : kv.second;
        for (auto& kv : want) worst = std::max(worst, std::fabs(got[kv.first] / (double)draws - kv.second));
        CHECK(outside == 0);
        CHECK_MESSAGE(worst < 0.02, "largest frequency error ", worst);
        // Same seed and step counter: the same tokens again.
        sampler_reset(s, 0);
        std::vector<int> again;
        for (int i = 0; i < 50; i++) {
            sample(s, p, d_l.p, 0);
            again.push_back(DeviceVec<int>::download_one(s.d_token));
        }
        CHECK(again == first_run);
    }
}

// Greedy choices under repetition, presence and frequency penalties, step after step, against a CPU reference that
// counts the generated tokens; the same through sample() at top-k 1, and through a BatchSampler slot restarted with
// generated tokens behind it (preemption).
TEST_CASE("penalties: repetition over prompt and output, presence and frequency over the generated tokens") {
    GpuMemory mem;
    Rng r(23);
    const int vocab = 3000, steps = 40;
    auto logits = random_floats(vocab, r, 1.f);
    for (int i = 0; i < 12; i++) logits[(i * 241) % vocab] = 4.f + 0.137f * (float)i;  // a dozen strong candidates (no penalty
                                                                                          // sum lands on a spacing: no ties)
    DeviceVec<float> d_l(logits);
    std::vector<int> prompt = {241, 482, 7, 2891};
    DeviceVec<int> d_prompt(prompt);
    struct Case {
        float rep, presence, frequency, temperature;
        int top_k;
    } cases[] = {{1.f, 0.7f, 0.f, 0.f, 0}, {1.f, 0.f, 0.45f, 0.f, 0}, {1.3f, 0.3f, 0.2f, 0.f, 0}, {1.f, 0.2f, 0.35f, 1.f, 1}, {1.f, -0.5f, 0.f, 0.f, 0}};
    for (const Case& c : cases) {
        CAPTURE(c.presence);
        CAPTURE(c.frequency);
        SamplingParams p;
        p.repetition_penalty = c.rep, p.presence_penalty = c.presence, p.frequency_penalty = c.frequency;
        p.temperature = c.temperature, p.top_k = c.top_k, p.seed = 5;
        // Reference: counts of generated tokens, prompt marks.
        std::vector<int> count(vocab, 0), want;
        std::vector<bool> in_prompt(vocab, false);
        for (int t : prompt) in_prompt[t] = true;
        for (int s = 0; s < steps; s++) {
            int best = -1;
            double bv = -1e30;
            for (int i = 0; i < vocab; i++) {
                double l = logits[i];
                if (c.rep != 1.f && (in_prompt[i] || count[i])) l = l > 0 ? l / c.rep : l * c.rep;
                if (count[i]) l -= c.presence + c.frequency * count[i];
                if (l > bv) bv = l, best = i;
            }
            want.push_back(best);
            count[best]++;
        }
        Sampler smp = sampler_create(vocab, mem, 0);
        sampler_mark_seen(smp, d_prompt.p, (int)prompt.size(), 0);
        std::vector<int> got;
        for (int s = 0; s < steps; s++) {
            sample(smp, p, d_l.p, 0);
            got.push_back(DeviceVec<int>::download_one(smp.d_token));
        }
        CHECK(got == want);
        std::set<int> distinct(want.begin(), want.end());
        if (c.presence > 0 || c.frequency > 0) CHECK(distinct.size() > 3);  // the penalties move the choice around
        // The batched sampler, restarted after 15 generated tokens: the rest must follow the same path.
        BatchSampler b = batch_sampler_create(vocab, 3, 2, mem, 0);
        std::vector<int> start = prompt;
        start.insert(start.end(), want.begin(), want.begin() + 15);
        DeviceVec<int> d_start(start);
        batch_sampler_start(b, 2, d_start.p, (int)start.size(), 15, 0);
        Sampler row = batch_sampler_row(b, 2, 1);
        std::vector<int> rest;
        for (int s = 15; s < steps; s++) {
            sample(row, p, d_l.p, 0);
            rest.push_back(DeviceVec<int>::download_one(b.tokens + 1));
        }
        CHECK(rest == std::vector<int>(want.begin() + 15, want.end()));
    }
}

// argmax_rows (the batched core's greedy rows): each row's first maximum and the gap to its runner-up, against the
// CPU, for few rows (a row cut into up to 32 pieces, merged by a second launch) and many (a block a row), at
// Qwen3's vocabulary and at awkward small ones. Planted: a maximum tied across two pieces (lowest index wins, gap 0),
// a runner-up in another piece than the winner, the winner and runner-up in one piece, a row of one value.
TEST_CASE("argmax_rows: first maximum and top-2 gap per row, few rows in pieces and many rows whole") {
    GpuMemory mem;
    Rng r(41);
    for (int vocab : {151936, 4097, 1000, 5}) {
        for (int n : {1, 2, 3, 7, 64, 200}) {
            CAPTURE(vocab);
            CAPTURE(n);
            std::vector<float> x = random_floats((size_t)n * vocab, r, 2.f);
            for (int row = 0; row < n; row++) {
                float* v = x.data() + (size_t)row * vocab;
                const int a = r.uniform_int(0, vocab - 1), b = r.uniform_int(0, vocab - 1);
                switch (row % 4) {
                    case 0: v[a] = 50.f, v[b] = 50.f; break;                // a tie (a == b: one maximum, runner-up random)
                    case 1: v[a] = 50.f, v[b] = a == b ? 50.f : 49.5f; break;  // runner-up anywhere
                    case 2: v[a] = 50.f, v[std::min(vocab - 1, a + 1)] = a + 1 < vocab ? 49.75f : 50.f; break;  // neighbours
                    default: for (int i = 0; i < vocab; i++) v[i] = 3.f;     // all equal: index 0, gap 0
                }
            }
            DeviceVec<float> d(x);
            BatchSampler bs = batch_sampler_create(vocab, 1, 200, mem, 0);
            CUDA_CHECK(cudaMemset(bs.tokens, 0xFF, 2 * 200 * sizeof(int)));  // tokens and gaps poisoned
            argmax_rows(bs, d.p, n, 0);
            CUDA_CHECK(cudaDeviceSynchronize());
            std::vector<int> tok(n);
            std::vector<float> gap(n);
            CUDA_CHECK(cudaMemcpy(tok.data(), bs.tokens, n * sizeof(int), cudaMemcpyDeviceToHost));
            CUDA_CHECK(cudaMemcpy(gap.data(), bs.gaps, n * sizeof(float), cudaMemcpyDeviceToHost));
            for (int row = 0; row < n; row++) {
                CAPTURE(row);
                const float* v = x.data() + (size_t)row * vocab;
                int best = 0;
                for (int i = 1; i < vocab; i++)
                    if (v[i] > v[best]) best = i;
                float runner = -INFINITY;
                for (int i = 0; i < vocab; i++)
                    if (i != best) runner = std::max(runner, v[i]);
                CHECK(tok[row] == best);
                if (vocab > 1) CHECK(gap[row] == v[best] - runner);
            }
        }
    }
}
