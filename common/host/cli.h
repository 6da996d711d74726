// host/cli.h — the one command line every engine takes, with llama.cpp's flag names.
//
// Usage:
//   int main(int argc, char** argv) {
//       return run_main([&] {
//           Options o = parse_cli(argc, argv, "qwen3");   // throws UsageError (exit 2) on a bad flag
//           if (o.help) { print_usage(stdout, "qwen3"); return 0; }
//           ...
//       });
//   }
//
// Every flag is checked here: an unknown flag, a missing value, a value that is not a number, or a number
// out of range is a UsageError naming the flag. Sampling flags remember whether they were given
// (o.temp_set, ...), so an engine can fall back to the checkpoint's generation_config.json.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "host/errors.h"

namespace monocu {

struct Options {
    std::string model;        // -m: checkpoint folder
    std::string prompt;       // -p
    std::string prompt_file;  // -f
    std::string ids_file;     // --ids: token ids instead of text
    std::string system;       // --system: system message for the chat template
    std::string tools_file;   // --tools: OpenAI function schemas (a JSON list) for the chat template
    std::string tools_json;   // ... that file's text, read and checked by the runner before the GPU
    std::string chat_template_file;  // --chat-template-file: a Jinja chat template instead of the checkpoint's
    int n_predict = -1;       // -n: tokens to generate; -1 = until an end-of-generation token or a full context
    int ctx_size = 0;         // -c: 0 = min(4096, max_position_embeddings)
    double temp = 0.8, top_p = 0.95, min_p = 0.05, repeat_penalty = 1.0;
    double presence_penalty = 0.0, frequency_penalty = 0.0;  // OpenAI's, over the generated tokens
    int top_k = 40;
    bool temp_set = false, top_p_set = false, min_p_set = false, repeat_penalty_set = false, top_k_set = false;
    uint64_t seed = 0;
    bool seed_set = false;     // -s; unset: a seed from the clock, printed with -v
    bool raw = false;          // --raw: no chat template
    bool no_think = false;     // --no-think: Qwen3's enable_thinking=False
    std::string dtype = "bf16";    // --dtype: weight format on the GPU (default: bf16, or what a quantized checkpoint holds)
    bool dtype_set = false;
    std::string kv_type = "bf16";  // --kv-type: KV-cache format
    int kv_budget = 0;         // --kv-budget: H2O eviction keeps this many tokens per head (0: off)
    int kv_window = 0;         // --kv-window: ... of which the newest this many always (0: half the budget)
    std::string dump_dir;      // --dump-dir: float32 .npy per tap for the prompt positions
    bool dump_inputs = false;  // --dump-inputs: with --dump-dir, also every projection's input (tools/quantize --calib)
    std::string force_routing; // --force-routing: a mixture's expert choices from DIR/routing_NN.npy (oracle/dump.py)
    bool bench = false;        // --bench: random prompt of --n-prompt tokens, then -n decoded
    std::vector<int> n_prompt = {512};  // --n-prompt: prompt length(s) for --bench, e.g. 512,4096,16384
    std::string trace_file;    // --trace: per-token timings as CSV
    std::string timeline_file; // --timeline: with --bench, in a profiling build (make trace): block timestamps
    bool cuda_graphs = true;   // --no-cuda-graphs turns capture of the decode step off
    bool pdl = true;           // --no-pdl: no programmatic dependent launch (kernels do not overlap)
    bool kv_prefill_cache = false;  // --kv-prefill-cache: a prompt's attention reads the KV cache, as decode does
    bool chat = false;         // -cnv / --conversation / --chat: interactive chat in the terminal
    bool show_reasoning = true;  // --hide-reasoning: a reply's reasoning (<think>, harmony's analysis) is not printed;
                                 // --show-reasoning (the default): it is, dimmed on a terminal
    std::string in_file;       // -i: batch file of prompts (one per line, or JSONL with "prompt" or "messages")
    std::string out_file;      // -o: with -i, where the JSONL results go
    int ubatch = 2048;         // -ub: tokens per prefill pass (1: a prompt runs as decode steps)
    int parallel = 0;          // -np / --parallel: sequences the batched core runs at once (0: one prompt at a time)
    int batch_tokens = 2048;   // --batch-tokens: tokens of one batched pass (decode steps and prompt chunks)
    int kv_blocks = 0;         // --kv-blocks: the batched core's KV pool in blocks of 16 positions (0: what memory allows)
    int port = 0;              // --port: serve the OpenAI API here (runtime/serve.cuh); 0: no server
    std::string host = "127.0.0.1";  // --host: the address it listens on
    std::string api_key;       // --api-key: requests must carry "Authorization: Bearer KEY"
    std::string alias;         // --alias: the model's name in the API (default: the checkpoint folder's name)
    bool quiet = false, verbose = false, help = false;
};

inline void print_usage(FILE* out, const char* engine) {
    std::fprintf(out,
                 "usage: %s -m MODEL_DIR [-p PROMPT | -f FILE | --ids FILE | -cnv | -i FILE -o FILE | --bench] [options]\n"
                 "\n"
                 "  -m, --model DIR        checkpoint folder (config.json, *.safetensors, tokenizer.json)\n"
                 "  -p, --prompt TEXT      prompt text\n"
                 "  -f, --file FILE        read the prompt from FILE\n"
                 "      --ids FILE         prompt as token ids (whitespace- or comma-separated, or a JSON list)\n"
                 "  -cnv, --conversation   chat in the terminal with the model's chat template (also --chat); the\n"
                 "                         KV cache is kept across turns; Ctrl-C stops a reply; /exit or end of input quits\n"
                 "  -i, --in-file FILE     batch: one prompt per line, or JSONL lines with \"prompt\" or \"messages\"\n"
                 "  -o, --out-file FILE    with -i: one JSON line per input line (text, token counts, finish reason)\n"
                 "      --system TEXT      system message (chat template only)\n"
                 "      --tools FILE       tools the model may call: a JSON list of OpenAI function schemas, given to\n"
                 "                         the chat template; the calls it makes are shown apart (-cnv) or returned (-i)\n"
                 "      --raw              no chat template: the prompt is the raw text\n"
                 "      --chat-template-file FILE  a Jinja chat template to use instead of the checkpoint's\n"
                 "      --no-think         Qwen3: render the template with enable_thinking=False\n"
                 "      --hide-reasoning   a reply's reasoning (<think>, gpt-oss's analysis channel) is not printed\n"
                 "      --show-reasoning   it is, dimmed on a terminal (the default)\n"
                 "  -n, --n-predict N      tokens to generate (default -1: until end of generation or full context)\n"
                 "  -c, --ctx-size N       context size in tokens (default min(4096, max_position_embeddings))\n"
                 "      --temp T           temperature; 0 = greedy (default: generation_config.json, else 0.8)\n"
                 "      --top-k N          keep the N most likely tokens; 0 = off (default: generation_config, else 40)\n"
                 "      --top-p P          nucleus sampling; 1 = off (default: generation_config, else 0.95)\n"
                 "      --min-p P          drop tokens below P x the top probability; 0 = off (default 0.05)\n"
                 "      --repeat-penalty F penalise tokens already in the prompt or output, as transformers does (1 = off)\n"
                 "      --presence-penalty F  subtract F from tokens generated so far (OpenAI's; default 0)\n"
                 "      --frequency-penalty F subtract F x the times a token was generated so far (OpenAI's; default 0)\n"
                 "  -s, --seed N           sampling seed (default: from the clock)\n"
                 "      --dtype T          weights on the GPU: bf16 | fp8 | int4 (default bf16)\n"
                 "      --kv-type T        KV cache: bf16 | fp8 (default bf16)\n"
                 "      --kv-budget N      H2O eviction: each attention head keeps N tokens, the --kv-window newest and the\n"
                 "                         rest by accumulated attention (default off; the cache holds N + -ub rows)\n"
                 "      --kv-window W      with --kv-budget: the newest W tokens always stay (default N / 2)\n"
                 "  -ub, --ubatch-size N   prompt tokens per forward pass (default 2048; 1 runs a prompt as decode steps)\n"
                 "      --kv-prefill-cache the prompt attends through the KV cache, as decode does, not to its own\n"
                 "                         fp16 keys (to measure what the cache's rounding costs)\n"
                 "      --dump-dir DIR     write float32 .npy activations for the prompt positions (oracle taps)\n"
                 "      --dump-inputs      with --dump-dir: also each layer's projection inputs (calibration for\n"
                 "                         tools/quantize --calib)\n"
                 "      --force-routing DIR  a mixture-of-experts model takes its expert choices for the prompt positions\n"
                 "                         from DIR/routing_NN.npy (oracle/dump.py's), to check its math apart from near ties\n"
                 "  -np, --parallel N      run up to N sequences at once (continuous batching over a paged KV cache):\n"
                 "                         with -i, the file's prompts; with --bench, N concurrent random prompts\n"
                 "      --batch-tokens N   tokens per batched pass, decode steps and prompt chunks (default 2048)\n"
                 "      --kv-blocks N      with -np: the KV pool, in blocks of 16 positions (default: as memory allows)\n"
                 "      --port N           serve an OpenAI-compatible API on port N (/v1/chat/completions, /v1/completions,\n"
                 "                         /v1/models, /health, /metrics, /tokenize, /detokenize); -np sequences at once\n"
                 "                         (default 4), -c tokens each\n"
                 "      --host ADDR        with --port: the address to listen on (default 127.0.0.1)\n"
                 "      --api-key KEY      with --port: requests must send \"Authorization: Bearer KEY\"\n"
                 "      --alias NAME       with --port: the model's name in the API (default: the folder's name)\n"
                 "      --bench            benchmark: --n-prompt random tokens, then -n decoded (default 128)\n"
                 "      --n-prompt N[,N..] prompt length(s) for --bench (default 512), e.g. 512,4096,16384\n"
                 "      --no-cuda-graphs   launch the decode step kernel by kernel\n"
                 "      --no-pdl           do not let a kernel start before the previous one ends (Hopper+)\n"
                 "      --trace FILE       write per-token timings (CSV)\n"
                 "      --timeline FILE    with --bench, in a `make trace` build: every decode kernel block's timestamps for 3\n"
                 "                         steps per prompt length, to FILE.<n-prompt> (oracle/trace_report.py reads them)\n"
                 "  -q, --quiet            print only the generated text\n"
                 "  -v, --verbose          print config, memory and sampling details\n"
                 "  -h, --help             this text\n",
                 engine);
}

namespace cli_detail {

inline long long parse_int(const std::string& flag, const char* s, long long lo, long long hi) {
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno == ERANGE) die_usage("%s: '%s' is not an integer", flag.c_str(), s);
    if (v < lo || v > hi) die_usage("%s: %lld is out of range [%lld, %lld]", flag.c_str(), v, lo, hi);
    return v;
}

inline double parse_real(const std::string& flag, const char* s, double lo, double hi) {
    errno = 0;
    char* end = nullptr;
    double v = std::strtod(s, &end);
    if (*s == '\0' || *end != '\0' || errno == ERANGE || !std::isfinite(v))
        die_usage("%s: '%s' is not a number", flag.c_str(), s);
    if (v < lo || v > hi) die_usage("%s: %g is out of range [%g, %g]", flag.c_str(), v, lo, hi);
    return v;
}

// "512,4096,16384": each entry an integer in [lo, hi].
inline std::vector<int> parse_int_list(const std::string& flag, const char* s, long long lo, long long hi) {
    std::vector<int> out;
    std::string all = s, item;
    size_t b = 0;
    while (true) {
        size_t e = all.find(',', b);
        item = all.substr(b, e == std::string::npos ? std::string::npos : e - b);
        out.push_back(static_cast<int>(parse_int(flag, item.c_str(), lo, hi)));
        if (e == std::string::npos) break;
        b = e + 1;
    }
    return out;
}

inline std::string parse_choice(const std::string& flag, const char* s, std::initializer_list<const char*> choices) {
    std::string all;
    for (const char* c : choices) {
        if (std::strcmp(s, c) == 0) return s;
        all += (all.empty() ? "" : ", ") + std::string(c);
    }
    die_usage("%s: '%s' is not one of %s", flag.c_str(), s, all.c_str());
}

}  // namespace cli_detail

