// KV eviction (ops/h2o.cuh) against plain CPU references: what the attention kernels record for it, the sums
// it accumulates, which rows it evicts and where the kept ones go, and attention through an evicting cache.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "gpu_util.cuh"
#include "runtime/attention_layer.cuh"

using namespace monocu;
using namespace monocu_test;

namespace {

// One layer and slot of an H2O state with its cache, for the kernels' tests.
struct H2oRig {
    GpuMemory mem;
    H2o h;
    KvCache kv;
    H2oRig(KvType t, int budget, int window, int n_heads, int n_kv, int hd, int max_tokens) {
        int rows = budget + max_tokens;
        h = h2o_create(KvEviction{budget, window}, 1, 1, n_heads, n_kv, rows, max_tokens, mem);
        kv = kv_cache_create(t, 1, n_kv, rows, hd, mem);
    }
    template <class T>
    std::vector<T> get(const T* p, size_t n) {
        std::vector<T> v(n);
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
        return v;
    }
    template <class T>
    void put(T* p, const std::vector<T>& v) { CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice)); }
};

}  // namespace

TEST_CASE("h2o eviction: the least-attended rows outside the window go (ties to the lower row), kept rows fill the holes below the budget intact") {
    Rng r(41);
    struct Case { int budget, window, T, p0; bool ties; };
    for (KvType kt : {KvType::BF16, KvType::FP8})
        for (Case c : {Case{50, 10, 1, 70, false}, Case{50, 10, 1, 50, true}, Case{50, 10, 7, 200, true}, Case{50, 10, 64, 45, false},
                       Case{50, 50, 5, 80, false}, Case{50, 1, 64, 300, true}, Case{3000, 700, 500, 5000, true}, Case{3000, 100, 300, 2900, false}}) {
            const int nkv = 3, hd = 64, nh = nkv * 2;
            CAPTURE((int)kt);
            CAPTURE(c.budget);
            CAPTURE(c.window);
            CAPTURE(c.T);
            CAPTURE(c.p0);
            H2oRig rig(kt, c.budget, c.window, nh, nkv, hd, std::max(c.T, 8));
            const int rows = rig.h.rows, row0 = std::min(c.p0, c.budget), n = row0 + c.T, last = c.p0 + c.T - 1;
            const size_t eb = kt == KvType::FP8 ? 1 : 2, row_bytes = hd * eb;
            // Rows 0 .. row0 - 1: distinct earlier positions in a shuffled order; then the pass's own, in order.
            std::vector<float> acc((size_t)nkv * rows, -1.f);
            std::vector<int> pos((size_t)nkv * rows, -1);
            for (int kvh = 0; kvh < nkv; kvh++) {
                std::vector<int> earlier(c.p0);
                std::iota(earlier.begin(), earlier.end(), 0);
                std::shuffle(earlier.begin(), earlier.end(), r.g);
                for (int i = 0; i < n; i++) {
                    pos[(size_t)kvh * rows + i] = i < row0 ? earlier[i] : c.p0 + i - row0;
                    acc[(size_t)kvh * rows + i] = c.ties ? 0.5f * r.uniform_int(0, 3) : std::fabs(r.normal(3.f));
                }
            }
            std::vector<uint8_t> kraw((size_t)nkv * rows * row_bytes), vraw(kraw.size());
            for (auto& b : kraw) b = (uint8_t)r.uniform_int(0, 255);
            for (auto& b : vraw) b = (uint8_t)r.uniform_int(0, 255);
            std::vector<float> ks((size_t)nkv * rows), vs(ks.size());
            for (auto& x : ks) x = r.normal();
            for (auto& x : vs) x = r.normal();
            rig.put(rig.h.acc, acc);
            rig.put(rig.h.row_pos, pos);
            rig.put(static_cast<uint8_t*>(rig.kv.layer(0).k), kraw);
            rig.put(static_cast<uint8_t*>(rig.kv.layer(0).v), vraw);
            if (kt == KvType::FP8) rig.put(rig.kv.layer(0).k_scale, ks), rig.put(rig.kv.layer(0).v_scale, vs);
            DeviceVec<int> d_pos(std::vector<int>{c.p0});
            h2o_evict_kernel<<<nkv, kH2oThreads>>>(rig.h, 0, 0, rig.kv.layer(0), (int)row_bytes, rows, d_pos.p, c.T, false);
            LAUNCH_CHECK();
            auto acc2 = rig.get(rig.h.acc, acc.size());
            auto pos2 = rig.get(rig.h.row_pos, pos.size());
            auto k2 = rig.get(static_cast<uint8_t*>(rig.kv.layer(0).k), kraw.size());
            auto v2 = rig.get(static_cast<uint8_t*>(rig.kv.layer(0).v), vraw.size());
            std::vector<float> ks2, vs2;
            if (kt == KvType::FP8) ks2 = rig.get(rig.kv.layer(0).k_scale, ks.size()), vs2 = rig.get(rig.kv.layer(0).v_scale, vs.size());
            size_t wrong = 0;
            for (int kvh = 0; kvh < nkv; kvh++) {
                // The reference: evict the n - budget eligible rows of least (sum, row); holes below the budget, in
                // row order, take the kept rows above it, in row order.
                std::vector<int> order;
                for (int i = 0; i < n; i++)
                    if (pos[(size_t)kvh * rows + i] <= last - c.window) order.push_back(i);
                std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return acc[(size_t)kvh * rows + a] < acc[(size_t)kvh * rows + b]; });
                std::vector<bool> victim(n, false);
                int e = std::max(0, n - c.budget);
                REQUIRE((int)order.size() >= e);
                for (int i = 0; i < e; i++) victim[order[i]] = true;
                std::vector<int> holes, fillers, expect(n);
                std::iota(expect.begin(), expect.end(), 0);  // expect[row] = the original row it now holds
                for (int i = 0; i < std::min(n, c.budget); i++)
                    if (victim[i]) holes.push_back(i);
                for (int i = c.budget; i < n; i++)
                    if (!victim[i]) fillers.push_back(i);
                REQUIRE(holes.size() == fillers.size());
                for (size_t i = 0; i < holes.size(); i++) expect[holes[i]] = fillers[i];
                for (int i = 0; i < std::min(n, c.budget); i++) {
                    size_t at = (size_t)kvh * rows + i, from = (size_t)kvh * rows + expect[i];
                    bool same = acc2[at] == acc[from] && pos2[at] == pos[from] &&
                                std::memcmp(&k2[at * row_bytes], &kraw[from * row_bytes], row_bytes) == 0 &&
                                std::memcmp(&v2[at * row_bytes], &vraw[from * row_bytes], row_bytes) == 0;
                    if (kt == KvType::FP8) same = same && ks2[at] == ks[from] && vs2[at] == vs[from];
                    wrong += !same;
                }
                // Every cached position of the window is kept (the setup caches a random subset of the earlier ones).
                std::vector<int> kept(pos2.begin() + (size_t)kvh * rows, pos2.begin() + (size_t)kvh * rows + std::min(n, c.budget));
                std::sort(kept.begin(), kept.end());
                for (int i = 0; i < n; i++) {
                    int p = pos[(size_t)kvh * rows + i];
                    if (p > last - c.window) wrong += !std::binary_search(kept.begin(), kept.end(), p);
                }
            }
            CHECK(wrong == 0);
        }
}

