// test_util.h — small helpers shared by the host tests: a scratch folder, file writing, random data.
#pragma once

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

// Where the host tools are (the Makefile passes its build folder: build/, or build/san/ with SAN=1).
#ifndef MONOCU_HOST_BUILD_DIR
#define MONOCU_HOST_BUILD_DIR "build"
#endif
// ... and where the engines are (build/ARCH): the host tests run them on inputs refused before any GPU is needed.
#ifndef MONOCU_ENGINE_DIR
#define MONOCU_ENGINE_DIR "build/sm_90"
#endif

namespace monocu_test {

// A fresh folder under /tmp, removed with everything in it when the object goes away.
struct TempDir {
    std::string path;
    TempDir() {
        char tmpl[] = "/tmp/monocu-test-XXXXXX";
        char* p = mkdtemp(tmpl);
        if (!p) throw std::runtime_error("mkdtemp failed");
        path = p;
    }
    ~TempDir() {
        std::string cmd = "rm -rf '" + path + "'";
        if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "warning: could not remove %s\n", path.c_str());
    }
    std::string operator/(const std::string& name) const { return path + "/" + name; }
};

inline void write_file(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!f) throw std::runtime_error("cannot write " + path);
}

inline std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// A safetensors file: 8-byte little-endian length, the header text as given, then the data bytes.
inline std::string safetensors_bytes(const std::string& header, const std::string& data) {
    std::string out(8, '\0');
    uint64_t n = header.size();
    for (int i = 0; i < 8; i++) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
    return out + header + data;
}

inline std::string random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng() & 0xFF);
    return s;
}

// Runs fn with stderr sent to a temporary file and returns what was written there: tests of code that reports
// errors check the line itself, and passing tests print nothing alarming.
template <class F>
inline std::string capture_stderr(F&& fn) {
    std::fflush(stderr);
    int saved = dup(2);
    FILE* tmp = std::tmpfile();
    if (saved < 0 || !tmp) {
        fn();
        return "";
    }
    dup2(fileno(tmp), 2);
    fn();
    std::fflush(stderr);
    dup2(saved, 2);
    close(saved);
    std::string out;
    std::rewind(tmp);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, tmp)) > 0) out.append(buf, n);
    std::fclose(tmp);
    return out;
}

// Runs a shell command; returns its exit status and puts stdout+stderr into *output.
inline int run_command(const std::string& cmd, std::string* output) {
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    if (!p) return -1;
    char buf[4096];
    output->clear();
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) output->append(buf, n);
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace monocu_test
