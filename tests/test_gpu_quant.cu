// Quantized weights on the GPU: quantizers bit-identical to the CPU reference (quant.h), dequantization,
// and the FP8 / INT4 / MXFP4 GEMV kernels against a CPU dot product over the dequantized weights.
#include <doctest/doctest.h>

#include "ops/gemv.cuh"
#include "gpu_util.cuh"
#include "ops/linear.cuh"
#include "runtime/moe_layer.cuh"
#include "ops/quant.cuh"
#include "host/mxfp4.h"

using namespace monocu;
using namespace monocu_test;

TEST_CASE("GPU quantizers produce the same bits as quant.h (what tools/quantize writes)") {
    Rng r(11);
    int N = 37, K = 1024;
    auto w = random_bf16_values((size_t)N * K, r, 0.03f);
    for (int n = 0; n < N; n += 5) w[(size_t)n * K + 7 * n] = round_to_bf16(0.5f + n * 0.01f);  // outliers
    for (int k = 0; k < K; k++) w[(size_t)3 * K + k] = 0.f;  // an all-zero row
    DeviceVec<bf16> d_w(to_bf16(w));
    DeviceVec<uint8_t> d_q((size_t)N * K), d_p((size_t)N * K / 2);
    DeviceVec<float> d_s((size_t)N * K / kFp8Block);
    DeviceVec<bf16> d_gs((size_t)N * K / kInt4Group);
    quantize_fp8(d_w.p, d_q.p, d_s.p, N, K, 0);
    quantize_int4_g128(d_w.p, d_p.p, d_gs.p, N, K, 0);
    auto q = d_q.download(), p = d_p.download();
    auto s = d_s.download();
    auto gs = d_gs.download();
    size_t fp8_diff = 0, int4_diff = 0;
    std::vector<uint8_t> cq(K), cp(K / 2);
    std::vector<uint16_t> cgs(K / kInt4Group);
    std::vector<float> cs(K / kFp8Block);
    for (int n = 0; n < N; n++) {
        quantize_fp8_row(&w[(size_t)n * K], K, cq.data(), cs.data());
        for (int b = 0; b < K / kFp8Block; b++) fp8_diff += cs[b] != s[(size_t)n * (K / kFp8Block) + b];
        for (int k = 0; k < K; k++) fp8_diff += cq[k] != q[(size_t)n * K + k];
        quantize_int4_row(&w[(size_t)n * K], K, cp.data(), cgs.data());
        for (int k = 0; k < K / 2; k++) int4_diff += cp[k] != p[(size_t)n * K / 2 + k];
        for (int g = 0; g < K / kInt4Group; g++) int4_diff += cgs[g] != static_cast<__nv_bfloat16_raw>(gs[(size_t)n * K / kInt4Group + g]).x;
    }
    CHECK(fp8_diff == 0);
    CHECK(int4_diff == 0);
}

// Host-side Linear of a given format from float weights (bf16-rounded), plus its dequantized values.
struct HostLinear {
    std::vector<float> deq;  // what the quantized weights represent
    std::unique_ptr<DeviceVec<uint8_t>> w;
    std::unique_ptr<DeviceVec<float>> fscale;
    std::unique_ptr<DeviceVec<bf16>> bscale;
    Linear L;
};

static HostLinear make_linear(WFormat fmt, const std::vector<float>& w, int N, int K, int kblock) {
    HostLinear h;
    h.L.N = N, h.L.K = K, h.L.fmt = fmt, h.L.kblock = kblock;
    h.deq.resize(w.size());
    if (fmt == WFormat::FP8) {
        int n_kb = K / kblock;
        std::vector<uint8_t> q((size_t)N * K);
        std::vector<float> sc((size_t)N * n_kb);
        for (int n = 0; n < N; n++)
            for (int b = 0; b < n_kb; b++) {
                size_t off = (size_t)n * K + (size_t)b * kblock;
                quantize_fp8_block(&w[off], kblock, &q[off], &sc[(size_t)n * n_kb + b]);
                for (int k = 0; k < kblock; k++) h.deq[off + k] = e4m3_to_float(q[off + k]) * sc[(size_t)n * n_kb + b];
            }
        h.w = std::make_unique<DeviceVec<uint8_t>>(q);
        h.fscale = std::make_unique<DeviceVec<float>>(sc);
        h.L.w = h.w->p, h.L.scale = h.fscale->p;
    } else {
        std::vector<uint8_t> p((size_t)N * K / 2);
        std::vector<uint16_t> sc((size_t)N * K / kInt4Group);
        for (int n = 0; n < N; n++) {
            quantize_int4_row(&w[(size_t)n * K], K, &p[(size_t)n * K / 2], &sc[(size_t)n * K / kInt4Group]);
            for (int k = 0; k < K; k++) h.deq[(size_t)n * K + k] = int4_dequant(&p[(size_t)n * K / 2], &sc[(size_t)n * K / kInt4Group], k);
        }
        std::vector<bf16> scb(sc.size());
        for (size_t i = 0; i < sc.size(); i++) {
            __nv_bfloat16_raw raw;
            raw.x = sc[i];
            scb[i] = bf16(raw);
        }
        h.w = std::make_unique<DeviceVec<uint8_t>>(p);
        h.bscale = std::make_unique<DeviceVec<bf16>>(scb);
        h.L.w = h.w->p, h.L.scale = h.bscale->p;
    }
    return h;
}

static std::vector<double> dot_ref(const std::vector<float>& W, const std::vector<float>& x, int N, int K) {
    std::vector<double> y(N);
    for (int n = 0; n < N; n++) {
        double s = 0;
        for (int k = 0; k < K; k++) s += (double)W[(size_t)n * K + k] * x[k];
        y[n] = s;
    }
    return y;
}

// x as the INT4 GEMV multiplies it: int8 codes per 32 inputs, scale max |x| / 127 (gemv.cuh's Int4Weights).
static std::vector<float> as_int8_per_32(const std::vector<float>& x) {
    std::vector<float> out(x.size());
    for (size_t c = 0; c < x.size(); c += 32) {
        float amax = 0.f;
        for (size_t k = c; k < c + 32; k++) amax = std::max(amax, std::fabs(x[k]));
        float inv = amax > 0.f ? 127.f / amax : 0.f, scale = amax / 127.f;
        for (size_t k = c; k < c + 32; k++) out[k] = std::nearbyint(x[k] * inv) * scale;
    }
    return out;
}