TEST_CASE("h2o decode step: each row's sum gains its probability over the G query heads, the new row starts at 0 with its position") {
    Rng r(42);
    for (int G : {1, 3, 8})
        for (int p0 : {5, 49, 50, 300}) {
            const int nkv = 2, nh = nkv * G, hd = 128, budget = 50, window = 20;
            CAPTURE(G);
            CAPTURE(p0);
            H2oRig rig(KvType::BF16, budget, window, nh, nkv, hd, 4);
            const int rows = rig.h.rows, at = std::min(p0, budget), n = at + 1;
            std::vector<float> acc((size_t)nkv * rows, 0.f), scores((size_t)nh * rows, 0.f);
            std::vector<int> pos((size_t)nkv * rows, -1);
            std::vector<float2> stats(nh);
            for (int kvh = 0; kvh < nkv; kvh++)
                for (int i = 0; i < at; i++) acc[(size_t)kvh * rows + i] = std::fabs(r.normal()), pos[(size_t)kvh * rows + i] = p0 - at + i;
            std::vector<double> want(acc.begin(), acc.end());
            for (int h = 0; h < nh; h++) {
                double mx = -1e30, sum = 0;
                for (int i = 0; i < n; i++) mx = std::max(mx, (double)(scores[(size_t)h * rows + i] = r.normal(4.f)));
                for (int i = 0; i < n; i++) sum += std::exp2(scores[(size_t)h * rows + i] - mx);
                stats[h] = make_float2((float)mx, (float)sum);
                for (int i = 0; i < n; i++) {
                    size_t cell = (size_t)(h / G) * rows + i;
                    if (i == at && h % G == 0) want[cell] = 0;
                    want[cell] += std::exp2(scores[(size_t)h * rows + i] - mx) / sum;
                }
            }
            rig.put(rig.h.acc, acc);
            rig.put(rig.h.row_pos, pos);
            rig.put(rig.h.scores, scores);
            rig.put(rig.h.stats, stats);
            DeviceVec<int> d_pos(std::vector<int>{p0});
            h2o_after_decode(rig.h, 0, 0, KvType::BF16, rig.kv.layer(0), hd, rows, d_pos.p, 0);
            auto acc2 = rig.get(rig.h.acc, acc.size());
            auto pos2 = rig.get(rig.h.row_pos, pos.size());
            if (n <= budget) {  // nothing evicted: every sum where it was
                std::vector<float> got;
                std::vector<double> ref;
                for (int kvh = 0; kvh < nkv; kvh++)
                    for (int i = 0; i < n; i++) got.push_back(acc2[(size_t)kvh * rows + i]), ref.push_back(want[(size_t)kvh * rows + i]);
                CHECK_CLOSE(compare(got, ref), 1e-6);
                for (int kvh = 0; kvh < nkv; kvh++) CHECK(pos2[(size_t)kvh * rows + at] == p0);
            } else {  // one evicted: the new row took its place; every other sum stays in its row
                for (int kvh = 0; kvh < nkv; kvh++) {
                    int moved = -1;
                    for (int i = 0; i < budget; i++)
                        if (pos2[(size_t)kvh * rows + i] == p0) moved = i;
                    REQUIRE(moved >= 0);
                    CHECK(std::fabs(acc2[(size_t)kvh * rows + moved] - want[(size_t)kvh * rows + at]) < 1e-5);
                    int lowest = -1;  // the eligible row of least sum (the new one is in the window)
                    for (int i = 0; i < at; i++)
                        if (pos[(size_t)kvh * rows + i] <= p0 - window &&
                            (lowest < 0 || want[(size_t)kvh * rows + i] < want[(size_t)kvh * rows + lowest]))
                            lowest = i;
                    CHECK(moved == lowest);
                    for (int i = 0; i < budget; i++)
                        if (i != moved) CHECK(std::fabs(acc2[(size_t)kvh * rows + i] - want[(size_t)kvh * rows + i]) < 1e-5);
                }
            }
        }
}

