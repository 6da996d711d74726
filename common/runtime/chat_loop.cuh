// runtime/chat_loop.cuh — -cnv: a multi-turn conversation in the terminal, for any engine.
//
// Usage (runner.cuh):  return chat_loop(model, gen, tok, opts, sampling, eos);
//
// Each turn renders the whole conversation with the model's chat template and hands it to the generator,
// which runs only what the KV cache does not hold yet: the new user turn (and whatever the template
// re-renders differently, e.g. Qwen3 drops an earlier reply's thinking, from that point on). The reply is
// kept as the assistant's message as generated. Input: one line per message; a line ending in "\" goes on
// to the next one. Ctrl-C stops the reply being written (not the program); at the prompt it says how to
// quit. "/exit" or end of input (Ctrl-D) quits; "/reset" starts a new conversation. With --tools the template
// offers the model those tools; its calls are printed after its reply ("[tool call] NAME ARGUMENTS"), and on a
// terminal its reasoning is dim (runtime/prompts.cuh's ReplyPrinter).
#pragma once

#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "runtime/generate.cuh"
#include "runtime/prompts.cuh"

namespace monocu {

inline volatile sig_atomic_t& chat_interrupted() {
    static volatile sig_atomic_t flag = 0;
    return flag;
}
inline void chat_on_sigint(int) { chat_interrupted() = 1; }

// One message from stdin, "\"-continued lines joined; false at end of input. A Ctrl-C while waiting gives
// an empty message back with *interrupted set.
inline bool chat_read_message(std::string& out, bool* interrupted) {
    out.clear();
    *interrupted = false;
    char* line = nullptr;
    size_t cap = 0;
    bool more = true, got = false;
    while (more) {
        errno = 0;
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) {
            if (errno == EINTR || chat_interrupted()) {
                clearerr(stdin);
                chat_interrupted() = 0;
                *interrupted = true;
                break;
            }
            break;  // end of input
        }
        got = true;
        std::string s(line, (size_t)n);
        while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
        more = !s.empty() && s.back() == '\\';
        if (more) s.back() = '\n';
        out += s;
    }
    std::free(line);
    return got || *interrupted;
}

template <class M>
int chat_loop(Generator<M>& g, const Tokenizer* tok, const ChatTemplate& ct, const Options& o, int vocab, const std::vector<int>& eos) {
    if (!tok) die("%s: -cnv needs tokenizer.json", o.model.c_str());
    if (ct.empty()) die("%s: -cnv needs a chat template (tokenizer_config.json has none)", o.model.c_str());
    struct sigaction sa = {};
    sa.sa_handler = chat_on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: a Ctrl-C at the prompt interrupts the read
    sigaction(SIGINT, &sa, nullptr);

    std::vector<ChatMessage> msgs;
    if (!o.system.empty()) msgs.push_back({"system", o.system});
    std::string first = o.prompt;
    std::fprintf(stderr, "monocu: chatting with %s; Ctrl-C stops a reply, /reset starts over, /exit or Ctrl-D quits\n", o.model.c_str());
    while (true) {
        std::string text;
        if (!first.empty()) {
            text = first, first.clear();
            std::printf("> %s\n", text.c_str());
        } else {
            std::printf("> ");
            std::fflush(stdout);
            bool interrupted = false;
            if (!chat_read_message(text, &interrupted)) {
                std::printf("\n");
                break;
            }
            if (interrupted) {
                std::printf("\n(Ctrl-C stops a reply; /exit or Ctrl-D quits)\n");
                continue;
            }
        }
        if (text == "/exit" || text == "/quit") break;
        if (text == "/reset") {
            msgs.resize(o.system.empty() ? 0 : 1);
            g.forget();
            continue;
        }
        if (text.empty()) continue;
        msgs.push_back({"user", text});
        std::vector<int> ids;
        try {
            ids = chat_prompt_ids(o, msgs, vocab, *tok, ct);
        } catch (const UserError& e) {  // the template refuses this conversation: say so, drop the message
            std::fprintf(stderr, "error: %s\n", e.what());
            msgs.pop_back();
            continue;
        }
        chat_interrupted() = 0;
        ReplyPrinter reply(*tok, ct, ids, o.show_reasoning);
        Generation r;
        try {
            r = g.run(ids, o.n_predict, eos, [&](int id) {
                reply.push(id);
                return !chat_interrupted();
            });
        } catch (const UserError& e) {  // a conversation past the context: say so, keep the program
            std::fprintf(stderr, "\nerror: %s (/reset starts a new conversation)\n", e.what());
            msgs.pop_back();
            continue;
        }
        reply.finish(o.seed + msgs.size());
        std::printf("\n");
        if (r.finish == "interrupted") std::fprintf(stderr, "monocu: reply stopped\n");
        if (r.finish == "context") std::fprintf(stderr, "monocu: the context is full (%zu tokens); /reset starts over\n", g.cached().size());
        if (o.verbose)
            std::fprintf(stderr, "monocu: %d prompt tokens (%d from the cache) in %.1f ms; %zu tokens in %.1f ms\n", r.prompt_tokens, r.reused,
                         r.prompt_ms, r.tokens.size(), r.eval_ms);
        msgs.push_back({"assistant", reply.text()});
    }
    return 0;
}

}  // namespace monocu