// rmsnorm(x) * w (eps 1e-6) rounded to bf16, as a GEMV with the norm fused stages its input.
static std::vector<float> rmsnorm_as_staged(const std::vector<float>& x, const std::vector<float>& w) {
    double ss = 0;
    for (float v : x) ss += (double)v * v;
    double inv = 1 / std::sqrt(ss / x.size() + 1e-6);
    std::vector<float> out(x.size());
    for (size_t k = 0; k < x.size(); k++) out[k] = round_to_bf16((float)(x[k] * inv * w[k]));
    return out;
}

TEST_CASE("FP8 (per channel and 128-blocks) and INT4 GEMV, all input/output modes, against dequantized weights") {
    Rng r(12);
    struct Case { WFormat fmt; int kblock; double bound; };
    // FP8: x is staged in fp16 and chunks accumulate in fp16 (gemv.cuh): bounds a little above bf16's. INT4
    // multiplies x quantized to int8 per 32 inputs (W4A8): its reference uses x rounded the same way (with
    // these heavy-tailed random inputs that rounding alone moves a row's sum by up to 2%).
    for (GemvLayout lay : {GemvLayout{0, 0, 0}, GemvLayout{1, 1, 2}, GemvLayout{4, 1, 2}, GemvLayout{1, 2, 2}, GemvLayout{1, 8, 2},
                           GemvLayout{1, 1, 4}, GemvLayout{1, 2, 4}, GemvLayout{2, 1, 4}})
    for (Case cs : {Case{WFormat::FP8, 0, 3e-3}, Case{WFormat::FP8, 128, 3e-3}, Case{WFormat::INT4, 0, 3e-3}})
        for (auto shape : std::vector<std::pair<int, int>>{{2, 128}, {37, 256}, {515, 1024}, {4096, 2560}, {64, 16384}, {12000, 256}, {6000, 2048}}) {
            int N = shape.first, K = shape.second, kb = cs.kblock ? cs.kblock : K;
            gemv_forced_layout() = lay;
            CAPTURE(lay.S);
            CAPTURE(lay.KS);
            CAPTURE(lay.R);
            CAPTURE(wformat_name(cs.fmt));
            CAPTURE(cs.kblock);
            CAPTURE(N);
            CAPTURE(K);
            auto w = random_bf16_values((size_t)N * K, r, 0.05f);
            HostLinear h = make_linear(cs.fmt, w, N, K, kb);
            auto x = random_bf16_values(K, r);
            DeviceVec<bf16> d_x(to_bf16(x));
            DeviceVec<float> d_y(N);
            gemv(h.L, d_x.p, d_y.p, 0);
            const bool a8 = cs.fmt == WFormat::INT4;
            auto ref = dot_ref(h.deq, a8 ? as_int8_per_32(x) : x, N, K);
            CHECK_CLOSE(compare(d_y.download(), ref), cs.bound);

            auto y0 = random_floats(N, r);
            d_y.upload(y0);
            gemv_add(h.L, d_x.p, d_y.p, 0);
            std::vector<double> ref_add(N);
            for (int n = 0; n < N; n++) ref_add[n] = ref[n] + y0[n];
            CHECK_CLOSE(compare(d_y.download(), ref_add), cs.bound);

            auto xf = random_floats(K, r, 2.f);
            auto nw = random_bf16_values(K, r);
            std::vector<float> normed = rmsnorm_as_staged(xf, nw);
            DeviceVec<float> d_xf(xf);
            DeviceVec<bf16> d_nw(to_bf16(nw));
            d_y.poison();
            gemv_rmsnorm(h.L, d_xf.p, d_nw.p, 1e-6f, d_y.p, 0);
            auto gu = dot_ref(h.deq, a8 ? as_int8_per_32(normed) : normed, N, K);
            CHECK_CLOSE(compare(d_y.download(), gu), cs.bound);
            // SwiGLU: enough outputs for a relative norm to mean something. The 4-row kernel's blocks loop where
            // there are more row groups than resident blocks: at 12,000 rows, and at 6,000 with 2 warps per group
            // (forced {1, 2, 4}: 16 rows per group, the K split's partial sums shared once per group)
            if (N % 2 == 0 && N >= 32) {
                DeviceVec<bf16> d_h(N / 2);
                gemv_rmsnorm_swiglu(h.L, d_xf.p, d_nw.p, 1e-6f, d_h.p, 0);
                std::vector<double> ref_h(N / 2);
                for (int i = 0; i < N / 2; i++) ref_h[i] = gu[2 * i] / (1 + std::exp(-gu[2 * i])) * gu[2 * i + 1];
                CHECK_CLOSE(compare(from_bf16(d_h.download()), ref_h), cs.bound + 5e-3);
            }
        }
    gemv_forced_layout() = GemvLayout{0, 0, 0};
}