// softmax statistics and probabilities in log2 units, as the kernels keep them: s = q.k log2(e) / sqrt(d).
static double score_log2(const float* q, const float* k, int hd) {
    double d = 0;
    for (int i = 0; i < hd; i++) d += (double)q[i] * k[i];
    return d / std::sqrt((double)hd) * 1.4426950408889634;
}

TEST_CASE("flash-decoding records every key's score and each head's softmax (max, sum) for eviction, output unchanged") {
    Rng r(43);
    GpuMemory mem;
    for (KvType kt : {KvType::BF16, KvType::FP8})
        for (int len : {1, 70, 1000}) {
            const int nkv = 2, G = 4, nh = nkv * G, hd = 128, ctx = len + 3;
            CAPTURE((int)kt);
            CAPTURE(len);
            auto q = random_floats((size_t)nh * hd, r, 1.5f);
            for (auto& x : q) x = round_to_bf16(x);
            auto kf = random_floats((size_t)nkv * ctx * hd, r, 1.5f), vf = random_floats((size_t)nkv * ctx * hd, r);
            // The cache holds bf16 (or e4m3 times a row scale): the reference reads what it holds.
            std::vector<uint8_t> kraw, vraw;
            std::vector<float> ksc((size_t)nkv * ctx, 1.f), vsc(ksc.size(), 1.f);
            if (kt == KvType::BF16) {
                kraw.resize(kf.size() * 2), vraw.resize(vf.size() * 2);
                for (size_t i = 0; i < kf.size(); i++) {
                    uint16_t a = float_to_bf16_bits(kf[i]), b = float_to_bf16_bits(vf[i]);
                    std::memcpy(&kraw[2 * i], &a, 2), std::memcpy(&vraw[2 * i], &b, 2);
                    kf[i] = bf16_bits_to_float(a), vf[i] = bf16_bits_to_float(b);
                }
            } else {
                kraw.resize(kf.size()), vraw.resize(vf.size());
                for (size_t row = 0; row < ksc.size(); row++)
                    for (auto* pr : {&kf, &vf}) {
                        std::vector<float>& x = *pr;
                        float amax = 0;
                        for (int i = 0; i < hd; i++) amax = std::max(amax, std::fabs(x[row * hd + i]));
                        float s = amax / 448.f;
                        (pr == &kf ? ksc : vsc)[row] = s;
                        for (int i = 0; i < hd; i++) {
                            uint8_t code = float_to_e4m3(x[row * hd + i] / s);
                            (pr == &kf ? kraw : vraw)[row * hd + i] = code;
                            x[row * hd + i] = e4m3_to_float(code) * s;
                        }
                    }
            }
            DeviceVec<uint8_t> dk(kraw), dv(vraw);
            DeviceVec<float> dks(ksc), dvs(vsc), scores((size_t)nh * ctx);
            DeviceVec<float2> stats(nh);
            DeviceVec<bf16> d_q(to_bf16(q)), out((size_t)nh * hd);
            DeviceVec<int> d_pos(std::vector<int>{len - 1});
            KvLayer L{dk.p, dv.p, kt == KvType::FP8 ? dks.p : nullptr, kt == KvType::FP8 ? dvs.p : nullptr};
            FlashDecode fd = flash_decode_plan(nh, nkv, hd, ctx, mem);
            AttnParams ap;
            ap.h2o_scores = scores.p, ap.h2o_stats = stats.p;
            flash_decode(fd, d_q.p, kt, L, d_pos.p, out.p, 0, ap);
            auto got_s = scores.download();
            auto got_st = stats.download();
            std::vector<float> gs, gm, gl;
            std::vector<double> rs, rm, rl;
            for (int h = 0; h < nh; h++) {
                double mx = -1e300, sum = 0;
                std::vector<double> s(len);
                for (int j = 0; j < len; j++) {
                    s[j] = score_log2(&q[(size_t)h * hd], &kf[((size_t)(h / G) * ctx + j) * hd], hd);
                    mx = std::max(mx, s[j]);
                    gs.push_back(got_s[(size_t)h * ctx + j]), rs.push_back(s[j]);
                }
                for (int j = 0; j < len; j++) sum += std::exp2(s[j] - mx);
                gm.push_back(got_st[h].x), rm.push_back(mx), gl.push_back(got_st[h].y), rl.push_back(sum);
            }
            CHECK_CLOSE(compare(gs, rs), kt == KvType::FP8 ? 5e-3 : 2e-3);
            CHECK_CLOSE(compare(gm, rm), kt == KvType::FP8 ? 5e-3 : 2e-3);
            CHECK_CLOSE(compare(gl, rl), 1e-2);
        }
}

