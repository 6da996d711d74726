// host/npy.h — write and read NumPy .npy files (activation dumps, test data).
//
// Usage:
//   npy_write_f32("dump/layer_03.npy", host_ptr, {T, dim});
//   npy_write_i32("dump/ids.npy", ids.data(), {(int64_t)ids.size()});
//   NpyArray a = npy_read("oracle/layer_03.npy");   // a.shape, a.data (float32)
//   NpyArray b = npy_parse(bytes, "label");          // the same from bytes in memory
//
// Reading accepts little-endian float32 ('<f4'), float64 ('<f8'), float16 ('<f2'), int32 ('<i4'),
// int64 ('<i8') and bfloat16 (descr 'bfloat16', as ml_dtypes writes it), all widened to float,
// C order only, format versions 1.0 to 3.0. A file whose header or size disagrees is a UserError
// naming the file. Format: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "host/bf16.h"
#include "host/errors.h"
#include "host/files.h"

namespace monocu {

struct NpyArray {
    std::vector<int64_t> shape;
    std::vector<float> data;
    int64_t numel() const {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        return n;
    }
};

namespace npy_detail {

inline void write_raw(const std::string& path, const char* descr, const void* data, size_t elem_size,
                      const std::vector<int64_t>& shape) {
    std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (";
    size_t n = 1;
    for (size_t i = 0; i < shape.size(); i++) {
        dict += std::to_string(shape[i]) + (shape.size() == 1 ? "," : i + 1 < shape.size() ? ", " : "");
        n *= static_cast<size_t>(shape[i]);
    }
    dict += "), }";
    // magic(6) + version(2) + header length(2) + dict + padding + '\n', a multiple of 64 bytes.
    size_t total = 10 + dict.size() + 1;
    dict.append((64 - total % 64) % 64, ' ');
    dict += '\n';
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) die("%s: cannot open for writing", path.c_str());
    uint16_t hlen = static_cast<uint16_t>(dict.size());
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<unsigned char>(hlen & 0xFF),
                             static_cast<unsigned char>(hlen >> 8)};
    bool ok = std::fwrite(pre, 1, 10, f) == 10 && std::fwrite(dict.data(), 1, dict.size(), f) == dict.size() &&
              (n == 0 || std::fwrite(data, elem_size, n, f) == n);
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) die("%s: write failed", path.c_str());
}

// Value of key in a header dict such as "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }".
inline std::string dict_value(const std::string& dict, const std::string& key, const std::string& path) {
    size_t k = dict.find("'" + key + "'");
    if (k == std::string::npos) die("%s: npy header has no '%s'", path.c_str(), key.c_str());
    size_t colon = dict.find(':', k);
    if (colon == std::string::npos) die("%s: npy header is malformed near '%s'", path.c_str(), key.c_str());
    size_t b = dict.find_first_not_of(' ', colon + 1);
    if (b == std::string::npos) die("%s: npy header is malformed near '%s'", path.c_str(), key.c_str());
    size_t e;
    if (dict[b] == '(') e = dict.find(')', b) + 1;
    else if (dict[b] == '\'') e = dict.find('\'', b + 1) + 1;
    else e = dict.find_first_of(",}", b);
    if (e == std::string::npos || e == 0 || e <= b) die("%s: npy header is malformed near '%s'", path.c_str(), key.c_str());
    return dict.substr(b, e - b);
}

inline std::vector<int64_t> parse_shape(const std::string& tuple, const std::string& path) {
    std::vector<int64_t> shape;
    std::string inner = tuple.substr(1, tuple.size() - 2);
    std::stringstream ss(inner);
    std::string item;
    while (std::getline(ss, item, ',')) {
        size_t b = item.find_first_not_of(' ');
        if (b == std::string::npos) continue;
        size_t e = item.find_last_not_of(' ');
        std::string num = item.substr(b, e - b + 1);
        if (num.empty() || num.size() > 15 || num.find_first_not_of("0123456789") != std::string::npos)
            die("%s: npy shape %s is not a tuple of integers", path.c_str(), tuple.c_str());
        shape.push_back(std::stoll(num));
    }
    return shape;
}

}  // namespace npy_detail

inline void npy_write_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
    npy_detail::write_raw(path, "<f4", data, 4, shape);
}
inline void npy_write_i32(const std::string& path, const int32_t* data, const std::vector<int64_t>& shape) {
    npy_detail::write_raw(path, "<i4", data, 4, shape);
}

// The array in a .npy file's bytes; `path` names it in errors (the fuzz target calls this directly).
inline NpyArray npy_parse(const std::string& bytes, const std::string& path) {
    using namespace npy_detail;
    if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0) die("%s: not a .npy file", path.c_str());
    int major = static_cast<unsigned char>(bytes[6]);
    size_t hlen, hstart;
    if (major == 1) {
        hlen = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
        hstart = 10;
    } else if (major == 2 || major == 3) {
        if (bytes.size() < 12) die("%s: truncated .npy header", path.c_str());
        hlen = 0;
        for (int i = 3; i >= 0; i--) hlen = (hlen << 8) | static_cast<unsigned char>(bytes[8 + i]);
        hstart = 12;
    } else {
        die("%s: unsupported .npy version %d", path.c_str(), major);
    }
    if (hlen > bytes.size() - hstart) die("%s: .npy header runs past the end of the file", path.c_str());
    std::string dict = bytes.substr(hstart, hlen);
    std::string descr = dict_value(dict, "descr", path);
    if (dict_value(dict, "fortran_order", path) != "False") die("%s: Fortran-order arrays are not supported", path.c_str());
    std::string shape_tuple = dict_value(dict, "shape", path);
    NpyArray a;
    a.shape = parse_shape(shape_tuple, path);
    uint64_t n = 1;
    for (int64_t d : a.shape)
        if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n) || n > (1ull << 40))
            die("%s: npy shape %s is too large", path.c_str(), shape_tuple.c_str());
    size_t esize = descr == "'<f4'" || descr == "'<i4'" ? 4 : descr == "'<f8'" || descr == "'<i8'" ? 8
                 : descr == "'<f2'" || descr == "'bfloat16'" ? 2 : 0;
    if (esize == 0) die("%s: unsupported npy dtype %s", path.c_str(), descr.c_str());
    const char* d = bytes.data() + hstart + hlen;
    if (bytes.size() - hstart - hlen != n * esize)
        die("%s: data is %zu bytes, shape %s of %s needs %llu", path.c_str(), bytes.size() - hstart - hlen,
            shape_tuple.c_str(), descr.c_str(), (unsigned long long)(n * esize));
    a.data.resize(n);
    for (size_t i = 0; i < n; i++) {
        const char* p = d + i * esize;
        if (descr == "'<f4'") std::memcpy(&a.data[i], p, 4);
        else if (descr == "'<f8'") { double v; std::memcpy(&v, p, 8); a.data[i] = static_cast<float>(v); }
        else if (descr == "'<i4'") { int32_t v; std::memcpy(&v, p, 4); a.data[i] = static_cast<float>(v); }
        else if (descr == "'<i8'") { int64_t v; std::memcpy(&v, p, 8); a.data[i] = static_cast<float>(v); }
        else { uint16_t v; std::memcpy(&v, p, 2); a.data[i] = descr == "'<f2'" ? f16_bits_to_float(v) : bf16_bits_to_float(v); }
    }
    return a;
}

inline NpyArray npy_read(const std::string& path) { return npy_parse(read_file_bounded(path, 1ull << 36), path); }

}  // namespace monocu