// A bf16 Linear on the device (HostLinear's other formats come from make_linear).
static HostLinear make_any_linear(WFormat fmt, const std::vector<float>& w, int N, int K) {
    if (fmt != WFormat::BF16) return make_linear(fmt, w, N, K, fmt == WFormat::FP8 ? 128 : 0);
    HostLinear h;
    h.L.N = N, h.L.K = K, h.L.fmt = fmt;
    h.deq = w;
    std::vector<bf16> b = to_bf16(w);
    h.w = std::make_unique<DeviceVec<uint8_t>>(b.size() * 2);
    CUDA_CHECK(cudaMemcpy(h.w->p, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
    h.L.w = h.w->p;
    return h;
}

// The mixture-of-experts GEMVs (GemvExperts): k of E experts in one launch each, the choice read on the device, in
// every format; each launch row against the CPU dot product of its own expert.
TEST_CASE("expert GEMVs: gate_up with RMSNorm and SwiGLU, then down, for the experts idx picks, every format") {
    Rng r(17);
    const int E = 5, f = 128, dim = 256, k = 3;
    const std::vector<int> idx = {4, 0, 2};
    for (WFormat fmt : {WFormat::BF16, WFormat::FP8, WFormat::INT4}) {
        CAPTURE(wformat_name(fmt));
        std::vector<HostLinear> gu, dn;
        std::vector<const void*> tab[4];
        for (int e = 0; e < E; e++) {
            gu.push_back(make_any_linear(fmt, random_bf16_values((size_t)2 * f * dim, r, 0.05f), 2 * f, dim));
            dn.push_back(make_any_linear(fmt, random_bf16_values((size_t)dim * f, r, 0.05f), dim, f));
            tab[0].push_back(gu.back().L.w), tab[1].push_back(gu.back().L.scale), tab[2].push_back(dn.back().L.w), tab[3].push_back(dn.back().L.scale);
        }
        DeviceVec<const void*> d_tab0(tab[0]), d_tab1(tab[1]), d_tab2(tab[2]), d_tab3(tab[3]);
        DeviceVec<int> d_idx(idx);
        auto xf = random_floats(dim, r, 2.f);
        auto nw = random_bf16_values(dim, r);
        std::vector<float> normed = rmsnorm_as_staged(xf, nw);
        DeviceVec<float> d_xf(xf);
        DeviceVec<bf16> d_nw(to_bf16(nw)), d_h((size_t)k * f);
        DeviceVec<float> d_y((size_t)k * dim);
        const bool a8 = fmt == WFormat::INT4;
        gemv_experts_rmsnorm_swiglu(gu[0].L, GemvExperts{d_idx.p, d_tab0.p, d_tab1.p, k}, d_xf.p, d_nw.p, 1e-6f, d_h.p, 0);
        std::vector<float> h = from_bf16(d_h.download());
        std::vector<double> ref_h;
        for (int j = 0; j < k; j++) {
            auto g = dot_ref(gu[idx[j]].deq, a8 ? as_int8_per_32(normed) : normed, 2 * f, dim);
            for (int i = 0; i < f; i++) ref_h.push_back(g[2 * i] / (1 + std::exp(-g[2 * i])) * g[2 * i + 1]);
        }
        CHECK_CLOSE(compare(h, ref_h), 8e-3);
        gemv_experts(dn[0].L, GemvExperts{d_idx.p, d_tab2.p, d_tab3.p, k}, d_h.p, d_y.p, 0);
        std::vector<double> ref_y;
        for (int j = 0; j < k; j++) {
            std::vector<float> hj(h.begin() + (size_t)j * f, h.begin() + (size_t)(j + 1) * f);
            auto y = dot_ref(dn[idx[j]].deq, a8 ? as_int8_per_32(hj) : hj, dim, f);
            ref_y.insert(ref_y.end(), y.begin(), y.end());
        }
        CHECK_CLOSE(compare(d_y.download(), ref_y), 3e-3);
    }
}

TEST_CASE("dequant_to_bf16 gives back the quantized values, for the prefill GEMM") {
    Rng r(13);
    int N = 100, K = 512;
    auto w = random_bf16_values((size_t)N * K, r, 0.05f);
    for (auto fk : std::vector<std::pair<WFormat, int>>{{WFormat::FP8, K}, {WFormat::FP8, 128}, {WFormat::INT4, 0}}) {
        CAPTURE(wformat_name(fk.first));
        HostLinear h = make_linear(fk.first, w, N, K, fk.second);
        DeviceVec<bf16> d_out((size_t)N * K);
        dequant_to_bf16(h.L, d_out.p, 0);
        auto out = from_bf16(d_out.download());
        size_t bad = 0;
        for (size_t i = 0; i < out.size(); i++) bad += out[i] != round_to_bf16(h.deq[i]);
        CHECK(bad == 0);
    }
}

TEST_CASE("prefill with dequantization ahead on a side stream (DequantRing): the same bits as dequantizing in line") {
    Rng r(16);
    const int T = 40;
    // A chain like a layer's, all queued at once: each GEMM reads the previous one's output through an
    // RMSNorm (as the engine's do), so a buffer refilled before its GEMM ran would change the result.
    struct Shape { WFormat fmt; int N, K; };
    const Shape shapes[] = {{WFormat::FP8, 256, 384}, {WFormat::INT4, 384, 256}, {WFormat::FP8, 512, 384}, {WFormat::INT4, 256, 512},
                            {WFormat::FP8, 256, 256}, {WFormat::INT4, 384, 256}};
    std::vector<HostLinear> ls;
    for (const Shape& sh : shapes)
        ls.push_back(make_linear(sh.fmt, random_bf16_values((size_t)sh.N * sh.K, r, 0.05f), sh.N, sh.K, sh.fmt == WFormat::FP8 ? 128 : 0));
    DeviceVec<bf16> ones(to_bf16(std::vector<float>(512, 1.f)));
    DeviceVec<float> x0(random_floats((size_t)T * shapes[0].K, r)), ya(T * 512), yb(T * 512);
    auto run = [&](bool ahead) {
        GpuMemory mem;
        Linears lin;  // the chain as one group of a layer: each projection's next is dequantized during its GEMM
        lin.plan.layer({{&ls[0].L, &ls[1].L, &ls[2].L, &ls[3].L, &ls[4].L, &ls[5].L}});
        linears_alloc(lin, T, false, mem);
        lin.ahead = ahead;
        ya.poison(), yb.poison();
        const float* in = x0.p;
        for (size_t i = 0; i < ls.size(); i++) {
            float* out = i % 2 ? yb.p : ya.p;
            linear_rmsnorm(ls[i].L, in, ones.p, 1e-6f, out, T, lin, 0);
            in = out;
        }
        CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<float> y = (ls.size() % 2 ? ya : yb).download();
        y.resize((size_t)T * shapes[ls.size() - 1].N);
        return y;
    };
    std::vector<float> in_line = run(false), ahead = run(true);
    CHECK(in_line == ahead);
    double norm = 0;
    for (float v : in_line) norm += (double)v * v;
    CHECK(norm > 0);  // a real result, not poison or zeros
    CHECK(std::isfinite(norm));
}

// ---- MXFP4 (GPT-OSS's experts): host/mxfp4.h is the reference ----

struct HostMxfp4 {
    std::vector<float> deq;  // what the blocks decode to (host/mxfp4.h)
    std::vector<float> bias;
    std::unique_ptr<DeviceVec<uint8_t>> w, scale;
    std::unique_ptr<DeviceVec<bf16>> b;
    Linear L;
};

// Random weights encoded to MXFP4, with rows that reach every code, an all-zero block and scales far from 1; and a
// bf16 bias (bias_std > 0).
static HostMxfp4 make_mxfp4(Rng& r, int N, int K, float std_dev, float bias_std = 0.f) {
    HostMxfp4 h;
    std::vector<float> w = random_floats((size_t)N * K, r, std_dev);
    for (int k = 0; k < std::min(K, 32); k++) w[k] = 0.f;                                  // an all-zero block
    if (N > 1) for (int k = 0; k < K; k++) w[(size_t)K + k] = kE2M1[k % 16] * 0.25f;       // every code, scale 2^-2
    if (N > 2) for (int k = 0; k < K; k++) w[(size_t)2 * K + k] *= 1e-3f * (k % 7 == 0 ? 1e3f : 1.f);  // spread exponents
    std::vector<uint8_t> blocks((size_t)N * K / 2), scales((size_t)N * K / 32);
    h.deq.resize((size_t)N * K);
    for (int n = 0; n < N; n++) {
        mxfp4_encode_row(&w[(size_t)n * K], K, &blocks[(size_t)n * K / 2], &scales[(size_t)n * K / 32]);
        mxfp4_decode_row(&blocks[(size_t)n * K / 2], &scales[(size_t)n * K / 32], K, &h.deq[(size_t)n * K]);
    }
    h.w = std::make_unique<DeviceVec<uint8_t>>(blocks);
    h.scale = std::make_unique<DeviceVec<uint8_t>>(scales);
    h.L.N = N, h.L.K = K, h.L.fmt = WFormat::MXFP4, h.L.w = h.w->p, h.L.scale = h.scale->p;
    if (bias_std > 0.f) {
        h.bias = random_bf16_values(N, r, bias_std);
        h.b = std::make_unique<DeviceVec<bf16>>(to_bf16(h.bias));
        h.L.bias = h.b->p;
    }
    return h;
}

TEST_CASE("MXFP4: dequant_to_bf16 is host/mxfp4.h's decoding, bit for bit") {
    Rng r(31);
    for (auto nk : std::vector<std::pair<int, int>>{{5, 64}, {96, 2880}, {33, 96}}) {
        CAPTURE(nk.first);
        CAPTURE(nk.second);
        HostMxfp4 h = make_mxfp4(r, nk.first, nk.second, 0.05f);
        DeviceVec<bf16> d_out((size_t)nk.first * nk.second);
        d_out.poison();
        dequant_to_bf16(h.L, d_out.p, 0);
        auto out = from_bf16(d_out.download());
        size_t bad = 0;
        for (size_t i = 0; i < out.size(); i++) bad += out[i] != h.deq[i];  // E2M1 x 2^e is exact in bf16 here
        CHECK(bad == 0);
    }
}

TEST_CASE("MXFP4 GEMV: store, residual add, fused RMSNorm, fused RMSNorm + SwiGLU, against the decoded weights") {
    Rng r(32);
    // x multiplies in fp16 (as FP8's GEMV): the reference takes the bf16 x as it is.
    for (GemvLayout lay : {GemvLayout{0, 0, 0}, GemvLayout{1, 1, 2}, GemvLayout{1, 2, 2}, GemvLayout{1, 1, 4}, GemvLayout{1, 4, 4}, GemvLayout{2, 1, 4}})
        for (auto shape : std::vector<std::pair<int, int>>{{2, 64}, {37, 96}, {515, 1024}, {5760, 2880}, {2880, 2880}, {64, 16384}}) {
            int N = shape.first, K = shape.second;
            gemv_forced_layout() = lay;
            CAPTURE(lay.S);
            CAPTURE(lay.KS);
            CAPTURE(lay.R);
            CAPTURE(N);
            CAPTURE(K);
            HostMxfp4 h = make_mxfp4(r, N, K, 0.05f, 0.1f);
            auto x = random_bf16_values(K, r);
            DeviceVec<bf16> d_x(to_bf16(x));
            DeviceVec<float> d_y(N);
            d_y.poison();
            gemv_launch<GemvInput::BF16, GemvOutput::STORE_F32, false, true>(h.L, d_x.p, nullptr, 0.f, d_y.p, nullptr, 0);
            auto ref = dot_ref(h.deq, x, N, K);
            for (int n = 0; n < N; n++) ref[n] += h.bias[n];
            CHECK_CLOSE(compare(d_y.download(), ref), 3e-3);

            auto y0 = random_floats(N, r);
            d_y.upload(y0);
            gemv_launch<GemvInput::BF16, GemvOutput::ADD_F32, false, true>(h.L, d_x.p, nullptr, 0.f, d_y.p, nullptr, 0);
            for (int n = 0; n < N; n++) ref[n] += y0[n];
            CHECK_CLOSE(compare(d_y.download(), ref), 3e-3);

            auto xf = random_floats(K, r, 2.f);
            auto nw = random_bf16_values(K, r);
            auto normed = rmsnorm_as_staged(xf, nw);
            DeviceVec<float> d_xf(xf);
            DeviceVec<bf16> d_nw(to_bf16(nw));
            d_y.poison();
            gemv_launch<GemvInput::F32_RMSNORM, GemvOutput::STORE_F32, false, true>(h.L, d_xf.p, d_nw.p, 1e-6f, d_y.p, nullptr, 0);
            auto gu = dot_ref(h.deq, normed, N, K);
            for (int n = 0; n < N; n++) gu[n] += h.bias[n];
            CHECK_CLOSE(compare(d_y.download(), gu), 3e-3);
            if (N % 2 == 0 && N >= 32) {
                DeviceVec<bf16> d_h(N / 2);
                d_h.poison();
                gemv_launch<GemvInput::F32_RMSNORM, GemvOutput::SWIGLU_BF16, false, true>(h.L, d_xf.p, d_nw.p, 1e-6f, nullptr, d_h.p, 0);
                std::vector<double> ref_h(N / 2);
                for (int i = 0; i < N / 2; i++) ref_h[i] = gu[2 * i] / (1 + std::exp(-gu[2 * i])) * gu[2 * i + 1];
                CHECK_CLOSE(compare(from_bf16(d_h.download()), ref_h), 8e-3);
            }
        }
    gemv_forced_layout() = GemvLayout{0, 0, 0};
}

// GPT-OSS's clamped SwiGLU, as transformers computes it (in double here).
static double oai_glu(double g, double u, double alpha, double limit) {
    g = std::min(g, limit), u = std::max(-limit, std::min(u, limit));
    return g / (1 + std::exp(-alpha * g)) * (u + 1);
}

TEST_CASE("MXFP4 expert GEMVs with biases and GPT-OSS's clamped SwiGLU; a plain GEMV refuses MXFP4") {
    Rng r(33);
    const int E = 7, f = 96, dim = 160, k = 3;
    const std::vector<int> idx = {6, 0, 3};
    const GluAct act{1.702f, 7.f};
    std::vector<HostMxfp4> gu, dn;
    std::vector<const void*> tab[6];
    for (int e = 0; e < E; e++) {
        gu.push_back(make_mxfp4(r, 2 * f, dim, 0.6f, 1.f));  // large: a good share of gates and ups pass the limit
        dn.push_back(make_mxfp4(r, dim, f, 0.05f, 0.2f));
        tab[0].push_back(gu.back().L.w), tab[1].push_back(gu.back().L.scale), tab[2].push_back(dn.back().L.w);
        tab[3].push_back(dn.back().L.scale), tab[4].push_back(gu.back().L.bias), tab[5].push_back(dn.back().L.bias);
    }
    DeviceVec<const void*> t0(tab[0]), t1(tab[1]), t2(tab[2]), t3(tab[3]), t4(tab[4]), t5(tab[5]);
    const DeviceVec<const void*>* d_tab[6] = {&t0, &t1, &t2, &t3, &t4, &t5};
    DeviceVec<int> d_idx(idx);
    auto xf = random_floats(dim, r, 2.f);
    auto nw = random_bf16_values(dim, r);
    auto normed = rmsnorm_as_staged(xf, nw);
    DeviceVec<float> d_xf(xf);
    DeviceVec<bf16> d_nw(to_bf16(nw)), d_h((size_t)k * f);
    DeviceVec<float> d_y((size_t)k * dim);
    d_h.poison(), d_y.poison();
    gemv_experts_rmsnorm_swiglu<true>(gu[0].L, GemvExperts{d_idx.p, d_tab[0]->p, d_tab[1]->p, k, d_tab[4]->p, act}, d_xf.p, d_nw.p, 1e-6f, d_h.p, 0);
    std::vector<float> h = from_bf16(d_h.download());
    std::vector<double> ref_h;
    int clamped = 0;
    for (int j = 0; j < k; j++) {
        auto g = dot_ref(gu[idx[j]].deq, normed, 2 * f, dim);
        for (int i = 0; i < f; i++) {
            double gi = g[2 * i] + gu[idx[j]].bias[2 * i], ui = g[2 * i + 1] + gu[idx[j]].bias[2 * i + 1];
            clamped += gi > 7 || std::fabs(ui) > 7;
            ref_h.push_back(oai_glu(gi, ui, 1.702, 7.0));
        }
    }
    MESSAGE(clamped, " of ", k * f, " (gate, up) pairs clamped");
    CHECK(clamped > k * f / 20);
    CHECK_CLOSE(compare(h, ref_h), 8e-3);
    gemv_experts<true>(dn[0].L, GemvExperts{d_idx.p, d_tab[2]->p, d_tab[3]->p, k, d_tab[5]->p}, d_h.p, d_y.p, 0);
    std::vector<double> ref_y;
    for (int j = 0; j < k; j++) {
        std::vector<float> hj(h.begin() + (size_t)j * f, h.begin() + (size_t)(j + 1) * f);
        auto y = dot_ref(dn[idx[j]].deq, hj, dim, f);
        for (int n = 0; n < dim; n++) ref_y.push_back(y[n] + dn[idx[j]].bias[n]);
    }
    CHECK_CLOSE(compare(d_y.download(), ref_y), 3e-3);
    // On Hopper both shapes also run the streaming kernel (ops/gemv_mxfp4.cuh), the gate_up from x normalised
    // beforehand as the router hands it over: the same bounds against the CPU; and with a grid of 1-3 blocks, each
    // going round its ring of stages several times and changing experts within its run, the same bits as the full grid.
    if (mxfp4_stream_fits(gu[0].L) && mxfp4_stream_fits(dn[0].L)) {
        DeviceVec<bf16> d_xn(to_bf16(normed)), d_h2((size_t)k * f);
        DeviceVec<float> d_y2((size_t)k * dim);
        std::vector<float> h_full, y_full;
        for (int blocks : {0, 1, 2, 3}) {
            CAPTURE(blocks);
            mxfp4_stream().blocks = blocks;
            d_h2.poison(), d_y2.poison();
            gemv_experts_swiglu<true>(gu[0].L, GemvExperts{d_idx.p, d_tab[0]->p, d_tab[1]->p, k, d_tab[4]->p, act}, d_xn.p, d_h2.p, 0);
            gemv_experts<true>(dn[0].L, GemvExperts{d_idx.p, d_tab[2]->p, d_tab[3]->p, k, d_tab[5]->p}, d_h.p, d_y2.p, 0);
            std::vector<float> h2 = from_bf16(d_h2.download()), y2 = d_y2.download();
            CHECK_CLOSE(compare(h2, ref_h), 8e-3);
            CHECK_CLOSE(compare(y2, ref_y), 3e-3);
            if (blocks == 0) h_full = h2, y_full = y2;
            CHECK(h2 == h_full);
            CHECK(y2 == y_full);
        }
        mxfp4_stream().blocks = 0;
    } else {
        MESSAGE("the streaming MXFP4 kernel needs Hopper: not run");
    }
    // The engines' ordinary GEMVs are built without MXFP4 and say so.
    DeviceVec<bf16> d_x(to_bf16(random_bf16_values(dim, r)));
    CHECK_THROWS_AS(gemv(gu[0].L, d_x.p, d_y.p, 0), UserError);
}

// gpt-oss-20b's expert shapes (2,880 inputs: 90 blocks a row, three per lane), x far larger than fp16's range once
// in the middle (the streaming kernel scales x by a power of two), through the streaming kernel and through
// ops/gemv.cuh's: both within the bounds against the CPU, the streaming one with the same bits for every grid.
TEST_CASE("MXFP4 expert GEMVs at gpt-oss-20b's shapes: the streaming kernel against the CPU and ops/gemv.cuh's") {
    Rng r(35);
    const int E = 5, f = 2880, dim = 2880, k = 4;
    const std::vector<int> idx = {3, 1, 4, 0};
    std::vector<HostMxfp4> gu, dn;
    std::vector<const void*> tab[6];
    for (int e = 0; e < E; e++) {
        gu.push_back(make_mxfp4(r, 2 * f, dim, 0.05f, 0.1f));
        dn.push_back(make_mxfp4(r, dim, f, 0.05f, 0.1f));
        tab[0].push_back(gu.back().L.w), tab[1].push_back(gu.back().L.scale), tab[2].push_back(dn.back().L.w);
        tab[3].push_back(dn.back().L.scale), tab[4].push_back(gu.back().L.bias), tab[5].push_back(dn.back().L.bias);
    }
    if (!mxfp4_stream_fits(gu[0].L) || !mxfp4_stream_fits(dn[0].L)) {
        MESSAGE("the streaming MXFP4 kernel needs Hopper: not run");
        return;
    }
    DeviceVec<const void*> t0(tab[0]), t1(tab[1]), t2(tab[2]), t3(tab[3]), t4(tab[4]), t5(tab[5]);
    DeviceVec<int> d_idx(idx);
    for (float big : {1.f, 3e4f}) {  // x as a model's, or with one value past 65,504 / 32 (fp16's range at a fixed scale)
        CAPTURE(big);
        std::vector<float> x = random_bf16_values(dim, r);
        x[dim / 2] *= big;
        x = from_bf16(to_bf16(x));
        const GluAct act{1.702f, 7.f};
        std::vector<double> ref_h;
        for (int j = 0; j < k; j++) {
            auto g = dot_ref(gu[idx[j]].deq, x, 2 * f, dim);
            for (int i = 0; i < f; i++) ref_h.push_back(oai_glu(g[2 * i] + gu[idx[j]].bias[2 * i], g[2 * i + 1] + gu[idx[j]].bias[2 * i + 1], 1.702, 7.0));
        }
        DeviceVec<bf16> d_x(to_bf16(x)), d_h((size_t)k * f);
        DeviceVec<float> d_y((size_t)k * dim);
        std::vector<float> h_full, y_full;
        for (int blocks : {-1, 0, 5, 37}) {  // -1: ops/gemv.cuh's kernel
            CAPTURE(blocks);
            mxfp4_stream().on = blocks >= 0;
            mxfp4_stream().blocks = std::max(blocks, 0);
            d_h.poison(), d_y.poison();
            gemv_experts_swiglu<true>(gu[0].L, GemvExperts{d_idx.p, t0.p, t1.p, k, t4.p, act}, d_x.p, d_h.p, 0);
            gemv_experts<true>(dn[0].L, GemvExperts{d_idx.p, t2.p, t3.p, k, t5.p}, d_h.p, d_y.p, 0);
            std::vector<float> h = from_bf16(d_h.download()), y = d_y.download();
            std::vector<double> ref_y;  // down_proj on the kernel's own h
            for (int j = 0; j < k; j++) {
                std::vector<float> hj(h.begin() + (size_t)j * f, h.begin() + (size_t)(j + 1) * f);
                auto yj = dot_ref(dn[idx[j]].deq, hj, dim, f);
                for (int n = 0; n < dim; n++) ref_y.push_back(yj[n] + dn[idx[j]].bias[n]);
            }
            CHECK_CLOSE(compare(h, ref_h), 8e-3);
            CHECK_CLOSE(compare(y, ref_y), 3e-3);
            if (blocks == 0) h_full = h, y_full = y;
            if (blocks > 0) CHECK(h == h_full);
            if (blocks > 0) CHECK(y == y_full);
        }
        mxfp4_stream().on = true, mxfp4_stream().blocks = 0;
    }
}

// The prefill's grouped GEMM over MXFP4 experts (ops/gemm_mxfp4.cuh): each expert's rows against the CPU over the
// decoded weights, stored into a poisoned y with the experts' biases, and added onto y without them, with tiles of 128
// and of 192 rows. Expert sizes: none, one row, 64 (the 64-column products), 65 and 128 (128 columns), 129 and 300
// (two or three tiles of 128; one of 192 columns, or 192 + 108); weight rows past a block's 128 (N = 200) and a K
// whose last stage holds one MXFP4 block (96, 2,880). Besides make_mxfp4's awkward rows, the last expert's row 3 is
// scaled by 2^60 and row 4 by 2^-60 (scales far from 127 both ways); each output is checked against the magnitude of
// its terms.
TEST_CASE("MXFP4 grouped GEMM for a prefill's experts (Hopper): every expert's rows against the decoded weights") {
    Rng r(36);
    const std::vector<int> sizes = {0, 1, 64, 65, 128, 129, 300};
    const int E = (int)sizes.size();
    std::vector<int> first = {0};
    for (int n : sizes) first.push_back(first.back() + n);
    const int rows = first.back();
    for (auto nk : {std::pair<int, int>{200, 96}, {1000, 2880}}) {
        const int N = nk.first, K = nk.second;
        CAPTURE(N);
        CAPTURE(K);
        std::vector<HostMxfp4> ex;
        std::vector<const void*> tw, ts, tb;
        for (int e = 0; e < E; e++) {
            ex.push_back(make_mxfp4(r, N, K, 0.05f, 0.5f));
            tw.push_back(ex.back().L.w), ts.push_back(ex.back().L.scale), tb.push_back(ex.back().L.bias);
        }
        if (!mxfp4_gemm_fits(ex[0].L)) {
            MESSAGE("the MXFP4 grouped GEMM needs Hopper (sm_90a): not run");
            return;
        }
        {  // the last expert's rows 3 and 4, re-encoded at extreme scales
            HostMxfp4& h = ex[E - 1];
            std::vector<uint8_t> blocks((size_t)N * K / 2), scales((size_t)N * K / 32);
            CUDA_CHECK(cudaMemcpy(blocks.data(), h.w->p, blocks.size(), cudaMemcpyDeviceToHost));
            CUDA_CHECK(cudaMemcpy(scales.data(), h.scale->p, scales.size(), cudaMemcpyDeviceToHost));
            for (int n = 3; n <= 4; n++) {
                std::vector<float> w = random_floats(K, r, n == 3 ? 0x1p60f : 0x1p-60f);
                mxfp4_encode_row(w.data(), K, &blocks[(size_t)n * K / 2], &scales[(size_t)n * K / 32]);
                mxfp4_decode_row(&blocks[(size_t)n * K / 2], &scales[(size_t)n * K / 32], K, &h.deq[(size_t)n * K]);
            }
            h.w->upload(blocks), h.scale->upload(scales);
            h.bias[3] = h.bias[4] = 0.f;  // (a bias would bury row 4's products in its rounding)
            h.b->upload(to_bf16(h.bias));
        }
        std::vector<float> x = random_bf16_values((size_t)rows * K, r);
        // The reference: y[row][n] = sum_k x[row][k] w_e[n][k] for the row's expert e, and the sum of the terms'
        // magnitudes, the scale of what fp32 sums may lose. (A sum may cancel to nearly nothing: expert 1's one token
        // against weight row 800 sums to 3e-5 out of terms of ~100 in all; relative to that sum alone, plain fp32 sums
        // in k order, emulated on the CPU, are 3e-3 off, the kind of figure, 5e-3, that failed a per-row relative
        // measure here before.)
        std::vector<double> ref((size_t)rows * N), mag((size_t)rows * N);
        for (int e = 0; e < E; e++)
            for (int row = first[e]; row < first[e + 1]; row++)
                for (int n = 0; n < N; n++) {
                    double sum = 0, abs_sum = 0;
                    for (int k = 0; k < K; k++) {
                        const double p = (double)ex[e].deq[(size_t)n * K + k] * x[(size_t)row * K + k];
                        sum += p, abs_sum += std::fabs(p);
                    }
                    ref[(size_t)row * N + n] = sum, mag[(size_t)row * N + n] = abs_sum;
                }
        DeviceVec<const void*> d_w(tw), d_s(ts), d_b(tb);
        DeviceVec<bf16> d_x(to_bf16(x));
        std::vector<float> y0((size_t)rows * N);  // what the add finds: half the product (any scale; a store leaves half)
        for (size_t i = 0; i < y0.size(); i++) y0[i] = (float)(0.5 * ref[i]);
        const int tile_rows_was = mxfp4_gemm_tile_rows();
        // Tiles of 128 rows (products over 64 or 128 tokens) and of kMxgTile (also over 192: the 129- and 300-row
        // experts), each stored with the experts' biases and added without them.
        for (int tile_rows : {128, kMxgTile})
        for (bool add : {false, true}) {
            CAPTURE(tile_rows);
            CAPTURE(add);
            mxfp4_gemm_tile_rows() = tile_rows;
            std::vector<MxgTile> tiles;
            const int n_tiles = mxfp4_gemm_tiles(first, E, tiles);
            int expect = 0;
            for (int n : sizes) expect += (n + tile_rows - 1) / tile_rows;
            CHECK(n_tiles == expect);
            DeviceVec<MxgTile> d_tiles(tiles);
            DeviceVec<float> d_y((size_t)rows * N);
            if (add) d_y.upload(y0);
            mxfp4_grouped_gemm(ex[0].L, d_w.p, d_s.p, add ? nullptr : d_b.p, d_x.p, rows, d_tiles.p, n_tiles, d_y.p, add, 0);
            std::vector<float> y = d_y.download();
            // Each output against its terms' magnitudes (rows 3 and 4 of the last expert are 2^120 apart; one code
            // off in a row of 2,880 would be ~3e-4 of it).
            double worst = 0;
            int worst_e = -1, worst_n = -1, worst_row = -1;
            for (int e = 0; e < E; e++)
                for (int row = first[e]; row < first[e + 1]; row++)
                    for (int n = 0; n < N; n++) {
                        const size_t i = (size_t)row * N + n;
                        const double got = (double)y[i] - (add ? y0[i] : ex[e].bias[n]);
                        const double err = std::isfinite(y[i]) ? std::fabs(got - ref[i]) : INFINITY;
                        if (mag[i] == 0) CHECK(err == 0);  // an all-zero weight row gives exact zeros
                        const double rel = mag[i] > 0 ? err / mag[i] : 0.0;
                        if (rel > worst) worst = rel, worst_e = e, worst_n = n, worst_row = row;
                    }
            CAPTURE(worst_e);
            CAPTURE(worst_n);
            CAPTURE(worst_row);
            CHECK(worst < 1e-5);  // (fp32 sums in k order: 2.8e-8 on this data, emulated on the CPU)
        }
        mxfp4_gemm_tile_rows() = tile_rows_was;
    }
}

// A pass of a few rows over FP8 / INT4 weights runs a GEMV per row (ops/linear.cuh's row_gemvs): every mode gives the
// same bits as the rows one at a time; one row more than that takes the dequantize-then-GEMM path, close to them.
TEST_CASE("a few rows over FP8 / INT4 weights: a GEMV per row, the same bits as one row at a time; more rows near them") {
    Rng r(41);
    const int N = 256, K = 384;
    for (WFormat fmt : {WFormat::FP8, WFormat::INT4}) {
        CAPTURE(wformat_name(fmt));
        HostLinear h = make_linear(fmt, random_bf16_values((size_t)N * K, r, 0.05f), N, K, fmt == WFormat::FP8 ? 128 : 0);
        const int max_rows = row_gemv_max(fmt), T = max_rows + 1;
        REQUIRE(max_rows >= 2);
        GpuMemory mem;
        Linears lin;
        lin.plan.layer({{&h.L}});
        linears_alloc(lin, T, false, mem);
        DeviceVec<bf16> xb(to_bf16(random_floats((size_t)T * K, r))), norm(to_bf16(random_floats(K, r, 0.3f)));
        DeviceVec<float> xf(random_floats((size_t)T * K, r)), y0(random_floats((size_t)T * N, r)), y((size_t)T * N), y1((size_t)T * N);
        DeviceVec<bf16> hb((size_t)T * N / 2), hb1((size_t)T * N / 2);
        for (int mode = 0; mode < 4; mode++) {
            CAPTURE(mode);
            // mode 0: store; 1: residual add; 2: fused RMSNorm; 3: fused RMSNorm + SwiGLU (bf16 out)
            auto run = [&](int rows, int row0, float* out, bf16* hout) {
                const bf16* x = xb.p + (size_t)row0 * K;
                const float* x32 = xf.p + (size_t)row0 * K;
                if (mode == 0) linear(h.L, x, out + (size_t)row0 * N, rows, lin, 0);
                if (mode == 1) linear_add(h.L, x, out + (size_t)row0 * N, rows, lin, 0);
                if (mode == 2) linear_rmsnorm(h.L, x32, norm.p, 1e-6f, out + (size_t)row0 * N, rows, lin, 0);
                if (mode == 3) linear_rmsnorm_swiglu(h.L, x32, norm.p, 1e-6f, hout + (size_t)row0 * N / 2, rows, lin, 0);
            };
            auto result = [&](DeviceVec<float>& o, DeviceVec<bf16>& ho, int rows) {
                std::vector<float> v = mode == 3 ? from_bf16(ho.download()) : o.download();
                v.resize((size_t)rows * (mode == 3 ? N / 2 : N));
                return v;
            };
            for (int rows = 2; rows <= max_rows; rows++) {
                CAPTURE(rows);
                CUDA_CHECK(cudaMemcpy(y.p, y0.p, y.n * sizeof(float), cudaMemcpyDeviceToDevice));
                CUDA_CHECK(cudaMemcpy(y1.p, y0.p, y1.n * sizeof(float), cudaMemcpyDeviceToDevice));
                hb.poison(), hb1.poison();
                if (mode != 1) y.poison(), y1.poison();
                run(rows, 0, y.p, hb.p);
                for (int t = 0; t < rows; t++) run(1, t, y1.p, hb1.p);
                CUDA_CHECK(cudaDeviceSynchronize());
                std::vector<float> a = result(y, hb, rows), b = result(y1, hb1, rows);
                CHECK(a == b);
                double norm2 = 0;
                for (float v : a) norm2 += (double)v * v;
                CHECK((norm2 > 0 && std::isfinite(norm2)));
            }
            // One row more: on the tensor cores (quant_rows.cuh; other roundings: close, not equal; SwiGLU's bf16 output
            // adds one).
            CUDA_CHECK(cudaMemcpy(y.p, y0.p, y.n * sizeof(float), cudaMemcpyDeviceToDevice));
            CUDA_CHECK(cudaMemcpy(y1.p, y0.p, y1.n * sizeof(float), cudaMemcpyDeviceToDevice));
            hb.poison(), hb1.poison();
            run(T, 0, y.p, hb.p);
            for (int t = 0; t < T; t++) run(1, t, y1.p, hb1.p);
            CUDA_CHECK(cudaDeviceSynchronize());
            std::vector<float> a = result(y, hb, T), b = result(y1, hb1, T);
            std::vector<double> bd(b.begin(), b.end());
            CHECK_CLOSE(compare(a, bd), 2e-2);
        }
    }
}

// ops/quant_rows.cuh: a pass of several rows over FP8 or INT4 weights on the tensor cores, each weight read once per 16
// rows. Against the CPU product over the dequantized weights (x is widened to fp16, and block or group scales multiply
// the weights in fp16: bounds as the FP8 GEMV's), for FP8's per-channel and 128-block scales and INT4's 128-groups,
// rows not a multiple of the block's 32, token counts around the 16-token tiles, a bias, the residual add; the sums
// meet in a fixed order, so two runs are equal.
TEST_CASE("FP8 and INT4 rows on the tensor cores (2-64 tokens): scales, store, add, bias, against dequantized weights") {
    Rng r(43);
    struct Shape { WFormat fmt; int N, K, kblock; };
    for (Shape sh : {Shape{WFormat::FP8, 37, 192, 192}, Shape{WFormat::FP8, 200, 256, 128}, Shape{WFormat::FP8, 515, 1024, 1024},
                     Shape{WFormat::FP8, 1000, 4096, 128}, Shape{WFormat::FP8, 64, 12288, 128}, Shape{WFormat::INT4, 37, 256, 0},
                     Shape{WFormat::INT4, 515, 1152, 0}, Shape{WFormat::INT4, 1000, 4096, 0}, Shape{WFormat::INT4, 64, 12288, 0}}) {
        CAPTURE(wformat_name(sh.fmt));
        CAPTURE(sh.N);
        CAPTURE(sh.K);
        CAPTURE(sh.kblock);
        const int N = sh.N, K = sh.K;
        HostLinear h = make_linear(sh.fmt, random_bf16_values((size_t)N * K, r, 0.05f), N, K, sh.kblock);
        REQUIRE(quant_rows_fit(h.L, 64));
        const int T_max = 64;
        auto x = random_bf16_values((size_t)T_max * K, r);
        auto bias = random_bf16_values(N, r, 0.5f);
        DeviceVec<bf16> d_x(to_bf16(x)), d_bias(to_bf16(bias));
        DeviceVec<float> d_y((size_t)T_max * N), d_y2((size_t)T_max * N);
        for (int T : {1, 2, 5, 16, 17, 40, 64})
            for (int mode = 0; mode < 3; mode++) {  // 0: store; 1: store with the bias; 2: residual add
                CAPTURE(T);
                CAPTURE(mode);
                h.L.bias = mode == 1 ? d_bias.p : nullptr;
                auto y0 = random_floats((size_t)T * N, r);
                std::vector<double> ref((size_t)T * N);
                for (int t = 0; t < T; t++) {
                    std::vector<float> xt(x.begin() + (size_t)t * K, x.begin() + (size_t)(t + 1) * K);
                    std::vector<double> yt = dot_ref(h.deq, xt, N, K);
                    for (int n = 0; n < N; n++) ref[(size_t)t * N + n] = yt[n] + (mode == 1 ? bias[n] : 0.0) + (mode == 2 ? y0[(size_t)t * N + n] : 0.0);
                }
                std::vector<float> out[2];
                for (int run = 0; run < 2; run++) {
                    d_y.poison();
                    if (mode == 2) CUDA_CHECK(cudaMemcpy(d_y.p, y0.data(), y0.size() * sizeof(float), cudaMemcpyHostToDevice));
                    quant_rows(h.L, d_x.p, T, d_y.p, mode == 2, 0);
                    out[run] = d_y.download();
                    out[run].resize((size_t)T * N);
                }
                CHECK_CLOSE(compare(out[0], ref), 3e-3);
                CHECK(out[0] == out[1]);
                std::vector<float> rest = d_y.download();  // rows past T stay as poisoned
                bool untouched = true;
                for (size_t i = (size_t)T * N; i < rest.size(); i++) untouched = untouched && !std::isfinite(rest[i]);
                CHECK(untouched);
            }
    }
    // linear() takes it past the per-row GEMVs, and an FP8 K that is not a multiple of 64 falls back to dequantize + GEMM.
    HostLinear odd = make_linear(WFormat::FP8, random_bf16_values((size_t)48 * 80, r, 0.05f), 48, 80, 80);
    CHECK_FALSE(quant_rows_fit(odd.L, 8));
    for (WFormat fmt : {WFormat::FP8, WFormat::INT4}) {
        HostLinear h = make_linear(fmt, random_bf16_values((size_t)96 * 256, r, 0.05f), 96, 256, fmt == WFormat::FP8 ? 128 : 0);
        CHECK(by_quant_rows(h.L, 8));
        CHECK_FALSE(by_quant_rows(h.L, row_gemv_max(fmt)));
        CHECK_FALSE(by_quant_rows(h.L, kQuantRowsPassMax + 1));
    }
}
