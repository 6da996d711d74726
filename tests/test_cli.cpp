#include <doctest/doctest.h>

#include "host/cli.h"

using namespace monocu;

static Options parse(std::vector<std::string> args) {
    args.insert(args.begin(), "engine");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(&a[0]);
    return parse_cli(static_cast<int>(argv.size()), argv.data());
}

static std::string usage_error(std::vector<std::string> args) {
    try {
        parse(args);
    } catch (const UsageError& e) {
        return e.what();
    }
    return "";
}

TEST_CASE("llama.cpp flag names, short and long") {
    Options o = parse({"-m", "dir", "-p", "hello", "-n", "32", "-c", "2048", "--temp", "0", "--top-k", "5", "--top-p",
                       "0.9", "--min-p", "0.1", "--repeat-penalty", "1.1", "-s", "42", "--raw", "--dtype", "fp8",
                       "--kv-type", "fp8", "--dump-dir", "out", "--trace", "t.csv", "-v"});
    CHECK(o.model == "dir");
    CHECK(o.prompt == "hello");
    CHECK(o.n_predict == 32);
    CHECK(o.ctx_size == 2048);
    CHECK(o.temp == 0.0);
    CHECK(o.temp_set);
    CHECK(o.top_k == 5);
    CHECK(o.top_p == doctest::Approx(0.9));
    CHECK(o.min_p == doctest::Approx(0.1));
    CHECK(o.repeat_penalty == doctest::Approx(1.1));
    CHECK(o.seed == 42);
    CHECK(o.seed_set);
    CHECK(o.raw);
    CHECK(o.dtype == "fp8");
    CHECK(o.kv_type == "fp8");
    CHECK(o.dump_dir == "out");
    CHECK(o.trace_file == "t.csv");
    CHECK(o.verbose);
    Options l = parse({"--model", "d", "--n-predict", "-1", "--ctx-size", "8", "--seed", "0",
                       "--bench", "--n-prompt", "64", "--no-cuda-graphs", "--no-pdl", "--kv-prefill-cache", "-q"});
    CHECK(parse({"--model", "d", "--file", "f.txt"}).prompt_file == "f.txt");
    CHECK(l.n_predict == -1);
    CHECK(l.bench);
    CHECK(l.n_prompt == std::vector<int>{64});
    CHECK_FALSE(l.cuda_graphs);
    CHECK_FALSE(l.pdl);
    CHECK(l.kv_prefill_cache);
    CHECK(parse({"-m", "d", "--bench"}).pdl);
    CHECK_FALSE(parse({"-m", "d", "--bench"}).kv_prefill_cache);
    CHECK(l.quiet);
    CHECK_FALSE(l.temp_set);
    CHECK(parse({"-h"}).help);
    CHECK(parse({"-m", "d", "--bench"}).n_prompt == std::vector<int>{512});
    CHECK(parse({"-m", "d", "--bench", "--n-prompt", "512,4096,16384"}).n_prompt == std::vector<int>{512, 4096, 16384});
    CHECK(parse({"-m", "d", "--bench", "--timeline", "tl"}).timeline_file == "tl");
}

