// Writes the fuzzer's seed corpus: one valid safetensors file and every hostile one from the tests.
#include <cstdio>

#include "../hostile_safetensors.h"

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: make_seeds DIR\n");
        return 2;
    }
    std::string dir = argv[1];
    monocu_test::write_file(dir + "/valid.safetensors", monocu_test::valid_safetensors());
    for (const auto& h : monocu_test::hostile_safetensors()) monocu_test::write_file(dir + "/" + h.name, h.bytes);
    return 0;
}
