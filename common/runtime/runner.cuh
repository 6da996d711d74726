// runtime/runner.cuh — an engine's whole main(): flags, checks, loading, and the mode the user asked for.
//
// Usage (the last lines of every engine):
//   int main(int argc, char** argv) { return engine_main<Qwen3>(argc, argv); }
//
// Order, so that a user learns about a typo before anything slow or GPU-bound happens: flags; the model's
// config.json (the engine's configure()), generation_config.json, tokenizer.json and the prompt's files;
// the checkpoint's headers; only then the GPU, the weights and the buffers. Modes: one prompt (-p, -f,
// --ids), chat (-cnv, chat_loop.cuh), a batch file (-i/-o, batch_file.cuh), --bench (bench.cuh), the OpenAI server
// (--port, serve.cuh).
#pragma once

#include "host/cli.h"
#include "host/config.h"
#include "host/safetensors.h"
#include "load/host_upload.cuh"
#include "load/load_linear.cuh"
#include "runtime/batch_file.cuh"
#include "runtime/batched.cuh"
#include "runtime/bench.cuh"
#include "runtime/chat_loop.cuh"
#include "runtime/generate.cuh"
#include "runtime/prompts.cuh"
#include "runtime/serve.cuh"

namespace monocu {

struct Timings {
    double load_ms = 0, prompt_ms = 0, eval_ms = 0;
    int prompt_tokens = 0, eval_tokens = 0;
};

inline void print_timings(const Timings& t, double total_ms) {
    auto line = [](const char* what, double ms, int n, const char* unit) {
        std::fprintf(stderr, "monocu: %16s = %10.2f ms / %5d %-6s (%8.2f ms per token, %9.2f tokens per second)\n", what, ms, n,
                     unit, n ? ms / n : 0.0, ms > 0 ? 1000.0 * n / ms : 0.0);
    };
    std::fprintf(stderr, "monocu: %16s = %10.2f ms\n", "load time", t.load_ms);
    line("prompt eval time", t.prompt_ms, t.prompt_tokens, "tokens");
    line("eval time", t.eval_ms, t.eval_tokens, "runs");
    std::fprintf(stderr, "monocu: %16s = %10.2f ms / %5d tokens\n", "total time", total_ms, t.prompt_tokens + t.eval_tokens);
}

// The context: -c, or min(4096, max_position_embeddings); --bench makes room for its longest run.
inline int context_size(const Options& o, const ModelInfo& info) {
    int ctx = o.ctx_size > 0 ? o.ctx_size : std::min(4096, info.max_position);
    if (o.bench) {
        int need = *std::max_element(o.n_prompt.begin(), o.n_prompt.end()) + (o.n_predict > 0 ? o.n_predict : 128);
        if (o.parallel) need = std::max(need, o.n_prompt[0] + 65);  // bench_parallel's prefix-cache prompt: n-prompt + 64
        ctx = std::max(ctx, need);
    }
    if (ctx > info.max_position)
        std::fprintf(stderr, "warning: a context of %d exceeds max_position_embeddings %d; quality past it is unknown\n", ctx,
                     info.max_position);
    return ctx;
}

// One prompt: print it when it is raw text (the completion reads on from it), generate, print the timings.
// The one prompt of -p / -f / --ids, as text (empty for --ids) and ids: read and tokenized before the GPU.
struct Prompt {
    std::string text;
    std::vector<int> ids;
};

template <class M>
int generate_once(Runtime& rt, Generator<M>& g, const Tokenizer* tok, const ChatTemplate& ct, const Options& o, const Prompt& prompt,
                  const std::vector<int>& eos, double t_start, Timings& tm) {
    const std::string& text = prompt.text;
    const std::vector<int>& ids = prompt.ids;
    rt.taps.ids("prompt_ids", ids);
    FILE* trace = o.trace_file.empty() ? nullptr : std::fopen(o.trace_file.c_str(), "w");
    if (!o.trace_file.empty() && !trace) die("--trace %s: cannot open for writing", o.trace_file.c_str());
    if (trace) std::fprintf(trace, "token,position,ms\n");
    g.trace = trace;
    bool raw_prompt = o.ids_file.empty() && (o.raw || ct.empty());
    if (raw_prompt && !o.quiet) std::fputs(text.c_str(), stdout);
    bool chat = !raw_prompt && o.ids_file.empty() && tok;  // through the template: show reasoning and tool calls apart
    TokenPrinter out(chat ? nullptr : tok);
    std::unique_ptr<ReplyPrinter> reply = chat ? std::make_unique<ReplyPrinter>(*tok, ct, ids, o.show_reasoning) : nullptr;
    Generation r = g.run(ids, o.n_predict, eos, [&](int id) {
        if (reply) reply->push(id);
        else out.push(id);
        return true;
    });
    if (reply) reply->finish(o.seed);
    else out.finish();
    std::fputs("\n", stdout);
    std::fflush(stdout);  // before the timings on stderr
    if (trace) std::fclose(trace);
    g.trace = nullptr;
    rt.taps.ids("ids", r.tokens);
    tm.prompt_ms = r.prompt_ms, tm.prompt_tokens = r.prompt_tokens;
    tm.eval_ms = r.eval_ms, tm.eval_tokens = (int)r.tokens.size() - 1;
    if (r.finish == "context" && !o.quiet) std::fprintf(stderr, "monocu: stopped at the end of the context (%d tokens)\n", rt.ctx);
    if (!o.quiet) {
        print_timings(tm, wall_ms() - t_start);
        std::fprintf(stderr, "monocu: GPU memory: %s\n", rt.mem.report().c_str());
    }
    return 0;
}

// The batched core's KV pool: --kv-blocks, or enough for every sequence's whole context, as far as the memory left
// after the weights and activations allows (keeping 1 GiB and 3% of the card for cuBLAS, graphs and the attention
// scratch still to come).
inline int kv_pool_blocks(const AttnSpec& spec, KvType type, const Runtime& rt, const Options& o) {
    const size_t per_block = kv_bytes_per_token(type, spec.layers, spec.n_kv, spec.head_dim) * kKvBlockSize;
    const long want = (long)o.parallel * CEIL_DIV(rt.ctx, kKvBlockSize) + 1;
    if (o.kv_blocks) return o.kv_blocks;
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    size_t keep = (1ull << 30) + total_b / 33;
    long fit = free_b > keep ? (long)((free_b - keep) / per_block) : 0;
    long blocks = std::min(want, fit);
    if (blocks < 2) die("--parallel: no GPU memory is left for the KV cache (%.2f GB free)", free_b / 1e9);
    if (blocks < want)
        std::fprintf(stderr, "warning: the KV pool holds %ld of the %ld blocks that %d sequences of %d tokens could use; sequences wait "
                             "or are preempted when it runs out\n", blocks, want, o.parallel, rt.ctx);
    return (int)std::min<long>(blocks, INT32_MAX / 2 / kKvBlockSize);
}

template <class M>
int engine_main(int argc, char** argv) {
    return run_main([&]() -> int {
        Options o = parse_cli(argc, argv);
        if (o.help) {
            print_usage(stdout, M::kName);
            return 0;
        }
        double t_start = wall_ms();
        // Everything a user can get wrong, before the GPU.
        if (!path_is_dir(o.model)) die("-m %s: %s", o.model.c_str(), path_exists(o.model) ? "not a folder (give the checkpoint's folder)" : "no such folder");
        M m(o.model);
        ModelInfo info = m.info();
        GenerationConfig gen = load_generation_config(o.model);
        std::unique_ptr<Tokenizer> tok;  // optional with --ids and -i (tiny test models ship none)
        const bool ids_only = !o.ids_file.empty() || !o.in_file.empty();  // --ids, or a batch file's "prompt_ids" lines
        if (o.port && !path_exists(o.model + "/tokenizer.json")) die("%s: --port needs the checkpoint's tokenizer.json", o.model.c_str());
        if (!o.bench && (!ids_only || path_exists(o.model + "/tokenizer.json")))
            tok = std::make_unique<Tokenizer>(Tokenizer::load(o.model));
        ChatTemplate ct;  // the checkpoint's own (tokenizer/chat_template.h): parsed now, so a broken one is said now
        if (tok) ct = ChatTemplate::load(o.model, o.chat_template_file);
        if (!tok && !o.chat_template_file.empty()) die("%s: --chat-template-file needs tokenizer.json", o.model.c_str());
        if (!o.tools_file.empty()) o.tools_json = read_tools_file(o.tools_file);
        if (!o.force_routing.empty() && !path_is_dir(o.force_routing)) die("--force-routing %s: no such folder", o.force_routing.c_str());
        if (o.chat && ct.empty()) die("%s: -cnv needs a chat template (tokenizer_config.json or chat_template.jinja has none)", o.model.c_str());
        Prompt prompt;  // -p / -f / --ids: read and tokenized now (a bad file or invalid UTF-8 is said before the GPU)
        if (!o.bench && !o.chat && o.in_file.empty()) {
            if (o.ids_file.empty()) prompt.text = o.prompt_file.empty() ? o.prompt : read_text_file(o.prompt_file);
            prompt.ids = prompt_ids(o, prompt.text, info.vocab, tok.get(), ct);
        }
        if (!o.in_file.empty()) read_batch_lines(o.in_file);
        Checkpoint ck = Checkpoint::open(o.model);

        require_cuda_device();
        pdl_enabled() = pdl_enabled() && o.pdl;
        Runtime rt;
        rt.fmt = choose_weight_format(o.dtype, o.dtype_set, ck);
        rt.ctx = context_size(o, info);
        rt.max_tokens = o.ubatch;
        rt.taps = Taps(o.dump_dir, o.dump_inputs);
        rt.force_routing = o.force_routing;
        if (rt.taps.inputs)  // --dump-inputs: every planned projection's input, as its GEMM reads it
            rt.lin.on_input = [&rt](const std::string& name, const bf16* x, int rows, int cols, cudaStream_t s) { rt.taps.bf16(name, x, rows, cols, s); };
        upload_begin(ck.total_bytes());  // pinned staging for big checkpoints (host_upload.cuh)
        m.load(rt, ck);
        if (std::vector<std::string> unused = ck.unused(); !unused.empty())  // what the engine did not bind
            std::fprintf(stderr, "warning: %s: %zu tensors are not used by %s, e.g. '%s'\n", o.model.c_str(), unused.size(), M::kName,
                         unused[0].c_str());
        const KvType kv_type = o.kv_type == "fp8" ? KvType::FP8 : KvType::BF16;
        if (o.parallel) {  // the batched core (batched.cuh): activations first, then a KV pool from what memory is left
            rt.max_tokens = std::max(o.batch_tokens, o.parallel), rt.max_out = o.parallel;
            rt.slots = o.parallel + 1;  // a state slot per sequence (LFM2's conv), and one for the graphs' padding rows
            linears_alloc(rt.lin, rt.max_tokens, true, rt.mem);
            m.alloc(rt);
            int blocks = kv_pool_blocks(m.attn_spec(), kv_type, rt, o);
            rt.attn = attention_create(m.attn_spec(), kv_type, rt.ctx, 1, rt.max_tokens, o.kv_prefill_cache, rt.mem, {},
                                       KvPaging{blocks, kKvBlockSize, o.parallel, rt.ctx});
            CUDA_CHECK(cudaStreamSynchronize(rt.stream));
            upload_release();
            info = m.info();
            model_stats(info, rt);
            std::fprintf(stderr, "%s: %s; ctx %d per sequence, %d at once; weights %s, kv %s in %d blocks of %d (%.2f GB); GPU memory: %s\n",
                         M::kName, info.summary.c_str(), rt.ctx, o.parallel, wformat_name(rt.fmt), o.kv_type.c_str(), blocks, kKvBlockSize,
                         rt.mem.bytes("kv cache") / 1e9, rt.mem.report().c_str());
            BatchedRunner<M> br(m, rt, blocks, o.batch_tokens, o.parallel, o.cuda_graphs);
            if (o.bench) return bench_parallel(m, rt, br, o);
            SamplingParams sp = sampling_params(o, gen);
            if (o.port) return serve(br, ServeModel{tok.get(), &ct, info.vocab, rt.ctx, end_of_generation_ids(info, gen, tok.get()), sp, o.no_think}, o);
            return batch_file_parallel(br, tok.get(), ct, o, info.vocab, end_of_generation_ids(info, gen, tok.get()), sp);
        }
        rt.attn = attention_create(m.attn_spec(), kv_type, rt.ctx, rt.slots, rt.max_tokens, o.kv_prefill_cache, rt.mem,
                                   KvEviction{o.kv_budget, o.kv_window});
        linears_alloc(rt.lin, rt.max_tokens, !o.dump_dir.empty(), rt.mem);
        m.alloc(rt);
        Generator<M> g(m, rt, o.cuda_graphs, o.ubatch);
        CUDA_CHECK(cudaStreamSynchronize(rt.stream));
        upload_release();  // the loaders' pinned buffers (host_upload.cuh)
        Timings tm;
        tm.load_ms = wall_ms() - t_start;
        info = m.info();
        model_stats(info, rt);
        if (o.verbose || o.bench)
            std::fprintf(stderr, "%s: %s; ctx %d; weights %s, kv %s%s; GPU memory: %s\n", M::kName, info.summary.c_str(), rt.ctx,
                         wformat_name(rt.fmt), o.kv_type.c_str(), kv_eviction_note(rt.attn).c_str(), rt.mem.report().c_str());
        if (o.bench) return bench(m, rt, g, o);

        SamplingParams sp = sampling_params(o, gen);
        g.set_sampling(sp);
        if (o.verbose)
            std::fprintf(stderr, "sampling: temp %.3g, top_k %d, top_p %.3g, min_p %.3g, repeat_penalty %.3g, presence %.3g, frequency %.3g, seed %llu\n",
                         sp.temperature, sp.top_k, sp.top_p, sp.min_p, sp.repetition_penalty, sp.presence_penalty, sp.frequency_penalty,
                         (unsigned long long)sp.seed);
        std::vector<int> eos = end_of_generation_ids(info, gen, tok.get());
        if (o.chat) return chat_loop(g, tok.get(), ct, o, info.vocab, eos);
        if (!o.in_file.empty()) return batch_file(g, tok.get(), ct, o, info.vocab, eos);
        return generate_once(rt, g, tok.get(), ct, o, prompt, eos, t_start, tm);
    });
}

}  // namespace monocu
