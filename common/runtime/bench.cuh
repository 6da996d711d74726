// runtime/bench.cuh — --bench for any engine: tok/s and the fraction of the roofline that bounds it.
//
// Usage (runner.cuh):
//   bench(model, rt, gen, opts);
//
// For each --n-prompt length: a random prompt, a timed prefill, then -n (default 128) greedy decode steps that
// ignore end-of-generation ids. Printed against ceilings measured in this process:
//   decode:  bytes one step reads (the model's weights, ModelInfo::decode_bytes, plus the KV cache at the
//            average context of the run) x tok/s, over the device's copy bandwidth (gpu/timing.cuh);
//   prefill: matmul flops (2 per weight per token) plus causal attention (QK^T and PV: 2 T^2 q_dim per
//            attention layer), over a cuBLAS bf16 GEMM of 2048 x (that model's widest projection) measured here.
// Then where the time goes (gpu/profile.cuh): one eager decode step at the end of the context, and for a
// prompt of exactly -ub tokens one prefill pass at position 0, each operation timed alone, summed by name.
// oracle/bench.py parses the lines beginning "bench:"; keep their shape.
#pragma once

#include <random>

#include "gpu/trace.cuh"
#include "ops/gemm.cuh"
#include "runtime/generate.cuh"

namespace monocu {

// The profiled rows of one pass, as "name X us x calls = Y ms;" (per_call) or "name Y ms (Z TFLOP/s);".
inline void print_profile(const char* title, double measured_ms, int reps, bool per_call) {
    double sum = 0;
    std::printf("bench: %s:", title);
    for (const OpProfile::Row& r : op_profile().rows()) {
        double ms = r.ms / reps;
        sum += ms;
        int calls = r.calls / reps;
        if (per_call) std::printf(" %s %.1f us x %d = %.3f ms;", r.name.c_str(), 1000.0 * ms / std::max(calls, 1), calls, ms);
        else if (r.flops > 0) std::printf(" %s %.2f (%.0f TFLOP/s);", r.name.c_str(), ms, r.flops / reps / (ms * 1e-3) / 1e12);
        else std::printf(" %s %.2f;", r.name.c_str(), ms);
    }
    std::printf(" sum %.3f ms, %s %.3f ms\n", sum, per_call ? "step" : "pass", measured_ms);
}

template <class M>
int bench(M& m, Runtime& rt, Generator<M>& g, const Options& o) {
    ModelInfo info = m.info();
    model_stats(info, rt);
    int n_gen = o.n_predict > 0 ? o.n_predict : 128;
    if (!o.timeline_file.empty() && !kTraceBuild) die("--timeline: this binary has no tracing; build it with make trace");
    size_t widest = 0;
    int widest_k = 0;
    for (const Linear* L : rt.lin.plan.order)
        if (L != rt.lin.plan.head_ && (size_t)L->N > widest) widest = L->N, widest_k = L->K;
    double copy_gbs = measure_copy_bandwidth(rt.stream);
    double gemm_tflops = measure_gemm_tflops(rt.lin.gemm, 2048, (int)widest, widest_k, rt.stream);
    std::printf("bench: ceilings: copy %.1f GB/s, cuBLAS bf16 GEMM %d x %zu x %d %.1f TFLOP/s; cuda graphs %s, pdl %s\n", copy_gbs, 2048,
                widest, widest_k, gemm_tflops, o.cuda_graphs ? "on" : "off", pdl_enabled() ? "on" : "off");
    SamplingParams greedy;
    g.set_sampling(greedy);
    const AttnSpec& as = rt.attn.spec;
    std::mt19937 rng(1234);
    for (size_t pi = 0; pi < o.n_prompt.size(); pi++) {
        int n_prompt = o.n_prompt[pi];
        std::vector<int> ids(n_prompt);
        for (int& id : ids) id = (int)(rng() % info.vocab);
        // Warm-up, untimed: a prefill of this very length (cuBLAS loads the kernels of a GEMM shape on its first
        // call: a 2,048-token prefill after a 512-token one measured 25% slower without it), then, the first
        // time, one eager decode step and the capture.
        g.prefill(ids, 0);
        if (pi == 0)
            for (int i = 0; i < 2; i++) g.decode_step(), g.read_token();
        GpuTimer timer(rt.stream);
        timer.start();
        g.prefill(ids, 0);
        float prefill_ms = timer.stop();
        double decode_ms = g.time_decode(n_gen);
        double flops = 2.0 * info.matmul_params * n_prompt + 2.0 * as.layers * (double)n_prompt * n_prompt * as.n_heads * as.head_dim;
        double avg_ctx = n_prompt + (n_gen + 1) / 2.0;
        // The keys a step reads: every position, or with KV eviction the budget's rows (plus this step's own)
        if (rt.attn.h2o.on()) avg_ctx = std::min(avg_ctx, rt.attn.h2o.budget + 1.0);
        double kv_bytes = (double)rt.attn.kv.bytes_per_token() * avg_ctx;
        double bytes = (double)info.decode_bytes + kv_bytes, tok_s = 1000.0 * n_gen / decode_ms;
        double gbs = bytes * tok_s / 1e9, tflops = flops / (prefill_ms * 1e-3) / 1e12;
        std::printf("bench: prefill %6d tokens: %9.2f ms, %9.1f tok/s, %6.1f TFLOP/s = %5.1f%% of the GEMM ceiling\n", n_prompt,
                    prefill_ms, 1000.0 * n_prompt / prefill_ms, tflops, 100.0 * tflops / gemm_tflops);
        std::printf("bench: decode  %6d tokens at context %d..%d: %.3f ms/tok, %.2f tok/s; read %.3f GB/tok (weights %.3f, kv %.3f); "
                    "%.1f GB/s = %.1f%% of copy bandwidth\n",
                    n_gen, n_prompt, n_prompt + n_gen, decode_ms / n_gen, tok_s, bytes / 1e9, info.decode_bytes / 1e9, kv_bytes / 1e9, gbs,
                    100.0 * gbs / copy_gbs);
        if (!o.timeline_file.empty()) {  // a profiling build's block timestamps of 3 more steps (trace.cuh)
            trace_enable(true);
            for (int i = 0; i < 3; i++) g.decode_step();
            CUDA_CHECK(cudaStreamSynchronize(rt.stream));
            trace_enable(false);
            trace_save(strf("%s.%d", o.timeline_file.c_str(), n_prompt));
        }
        if (n_prompt == std::min(o.ubatch, rt.max_tokens)) {  // one pass at position 0, each op alone, 3 times
            g.forward_chunk(ids, 0, n_prompt);
            op_profile().start();
            for (int r = 0; r < 3; r++) g.forward_chunk(ids, 0, n_prompt);
            op_profile().stop(rt.stream);
            print_profile(strf("prefill breakdown (%d tokens at position 0, each op alone, ms per pass)", n_prompt).c_str(), prefill_ms, 3,
                          false);
        }
        if (pi + 1 == o.n_prompt.size()) {  // a step at the last position of the context, each op alone, 5 times
            op_profile().start();
            for (int r = 0; r < 5; r++) g.set_pos(rt.ctx - 1), g.decode_step_eager();
            op_profile().stop(rt.stream);
            print_profile("decode breakdown (each op alone, back to back)", decode_ms / n_gen, 5, true);
        }
    }
    return 0;
}

}  // namespace monocu
