// libFuzzer target: the safetensors header parser must reject any byte string with a UserError,
// never crash, read out of bounds or hit undefined behaviour. Built and run by `make fuzz`.
#include <cstdint>

#include "host/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        monocu::parse_safetensors_header(data, size, "fuzz-input");
    } catch (const monocu::UserError&) {
    }
    return 0;
}
