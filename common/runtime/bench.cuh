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
// With --parallel N (bench_parallel): N sequences of each --n-prompt random tokens run together through the batched
// core, -n tokens each; the decode steps with all N sequences in them give the output tok/s and the step's time
// against its roofline: the weights once, every sequence's KV rows, and 2 flops per weight per sequence at the
// GEMM ceiling, whichever bounds. Then the prefix cache: time to first token of a prompt of n-prompt + 64 tokens,
// cold, and again after another sequence left the same n-prompt tokens cached.
#pragma once

#include <random>

#include "gpu/trace.cuh"
#include "ops/gemm.cuh"
#include "runtime/batched.cuh"
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

// The ceilings line, measured here; returns (copy GB/s, GEMM TFLOP/s).
inline std::pair<double, double> bench_ceilings(Runtime& rt, const Options& o) {
    size_t widest = 0;
    int widest_k = 0;
    for (const Linear* L : rt.lin.plan.order)
        if (L != rt.lin.plan.head_ && (size_t)L->N > widest) widest = L->N, widest_k = L->K;
    double copy_gbs = measure_copy_bandwidth(rt.stream);
    double gemm_tflops = measure_gemm_tflops(rt.lin.gemm, 2048, (int)widest, widest_k, rt.stream);
    std::printf("bench: ceilings: copy %.1f GB/s, cuBLAS bf16 GEMM %d x %zu x %d %.1f TFLOP/s; cuda graphs %s, pdl %s\n", copy_gbs, 2048,
                widest, widest_k, gemm_tflops, o.cuda_graphs ? "on" : "off", pdl_enabled() ? "on" : "off");
    return {copy_gbs, gemm_tflops};
}

template <class M>
int bench(M& m, Runtime& rt, Generator<M>& g, const Options& o) {
    ModelInfo info = m.info();
    model_stats(info, rt);
    int n_gen = o.n_predict > 0 ? o.n_predict : 128;
    if (!o.timeline_file.empty() && !kTraceBuild) die("--timeline: this binary has no tracing; build it with make trace");
    auto [copy_gbs, gemm_tflops] = bench_ceilings(rt, o);
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

template <class M>
int bench_parallel(M& m, Runtime& rt, BatchedRunner<M>& br, const Options& o) {
    ModelInfo info = m.info();
    model_stats(info, rt);
    const int N = o.parallel, n_gen = o.n_predict > 0 ? o.n_predict : 128;
    auto [copy_gbs, gemm_tflops] = bench_ceilings(rt, o);
    double head_params = (double)rt.lin.plan.head_->N * rt.lin.plan.head_->K;
    std::mt19937 rng(1234);
    int next_id = 0;
    auto random_ids = [&](int n) {
        std::vector<int> ids(n);
        for (int& id : ids) id = (int)(rng() % info.vocab);
        return ids;
    };
    for (int n_prompt : o.n_prompt) {
        // Untimed warm-up: short prompts, 4 tokens (cuBLAS picks its kernels on a shape's first call; the step of N sequences is
        // captured as a graph).
        for (int rep = 0; rep < 2; rep++) {
            const bool timed = rep == 1;
            for (int i = 0; i < N; i++)
                br.add(BatchedRequest{next_id++, random_ids(timed ? n_prompt : std::min(n_prompt, 16)), timed ? n_gen : 4, {}, SamplingParams{}});
            double t0 = wall_ms(), full_ms = 0, first_ms = -1;
            long full_steps = 0, tokens = 0;
            while (!br.idle()) {
                double ts = wall_ms();
                for (const BatchedResult& r : br.step()) tokens += (long)r.tokens.size();
                double dt = wall_ms() - ts;
                const BatchedStats& st = br.stats();
                if (st.last_decode == N && st.last_items == N) full_ms += dt, full_steps++;
                if (first_ms < 0 && st.last_decode == st.last_items && br.waiting() == 0) first_ms = wall_ms() - t0;
            }
            if (!timed) continue;
            double total_ms = wall_ms() - t0;
            double step_ms = full_steps ? full_ms / full_steps : 0;
            double avg_ctx = n_prompt + n_gen / 2.0;
            double kv_bytes = (double)rt.attn.kv.bytes_per_token() * avg_ctx * N;
            double bytes = (double)info.decode_bytes + kv_bytes;
            double flops = 2.0 * (info.matmul_params + head_params) * N + 4.0 * rt.attn.spec.layers * avg_ctx * rt.attn.spec.n_heads * rt.attn.spec.head_dim * N;
            const double bytes_ms = bytes / (copy_gbs * 1e9) * 1e3, flops_ms = flops / (gemm_tflops * 1e12) * 1e3;
            const double roof_ms = std::max(bytes_ms, flops_ms);
            std::printf("bench: parallel %4d x %6d prompt + %d generated: all prompts in %.1f ms; %ld steps of all %d decoding: %.3f ms/step, "
                        "%.1f output tok/s; step roofline %.3f ms (%s: %.3f GB, %.2f TFLOP) = %.1f%%; end to end %.1f output tok/s, "
                        "%ld preemptions\n",
                        N, n_prompt, n_gen, first_ms, full_steps, N, step_ms, step_ms > 0 ? 1000.0 * N / step_ms : 0.0, roof_ms,
                        bytes_ms >= flops_ms ? "bytes" : "compute", bytes / 1e9, flops / 1e12,
                        step_ms > 0 ? 100.0 * roof_ms / step_ms : 0.0, 1000.0 * tokens / total_ms, br.stats().preemptions);
        }
    }
    // Where a step of N decoding sequences goes: N short prompts until all decode, then 3 steps, each op alone (none
    // when --batch-tokens is below N: no step then holds all of them).
    for (int i = 0; i < N; i++) br.add(BatchedRequest{next_id++, random_ids(16), 8, {}, SamplingParams{}});
    auto all_decoding = [&] { return br.stats().last_decode == N && br.stats().last_items == N; };
    while (!br.idle() && !all_decoding()) br.step();
    if (!br.idle()) {
        br.eager = true;
        op_profile().start();
        double t_prof = wall_ms();
        for (int r = 0; r < 3; r++) br.step();
        t_prof = wall_ms() - t_prof;
        op_profile().stop(rt.stream);
        br.eager = false;
        print_profile(strf("parallel %d: decode step breakdown (each op alone)", N).c_str(), t_prof / 3, 3, true);
    }
    while (!br.idle()) br.step();
    // The prefix cache: a prompt of P + 64 tokens, cold; another with the same first P tokens after it (hot).
    const int P = o.n_prompt[0];
    std::vector<int> shared = random_ids(P);
    double ttft[2];
    for (int k = 0; k < 2; k++) {
        std::vector<int> ids = shared, tail = random_ids(64);
        ids.insert(ids.end(), tail.begin(), tail.end());
        br.add(BatchedRequest{next_id++, ids, 1, {}, SamplingParams{}});
        double t0 = wall_ms();
        while (!br.idle()) br.step();
        ttft[k] = wall_ms() - t0;
    }
    std::printf("bench: prefix cache: time to first token of %d shared + 64 new tokens: cold %.2f ms, hot %.2f ms (%.1f%%); "
                "cache hits %ld blocks, misses %ld\n",
                P, ttft[0], ttft[1], 100.0 * ttft[1] / ttft[0], br.stats().prefix_hit_blocks, br.stats().prefix_miss_blocks);
    return 0;
}

}  // namespace monocu