TEST_CASE("bad flags and values are one-line usage errors naming the flag") {
    CHECK(usage_error({"-m", "d", "-p", "x", "--frobnicate"}) == "unknown flag '--frobnicate'");
    CHECK(usage_error({"-m", "d", "-p"}) == "-p needs a value");
    CHECK(usage_error({"-m", "d", "-p", "x", "-n", "ten"}) == "-n: 'ten' is not an integer");
    CHECK(usage_error({"-m", "d", "-p", "x", "-n", "-2"}) == "-n: -2 is out of range [-1, 2147483647]");
    CHECK(usage_error({"-m", "d", "-p", "x", "-n", "99999999999999999999"}) == "-n: '99999999999999999999' is not an integer");
    CHECK(usage_error({"-m", "d", "-p", "x", "-c", "0"}) == "-c: 0 is out of range [1, 2147483647]");
    CHECK(usage_error({"-m", "d", "-p", "x", "--temp", "hot"}) == "--temp: 'hot' is not a number");
    CHECK(usage_error({"-m", "d", "-p", "x", "--temp", "nan"}) == "--temp: 'nan' is not a number");
    CHECK(usage_error({"-m", "d", "-p", "x", "--temp", "-1"}) == "--temp: -1 is out of range [0, 100]");
    CHECK(usage_error({"-m", "d", "-p", "x", "--top-p", "1.5"}) == "--top-p: 1.5 is out of range [0, 1]");
    CHECK(usage_error({"-m", "d", "-p", "x", "--top-k", "2.5"}) == "--top-k: '2.5' is not an integer");
    CHECK(usage_error({"-m", "d", "-p", "x", "-s", "-1"}) == "-s: '-1' must be a non-negative integer");
    CHECK(usage_error({"-m", "d", "--bench", "--n-prompt", "512,,9"}) == "--n-prompt: '' is not an integer");
    CHECK(usage_error({"-m", "d", "--bench", "--n-prompt", "512,0"}) == "--n-prompt: 0 is out of range [1, 2147483647]");
    CHECK(usage_error({"-m", "d", "-p", "x", "--dtype", "fp4"}) == "--dtype: 'fp4' is not one of bf16, fp8, int4");
    CHECK(usage_error({"-m", "d", "-p", "x", "--kv-type", "int8"}) == "--kv-type: 'int8' is not one of bf16, fp8");
    CHECK(usage_error({"-m", "d", "-p", "x", "--kv-window", "8"}) == "--kv-window needs --kv-budget");
    CHECK(usage_error({"-m", "d", "-p", "x", "--kv-budget", "8", "--kv-window", "9"}) == "--kv-window 9 is larger than --kv-budget 8");
    CHECK(usage_error({"-m", "d", "-p", "x", "--kv-budget", "0"}) == "--kv-budget: 0 is out of range [1, 2147483647]");
    CHECK(parse({"-m", "d", "-p", "x", "--kv-budget", "9"}).kv_window == 5);  // half the budget, rounded up
    CHECK(parse({"-m", "d", "-p", "x", "--kv-budget", "9", "--kv-window", "9"}).kv_window == 9);
    // The batched core's flags (runtime/batched.cuh)
    CHECK(usage_error({"-m", "d", "-p", "x", "-np", "4"}) == "--parallel runs a batch file (-i), --bench or the server (--port)");
    CHECK(usage_error({"-m", "d", "--bench", "-np", "0"}) == "-np: 0 is out of range [1, 1024]");
    CHECK(usage_error({"-m", "d", "--bench", "--parallel", "4", "--kv-budget", "64"}) == "--parallel does not go with --kv-budget");
    CHECK(usage_error({"-m", "d", "--bench", "--kv-blocks", "64"}) == "--kv-blocks goes with --parallel");
    CHECK(usage_error({"-m", "d", "--bench", "-np", "2", "--kv-blocks", "1"}) == "--kv-blocks: 1 is out of range [2, 2147483647]");
    CHECK(usage_error({"-m", "d", "--bench", "-np", "2", "--batch-tokens", "0"}) == "--batch-tokens: 0 is out of range [1, 16384]");
    {
        Options o = parse({"-m", "d", "-i", "in", "-o", "out", "-np", "16", "--batch-tokens", "512", "--kv-blocks", "100"});
        CHECK(o.parallel == 16);
        CHECK(o.batch_tokens == 512);
        CHECK(o.kv_blocks == 100);
        CHECK(parse({"-m", "d", "--bench"}).parallel == 0);  // one prompt at a time unless asked
        CHECK(parse({"-m", "d", "--bench"}).batch_tokens == 2048);
    }
    // The server's flags (runtime/serve.cuh)
    {
        Options o = parse({"-m", "d", "--port", "8080", "--host", "0.0.0.0", "--api-key", "k", "--alias", "m"});
        CHECK(o.port == 8080);
        CHECK(o.host == "0.0.0.0");
        CHECK(o.api_key == "k");
        CHECK(o.alias == "m");
        CHECK(o.parallel == 4);  // the server runs on the batched core
        CHECK(parse({"-m", "d", "--port", "1", "-np", "32"}).parallel == 32);
    }
    CHECK(usage_error({"-m", "d", "--port", "0"}) == "--port: 0 is out of range [1, 65535]");
    CHECK(usage_error({"-m", "d", "--port", "70000"}) == "--port: 70000 is out of range [1, 65535]");
    CHECK(usage_error({"-m", "d", "--port", "80", "-p", "x"}) == "--port serves requests; it does not take -p, -f or --ids");
    CHECK(usage_error({"-m", "d", "--port", "80", "--bench"}) == "give only one of -cnv, -i, --bench and --port");
    CHECK(usage_error({"-m", "d", "-p", "x", "--api-key", "k"}) == "--host, --api-key and --alias go with --port");
    CHECK(usage_error({"-m", "d", "--port", "80", "--host", ""}) == "--host: an empty address");
    CHECK(parse({"-m", "d", "--port", "80", "--chat-template-file", "t.jinja"}).chat_template_file == "t.jinja");
    CHECK(parse({"-m", "d", "-p", "x", "--presence-penalty", "0.5", "--frequency-penalty", "-1"}).presence_penalty == 0.5);
    CHECK(parse({"-m", "d", "-p", "x", "--frequency-penalty", "-1"}).frequency_penalty == -1);
    CHECK(usage_error({"-m", "d", "-p", "x", "--presence-penalty", "3"}) == "--presence-penalty: 3 is out of range [-2, 2]");
    CHECK(usage_error({"-m", "d", "-p", "x", "--raw", "--chat-template-file", "t"}) == "--raw and --chat-template-file contradict each other");
    CHECK(usage_error({"-p", "x"}) == "-m MODEL_DIR is required");
    CHECK(usage_error({"-m", "d"}) == "give a prompt with -p, -f or --ids (or -cnv, -i FILE, --bench, --port N)");
    CHECK(usage_error({"-m", "d", "-p", "x", "-f", "y"}) == "give only one of -p, -f and --ids");
    CHECK(usage_error({"-m", "d", "-p", "x", "-q", "-v"}) == "-q and -v contradict each other");
    CHECK(usage_error({"-m", "d", "-p", "x", "--timeline", "tl"}) == "--timeline needs --bench");
    CHECK(usage_error({"-m", "d", "-p", "x", "--dump-inputs"}) == "--dump-inputs needs --dump-dir");
    CHECK(parse({"-m", "d", "-p", "x", "--dump-dir", "o", "--dump-inputs"}).dump_inputs);
    CHECK_FALSE(parse({"-m", "d", "-p", "x", "--dump-dir", "o"}).dump_inputs);
}

