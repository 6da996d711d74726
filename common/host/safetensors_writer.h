// host/safetensors_writer.h — write a .safetensors file, producing each tensor's bytes only when it is written.
//
// Usage:
//   SafetensorsWriter wr;
//   wr.add("model.norm.weight", DType::BF16, {dim}, [&] { return bytes_of_norm; });   // std::vector<uint8_t>
//   wr.write("out/model.safetensors", {{"format", "pt"}});
// The header (offsets in insertion order, padded with spaces to a multiple of 8 bytes) is computed from
// the declared dtypes and shapes first, so a tensor's producer runs once, right before its bytes go out,
// and a converter never holds more than one tensor in memory. A producer returning the wrong number of
// bytes is a bug and stops the write.
#pragma once

#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "host/safetensors.h"

namespace monocu {

class SafetensorsWriter {
public:
    using Producer = std::function<std::vector<uint8_t>()>;

    void add(const std::string& name, DType dtype, const Shape& shape, Producer produce) {
        size_t n = 1;
        for (int64_t d : shape) n *= static_cast<size_t>(d);
        entries_.push_back({name, dtype, shape, n * dtype_size(dtype), std::move(produce)});
    }

    void write(const std::string& path, const std::map<std::string, std::string>& metadata) const {
        nlohmann::ordered_json h;
        if (!metadata.empty()) h["__metadata__"] = metadata;
        size_t at = 0;
        for (const Entry& e : entries_) {
            h[e.name] = {{"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {at, at + e.bytes}}};
            at += e.bytes;
        }
        std::string header = h.dump();
        header.append((8 - header.size() % 8) % 8, ' ');
        FILE* f = std::fopen(path.c_str(), "wb");
        if (!f) die("%s: cannot open for writing", path.c_str());
        uint8_t len[8];
        for (int i = 0; i < 8; i++) len[i] = static_cast<uint8_t>((uint64_t)header.size() >> (8 * i));
        bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(header.data(), 1, header.size(), f) == header.size();
        for (const Entry& e : entries_) {
            if (!ok) break;
            std::vector<uint8_t> bytes = e.produce();
            if (bytes.size() != e.bytes) {
                std::fclose(f);
                die("%s: tensor '%s' produced %zu bytes, expected %zu", path.c_str(), e.name.c_str(), bytes.size(), e.bytes);
            }
            ok = bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
        }
        ok = (std::fclose(f) == 0) && ok;
        if (!ok) die("%s: write failed (disk full?)", path.c_str());
    }

private:
    struct Entry {
        std::string name;
        DType dtype;
        Shape shape;
        size_t bytes;
        Producer produce;
    };
    std::vector<Entry> entries_;
};

}  // namespace monocu