TEST_CASE("prefill attention's softmax (max, sum) per query, and h2o_prefill_accumulate's column sums, against the reference") {
    Rng r(44);
    for (KvType kt : {KvType::BF16, KvType::FP8, KvType::F16})
        for (int hd : {64, 128})
            for (int p0 : {0, 30, 200}) {
                const int nkv = 2, G = 3, nh = nkv * G, T = 77, budget = 100, window = 10;
                if (kt == KvType::F16 && p0) continue;  // the fp16 copy is the chunk at position 0
                CAPTURE((int)kt);
                CAPTURE(hd);
                CAPTURE(p0);
                H2oRig rig(kt == KvType::F16 ? KvType::BF16 : kt, budget, window, nh, nkv, hd, T);
                const int rows = rig.h.rows, row0 = std::min(p0, budget), n = row0 + T;
                auto q = round_to_half(random_floats((size_t)T * nh * hd, r, 1.2f));
                std::vector<float> kx = random_floats((size_t)nkv * rows * hd, r, 1.2f), vx = random_floats(kx.size(), r);
                std::vector<uint8_t> kraw((size_t)nkv * rows * hd * (kt == KvType::FP8 ? 1 : 2)), vraw(kraw.size());
                std::vector<float> ksc((size_t)nkv * rows, 1.f), vsc(ksc.size(), 1.f);
                for (size_t row = 0; row < ksc.size(); row++)
                    for (int which = 0; which < 2; which++) {
                        float* x = &(which ? vx : kx)[row * hd];
                        float amax = 0;
                        for (int i = 0; i < hd; i++) amax = std::max(amax, std::fabs(x[i]));
                        for (int i = 0; i < hd; i++) {
                            size_t e = row * hd + i;
                            if (kt == KvType::FP8) {
                                float s = amax / 448.f;
                                (which ? vsc : ksc)[row] = s;
                                uint8_t code = float_to_e4m3(x[i] / s);
                                (which ? vraw : kraw)[e] = code;
                                x[i] = e4m3_to_float(code) * s;
                            } else {
                                uint16_t b = kt == KvType::BF16 ? float_to_bf16_bits(x[i]) : static_cast<__half_raw>(__float2half_rn(x[i])).x;
                                std::memcpy(&(which ? vraw : kraw)[2 * e], &b, 2);
                                x[i] = kt == KvType::BF16 ? bf16_bits_to_float(b) : f16_bits_to_float(b);
                            }
                        }
                    }
                DeviceVec<uint8_t> dk(kraw), dv(vraw);
                DeviceVec<float> dks(ksc), dvs(vsc);
                KvLayer L{dk.p, dv.p, kt == KvType::FP8 ? dks.p : nullptr, kt == KvType::FP8 ? dvs.p : nullptr};
                DeviceVec<__half> d_q(to_half(q));
                DeviceVec<bf16> out((size_t)T * nh * hd);
                DeviceVec<int> d_pos(std::vector<int>{p0});
                AttnParams ap;
                ap.kv_budget = budget, ap.h2o_stats = rig.h.stats;
                prefill_attention(d_q.p, kt, L, d_pos.p, out.p, T, nh, nkv, hd, rows, ap, 0);
                // Older rows' sums start from a value; the pass's rows from 0.
                std::vector<float> acc0((size_t)nkv * rows, 0.f);
                for (auto& x : acc0) x = std::fabs(r.normal());
                rig.put(rig.h.acc, acc0);
                if (hd == 64) h2o_prefill_accumulate_launch<64>(rig.h, 0, 0, d_q.p, kt, L, rows, d_pos.p, n, T, 0);
                else h2o_prefill_accumulate_launch<128>(rig.h, 0, 0, d_q.p, kt, L, rows, d_pos.p, n, T, 0);
                auto st = rig.get(rig.h.stats, (size_t)T * nh);
                auto acc = rig.get(rig.h.acc, acc0.size());
                auto rpos = rig.get(rig.h.row_pos, acc0.size());
                std::vector<float> gm, gl, ga;
                std::vector<double> rm, rl, ra;
                std::vector<double> col((size_t)nkv * rows, 0.0);
                for (int t = 0; t < T; t++)
                    for (int h = 0; h < nh; h++) {
                        int kvh = h / G, seen = row0 + t + 1;
                        std::vector<double> s(seen);
                        double mx = -1e300, sum = 0;
                        for (int j = 0; j < seen; j++)
                            mx = std::max(mx, s[j] = score_log2(&q[((size_t)t * nh + h) * hd], &kx[((size_t)kvh * rows + j) * hd], hd));
                        for (int j = 0; j < seen; j++) sum += std::exp2(s[j] - mx);
                        for (int j = 0; j < seen; j++) col[(size_t)kvh * rows + j] += std::exp2(s[j] - mx) / sum;
                        gm.push_back(st[(size_t)t * nh + h].x), rm.push_back(mx);
                        gl.push_back(st[(size_t)t * nh + h].y), rl.push_back(sum);
                    }
                size_t wrong_pos = 0;
                for (int kvh = 0; kvh < nkv; kvh++)
                    for (int j = 0; j < n; j++) {
                        size_t cell = (size_t)kvh * rows + j;
                        ga.push_back(acc[cell]), ra.push_back((j >= row0 ? 0.0 : acc0[cell]) + col[cell]);
                        if (j >= row0) wrong_pos += rpos[cell] != p0 + j - row0;
                    }
                CHECK_CLOSE(compare(gm, rm), 5e-3);
                CHECK_CLOSE(compare(gl, rl), 2e-2);
                CHECK_CLOSE(compare(ga, ra), 2e-2);
                CHECK(wrong_pos == 0);
            }
}