TEST_CASE("chat, batch files and the prefill pass size: llama.cpp's spellings and what does not go together") {
    CHECK(parse({"-m", "d", "-cnv"}).chat);
    CHECK(parse({"-m", "d", "--conversation", "--system", "be brief"}).chat);
    CHECK(parse({"-m", "d", "-cnv", "--tools", "t.json"}).tools_file == "t.json");
    CHECK(parse({"-m", "d", "--chat", "-p", "first message"}).chat);
    CHECK(parse({"-m", "d", "-cnv"}).show_reasoning);  // reasoning is shown (dimmed) unless hidden
    CHECK_FALSE(parse({"-m", "d", "-cnv", "--hide-reasoning"}).show_reasoning);
    CHECK(parse({"-m", "d", "-cnv", "--hide-reasoning", "--show-reasoning"}).show_reasoning);  // the last one wins
    Options b = parse({"-m", "d", "-i", "in.txt", "-o", "out.jsonl", "-n", "16"});
    CHECK(b.in_file == "in.txt");
    CHECK(b.out_file == "out.jsonl");
    CHECK(parse({"-m", "d", "-p", "x", "-ub", "1"}).ubatch == 1);
    CHECK(parse({"-m", "d", "-p", "x", "--ubatch-size", "512"}).ubatch == 512);
    CHECK(parse({"-m", "d", "-p", "x"}).ubatch == 2048);
    CHECK(usage_error({"-m", "d", "-p", "x", "-ub", "0"}) == "-ub: 0 is out of range [1, 2048]");
    CHECK(usage_error({"-m", "d", "-p", "x", "-ub", "4096"}) == "-ub: 4096 is out of range [1, 2048]");
    CHECK(usage_error({"-m", "d", "-cnv", "--bench"}) == "give only one of -cnv, -i, --bench and --port");
    CHECK(usage_error({"-m", "d", "-i", "a", "-o", "b", "-cnv"}) == "give only one of -cnv, -i, --bench and --port");
    CHECK(usage_error({"-m", "d", "-i", "a"}) == "-i needs -o FILE for the results");
    CHECK(usage_error({"-m", "d", "-p", "x", "-o", "b"}) == "-o goes with -i");
    CHECK(usage_error({"-m", "d", "-i", "a", "-o", "b", "-p", "x"}) == "-p, -f and --ids do not go with -i or --bench");
    CHECK(usage_error({"-m", "d", "-cnv", "-f", "x"}) == "-cnv takes a first message with -p only");
    CHECK(usage_error({"-m", "d", "-cnv", "--raw"}) == "-cnv needs the chat template (not --raw)");
    CHECK(usage_error({"-m", "d", "-cnv", "--dump-dir", "o"}) == "--dump-dir does not go with -cnv");
    CHECK(usage_error({"-m", "d", "-i", "a", "-o", "b", "--dump-dir", "o"}) == "--dump-dir does not go with -i");
}

