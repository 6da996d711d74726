// monocu — one command for every model: reads the checkpoint's model_type and runs the engine built for it, with
// the same arguments, so a user never needs to know which binary a model needs.
//
//   build/sm_90/monocu -m ~/models/Qwen3-30B-A3B -cnv          (runs build/sm_90/qwen3 -m ... -cnv)
//   build/sm_90/monocu -m ~/models/Mixtral-8x7B-v0.1 -p "..."   (runs build/sm_90/llama ...)
//   build/sm_90/monocu --help                                   (the model types and their engines)
//
// The engines sit beside this binary (build/<arch>/); each checks its own flags and config, so this reads only -m and
// config.json's model_type (host/model_types.h says which engine runs it), then replaces itself with the engine.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "host/config.h"
#include "host/errors.h"
#include "host/model_types.h"
#include "host/safetensors.h"

using namespace monocu;

static void usage(FILE* out) {
    std::fprintf(out,
                 "usage: monocu -m MODEL_DIR [any engine flag ...]\n"
                 "\n"
                 "Runs the engine for the checkpoint's model_type with the same arguments (-h after -m: that engine's flags).\n"
                 "model types and their engines:\n");
    size_t n;
    const ModelType* t = model_types(&n);
    for (size_t i = 0; i < n; i++) std::fprintf(out, "  %-12s %s\n", t[i].name, t[i].engine);
}

// The folder this binary lives in (the engines are its siblings).
static std::string own_dir() {
    char buf[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (len <= 0) die("monocu: cannot tell where this binary is (/proc/self/exe)");
    buf[len] = 0;
    std::string p(buf);
    return p.substr(0, p.rfind('/'));
}

int main(int argc, char** argv) {
    return run_main([&]() -> int {
        std::string model;
        for (int i = 1; i < argc; i++) {
            std::string a = argv[i];
            if ((a == "-m" || a == "--model") && i + 1 < argc) model = argv[++i];
            else if ((a == "-h" || a == "--help") && model.empty()) {
                usage(stdout);
                return 0;
            }
        }
        if (model.empty()) {
            die("monocu: give the checkpoint with -m MODEL_DIR (--help lists the model types)");
        }
        if (!path_is_dir(model)) die("-m %s: %s", model.c_str(), path_exists(model) ? "not a folder (give the checkpoint's folder)" : "no such folder");
        std::string cfg_path = model + "/config.json";
        if (!path_exists(cfg_path)) die("%s: no config.json in this folder", model.c_str());
        nlohmann::json cfg = read_json_file(cfg_path);
        if (!cfg.is_object() || !cfg.contains("model_type") || !cfg["model_type"].is_string())
            die("%s: no model_type (a string) in config.json", cfg_path.c_str());
        std::string type = cfg["model_type"].get<std::string>();
        const ModelType* t = find_model_type(type);
        if (!t) die("%s: model_type '%s' is not supported (%s are)", cfg_path.c_str(), type.c_str(), model_type_names().c_str());
        std::string engine = own_dir() + "/" + t->engine;
        if (access(engine.c_str(), X_OK) != 0) die("%s runs '%s' models and is not built here (make)", engine.c_str(), type.c_str());
        std::vector<char*> args(argv, argv + argc);
        args[0] = const_cast<char*>(engine.c_str());
        args.push_back(nullptr);
        execv(engine.c_str(), args.data());
        die("%s: cannot run it (%s)", engine.c_str(), std::strerror(errno));
    });
}