// Attention through the kit's layer (runtime/attention_layer.cuh) with raw q, k, v (no norm, no RoPE).
static std::vector<float> run_attention(Attention& a, const std::vector<float>& qkv, int T, int pos0, DeviceVec<int>& d_pos, int nh, int hd) {
    DeviceVec<float> d_qkv(qkv);
    DeviceVec<bf16> out((size_t)T * nh * hd);
    std::vector<int> pos(T);
    std::iota(pos.begin(), pos.end(), pos0);
    CUDA_CHECK(cudaMemcpy(d_pos.p, pos.data(), T * sizeof(int), cudaMemcpyHostToDevice));
    Batch b;
    b.n_tokens = T, b.pos = d_pos.p, b.pos0 = T == 1 ? -1 : pos0;
    AttnLayer L;
    attention(a, L, 0, d_qkv.p, b, out.p, 0);
    return from_bf16(out.download());
}

TEST_CASE("attention through an evicting cache: window = budget decodes as a sliding window of budget + 1; a later chunk sees the budget's newest") {
    Rng r(45);
    for (KvType kt : {KvType::BF16, KvType::FP8}) {
        const int nkv = 2, G = 4, nh = nkv * G, hd = 64, budget = 40, ctx = 400, chunk = 50, row = (nh + 2 * nkv) * hd;
        CAPTURE((int)kt);
        GpuMemory mem;
        AttnSpec spec{1, nh, nkv, hd, 1e-6f};
        Attention evicting = attention_create(spec, kt, ctx, 1, chunk, true, mem, KvEviction{budget, budget});
        Attention full = attention_create(spec, kt, ctx, 1, chunk, true, mem);
        REQUIRE(evicting.h2o.on());
        CHECK(evicting.kv.ctx == budget + chunk);
        DeviceVec<int> d_pos(chunk);
        // A 30-token prompt, then decode steps to position 150: every output as the sliding window's.
        auto prompt = random_floats((size_t)30 * row, r, 1.5f);
        auto a = run_attention(evicting, prompt, 30, 0, d_pos, nh, hd);
        auto b = run_attention(full, prompt, 30, 0, d_pos, nh, hd);
        std::vector<double> bd(b.begin(), b.end());
        // The same attention, but not always the same kernel: the evicting cache's prefill records softmax statistics,
        // which only the portable kernel does, while the full one may take Hopper's (attention_sm90.cuh): their bf16
        // outputs may differ by a rounding (3.9e-4 seen on an H100).
        CHECK_CLOSE(compare(a, bd), prefill_attention_sm90_fits(kt, hd, AttnParams{}, 30, KvLayer{}) ? 2e-3 : 1e-6);
        AttnLayer windowed;
        windowed.params.window = budget + 1;
        double worst = 0;
        for (int p = 30; p < 150; p++) {
            auto x = random_floats(row, r, 1.5f);
            auto got = run_attention(evicting, x, 1, p, d_pos, nh, hd);
            DeviceVec<float> d_qkv(x);
            DeviceVec<bf16> out((size_t)nh * hd);
            Batch bb;
            bb.n_tokens = 1, bb.pos = d_pos.p, bb.pos0 = -1;
            attention(full, windowed, 0, d_qkv.p, bb, out.p, 0);
            auto want = from_bf16(out.download());
            worst = std::max(worst, compare(got, std::vector<double>(want.begin(), want.end())).rel_l2);
        }
        CHECK(worst < 1e-2);  // the same keys summed in another order, bf16 outputs
        // A 50-token chunk at 150: token t sees the 40 newest before it (110 .. 149) and the chunk up to itself.
        auto x = random_floats((size_t)chunk * row, r, 1.5f);
        auto got = run_attention(evicting, x, chunk, 150, d_pos, nh, hd);
        // The reference: the full cache's rows 110 .. 149 as the full run wrote them, and the chunk's own.
        std::vector<float> ref_out((size_t)chunk * nh * hd);
        {
            auto kcache = std::vector<uint8_t>((size_t)nkv * ctx * hd * (kt == KvType::FP8 ? 1 : 2));
            CUDA_CHECK(cudaMemcpy(kcache.data(), full.kv.layer(0).k, kcache.size(), cudaMemcpyDeviceToHost));
            auto vcache = kcache;
            CUDA_CHECK(cudaMemcpy(vcache.data(), full.kv.layer(0).v, vcache.size(), cudaMemcpyDeviceToHost));
            std::vector<float> ksc((size_t)nkv * ctx, 1.f), vsc(ksc.size(), 1.f);
            if (kt == KvType::FP8) {
                CUDA_CHECK(cudaMemcpy(ksc.data(), full.kv.layer(0).k_scale, ksc.size() * 4, cudaMemcpyDeviceToHost));
                CUDA_CHECK(cudaMemcpy(vsc.data(), full.kv.layer(0).v_scale, vsc.size() * 4, cudaMemcpyDeviceToHost));
            }
            auto cached = [&](const std::vector<uint8_t>& raw, const std::vector<float>& sc, int kvh, int p, int i) -> double {
                size_t rr = (size_t)kvh * ctx + p;
                if (kt == KvType::FP8) return e4m3_to_float(raw[rr * hd + i]) * sc[rr];
                uint16_t bits;
                std::memcpy(&bits, &raw[(rr * hd + i) * 2], 2);
                return bf16_bits_to_float(bits);
            };
            auto rnd = [&](float v) -> double { return kt == KvType::FP8 ? v : round_to_bf16(v); };  // the chunk's rows, as cached
            std::vector<double> out_ref;
            for (int t = 0; t < chunk; t++)
                for (int h = 0; h < nh; h++) {
                    int kvh = h / G;
                    std::vector<double> s, w;
                    std::vector<std::vector<double>> vals;
                    auto add = [&](std::vector<double> k, std::vector<double> v) {
                        double d = 0;
                        for (int i = 0; i < hd; i++) d += (double)round_to_half(std::vector<float>{x[(size_t)t * row + h * hd + i]})[0] * k[i];
                        s.push_back(d / std::sqrt((double)hd));
                        vals.push_back(v);
                    };
                    for (int p = 110; p < 150; p++) {
                        std::vector<double> k(hd), v(hd);
                        for (int i = 0; i < hd; i++) k[i] = cached(kcache, ksc, kvh, p, i), v[i] = cached(vcache, vsc, kvh, p, i);
                        add(k, v);
                    }
                    for (int u = 0; u <= t; u++) {
                        std::vector<double> k(hd), v(hd);
                        for (int i = 0; i < hd; i++)
                            k[i] = rnd(x[(size_t)u * row + (nh + kvh) * hd + i]), v[i] = rnd(x[(size_t)u * row + (nh + nkv + kvh) * hd + i]);
                        add(k, v);
                    }
                    double mx = *std::max_element(s.begin(), s.end()), z = 0;
                    for (double& e : s) z += (e = std::exp(e - mx));
                    for (int i = 0; i < hd; i++) {
                        double o = 0;
                        for (size_t j = 0; j < s.size(); j++) o += s[j] / z * vals[j][i];
                        out_ref.push_back(o);
                    }
                }
            // FP8's chunk rows are rounded per row by the GPU (scale from the row's max): compare loosely there.
            CHECK_CLOSE(compare(got, out_ref), kt == KvType::FP8 ? 6e-2 : 1e-2);
        }
        // Eviction on a sliding-window layer is refused, said plainly.
        {
            DeviceVec<float> d_qkv((size_t)row);
            DeviceVec<bf16> out((size_t)nh * hd);
            Batch bb;
            bb.n_tokens = 1, bb.pos = d_pos.p, bb.pos0 = -1;
            CHECK_THROWS_AS(attention(evicting, windowed, 0, d_qkv.p, bb, out.p, 0), UserError);
        }
    }
}