#include "host/prompt.h"

TEST_CASE("token-id prompts: three spellings, and every bad entry named") {
    CHECK(parse_ids("1 2 3", "f", 10) == std::vector<int>{1, 2, 3});
    CHECK(parse_ids("1,2,\n3\n", "f", 10) == std::vector<int>{1, 2, 3});
    CHECK(parse_ids(" [4, 5, 6] \n", "f", 10) == std::vector<int>{4, 5, 6});
    CHECK_THROWS_WITH_AS(parse_ids("1 x 3", "ids.txt", 10), "ids.txt: 'x' is not a token id", UserError);
    CHECK_THROWS_WITH_AS(parse_ids("1 12 3", "ids.txt", 10), "ids.txt: token id 12 is outside the vocabulary [0, 10)", UserError);
    CHECK_THROWS_WITH_AS(parse_ids("-1", "ids.txt", 10), "ids.txt: token id -1 is outside the vocabulary [0, 10)", UserError);
    CHECK_THROWS_WITH_AS(parse_ids("99999999999999", "ids.txt", 10), "ids.txt: '99999999999999' is not a token id", UserError);
    CHECK_THROWS_WITH_AS(parse_ids("[1, 2", "ids.txt", 10), "ids.txt: missing ']'", UserError);
    CHECK_THROWS_WITH_AS(parse_ids("[1] 2", "ids.txt", 10), "ids.txt: text after ']'", UserError);
    CHECK_THROWS_WITH_AS(parse_ids("1.5", "ids.txt", 10), "ids.txt: unexpected character '.' after token id 1", UserError);
    CHECK_THROWS_WITH_AS(parse_ids("  \n", "ids.txt", 10), "ids.txt: no token ids", UserError);
    CHECK_THROWS_WITH_AS(read_ids_file("/nonexistent/ids.txt", 10), "/nonexistent/ids.txt: cannot open (No such file or directory)", UserError);
}
