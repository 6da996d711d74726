// libFuzzer target: .npy parsing (host/npy.h) must reject any byte string with a UserError, never crash, read
// out of bounds or allocate without bound. Built and run by `make fuzz`.
#include <cstdint>

#include "host/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        monocu::npy_parse(std::string(reinterpret_cast<const char*>(data), size), "fuzz-input");
    } catch (const monocu::UserError&) {
    }
    return 0;
}