inline Options parse_cli(int argc, char** argv) {
    using namespace cli_detail;
    Options o;
    const long long kIntMax = 0x7fffffff;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto value = [&]() -> const char* {
            if (i + 1 >= argc) die_usage("%s needs a value", a.c_str());
            return argv[++i];
        };
        if (a == "-h" || a == "--help") o.help = true;
        else if (a == "-m" || a == "--model") o.model = value();
        else if (a == "-p" || a == "--prompt") o.prompt = value();
        else if (a == "-f" || a == "--file") o.prompt_file = value();
        else if (a == "--ids") o.ids_file = value();
        else if (a == "--system") o.system = value();
        else if (a == "--tools") o.tools_file = value();
        else if (a == "--raw") o.raw = true;
        else if (a == "--no-think") o.no_think = true;
        else if (a == "--show-reasoning") o.show_reasoning = true;
        else if (a == "--hide-reasoning") o.show_reasoning = false;
        else if (a == "-n" || a == "--n-predict") o.n_predict = static_cast<int>(parse_int(a, value(), -1, kIntMax));
        else if (a == "-c" || a == "--ctx-size") o.ctx_size = static_cast<int>(parse_int(a, value(), 1, kIntMax));
        else if (a == "--temp") { o.temp = parse_real(a, value(), 0, 100); o.temp_set = true; }
        else if (a == "--top-k") { o.top_k = static_cast<int>(parse_int(a, value(), 0, kIntMax)); o.top_k_set = true; }
        else if (a == "--top-p") { o.top_p = parse_real(a, value(), 0, 1); o.top_p_set = true; }
        else if (a == "--min-p") { o.min_p = parse_real(a, value(), 0, 1); o.min_p_set = true; }
        else if (a == "--repeat-penalty") { o.repeat_penalty = parse_real(a, value(), 1e-3, 100); o.repeat_penalty_set = true; }
        else if (a == "--presence-penalty") o.presence_penalty = parse_real(a, value(), -2, 2);
        else if (a == "--frequency-penalty") o.frequency_penalty = parse_real(a, value(), -2, 2);
        else if (a == "-s" || a == "--seed") {
            const char* s = value();
            if (s[0] == '-') die_usage("%s: '%s' must be a non-negative integer", a.c_str(), s);
            o.seed = static_cast<uint64_t>(parse_int(a, s, 0, 0x7fffffffffffffffLL));
            o.seed_set = true;
        }
        else if (a == "--dtype") { o.dtype = parse_choice(a, value(), {"bf16", "fp8", "int4"}); o.dtype_set = true; }
        else if (a == "--kv-type") o.kv_type = parse_choice(a, value(), {"bf16", "fp8"});
        else if (a == "--kv-budget") o.kv_budget = static_cast<int>(parse_int(a, value(), 1, kIntMax));
        else if (a == "--kv-window") o.kv_window = static_cast<int>(parse_int(a, value(), 1, kIntMax));
        else if (a == "--dump-dir") o.dump_dir = value();
        else if (a == "--force-routing") o.force_routing = value();
        else if (a == "--dump-inputs") o.dump_inputs = true;
        else if (a == "--bench") o.bench = true;
        else if (a == "--n-prompt") o.n_prompt = parse_int_list(a, value(), 1, kIntMax);
        else if (a == "--trace") o.trace_file = value();
        else if (a == "--timeline") o.timeline_file = value();
        else if (a == "--no-cuda-graphs") o.cuda_graphs = false;
        else if (a == "--no-pdl") o.pdl = false;
        else if (a == "--kv-prefill-cache") o.kv_prefill_cache = true;
        else if (a == "-cnv" || a == "--conversation" || a == "--chat") o.chat = true;
        else if (a == "-i" || a == "--in-file") o.in_file = value();
        else if (a == "-o" || a == "--out-file") o.out_file = value();
        else if (a == "-ub" || a == "--ubatch-size") o.ubatch = static_cast<int>(parse_int(a, value(), 1, 2048));
        else if (a == "-np" || a == "--parallel") o.parallel = static_cast<int>(parse_int(a, value(), 1, 1024));
        else if (a == "--batch-tokens") o.batch_tokens = static_cast<int>(parse_int(a, value(), 1, 16384));
        else if (a == "--kv-blocks") o.kv_blocks = static_cast<int>(parse_int(a, value(), 2, kIntMax));
        else if (a == "--chat-template-file") o.chat_template_file = value();
        else if (a == "--port") o.port = static_cast<int>(parse_int(a, value(), 1, 65535));
        else if (a == "--host") o.host = value();
        else if (a == "--api-key") o.api_key = value();
        else if (a == "--alias") o.alias = value();
        else if (a == "-q" || a == "--quiet") o.quiet = true;
        else if (a == "-v" || a == "--verbose") o.verbose = true;
        else die_usage("unknown flag '%s'", a.c_str());
    }
    if (o.help) return o;
    if (o.model.empty()) die_usage("-m MODEL_DIR is required");
    int sources = !o.prompt.empty() + !o.prompt_file.empty() + !o.ids_file.empty();
    int modes = o.chat + !o.in_file.empty() + o.bench + (o.port > 0);
    if (sources > 1) die_usage("give only one of -p, -f and --ids");
    if (modes > 1) die_usage("give only one of -cnv, -i, --bench and --port");
    if (sources == 0 && modes == 0) die_usage("give a prompt with -p, -f or --ids (or -cnv, -i FILE, --bench, --port N)");
    if (o.port && sources) die_usage("--port serves requests; it does not take -p, -f or --ids");
    if (!o.port && (o.host != "127.0.0.1" || !o.api_key.empty() || !o.alias.empty())) die_usage("--host, --api-key and --alias go with --port");
    if (o.port && o.host.empty()) die_usage("--host: an empty address");
    if (o.port && !o.parallel) o.parallel = 4;  // the server runs on the batched core
    if (modes == 1 && sources == 1 && !o.chat) die_usage("-p, -f and --ids do not go with -i or --bench");
    if (o.chat && (!o.prompt_file.empty() || !o.ids_file.empty())) die_usage("-cnv takes a first message with -p only");
    if (!o.in_file.empty() && o.out_file.empty()) die_usage("-i needs -o FILE for the results");
    if (!o.out_file.empty() && o.in_file.empty()) die_usage("-o goes with -i");
    if (!o.in_file.empty() && !o.dump_dir.empty()) die_usage("--dump-dir does not go with -i");
    if (o.chat && !o.dump_dir.empty()) die_usage("--dump-dir does not go with -cnv");
    if (o.chat && o.raw) die_usage("-cnv needs the chat template (not --raw)");
    if (o.raw && !o.chat_template_file.empty()) die_usage("--raw and --chat-template-file contradict each other");
    if (o.quiet && o.verbose) die_usage("-q and -v contradict each other");
    if (!o.timeline_file.empty() && !o.bench) die_usage("--timeline needs --bench");
    if (o.dump_inputs && o.dump_dir.empty()) die_usage("--dump-inputs needs --dump-dir");
    if (o.kv_window && !o.kv_budget) die_usage("--kv-window needs --kv-budget");
    if (o.kv_window > o.kv_budget) die_usage("--kv-window %d is larger than --kv-budget %d", o.kv_window, o.kv_budget);
    if (o.kv_budget && !o.kv_window) o.kv_window = (o.kv_budget + 1) / 2;
    if (o.parallel && o.in_file.empty() && !o.bench && !o.port) die_usage("--parallel runs a batch file (-i), --bench or the server (--port)");
    if (o.parallel && o.kv_budget) die_usage("--parallel does not go with --kv-budget");
    if (o.parallel && !o.dump_dir.empty()) die_usage("--parallel does not go with --dump-dir");
    if (o.kv_blocks && !o.parallel) die_usage("--kv-blocks goes with --parallel");
    return o;
}

}  // namespace monocu
