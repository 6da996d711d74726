// host/safetensors.h — map a .safetensors file, or a sharded checkpoint, and look tensors up by name.
//
// Usage:
//   Checkpoint ck = Checkpoint::open("models/qwen3-tiny");    // dir (single or sharded) or one file
//   const TensorView& w = ck.get("model.norm.weight", {dim});            // any dtype, shape checked
//   const TensorView& q = ck.get(strf("model.layers.%d.self_attn.q_proj.weight", l),
//                                DType::BF16, {n_heads * head_dim, dim});  // dtype and shape checked
//   const TensorView* b = ck.find("lm_head.weight");                     // optional: nullptr if absent
//   w.data points into the mapping (valid while ck lives); w.nbytes, w.dtype, w.shape describe it.
//
// Format (https://github.com/huggingface/safetensors): 8-byte little-endian header length N, then N
// bytes of JSON: {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"k": "v"}}, then the data region; offsets are relative to the data region.
//
// Validation follows the reference implementation and adds two checks it leaves out:
//   N <= 100 MB; 8 + N <= file size; header is a UTF-8 JSON object starting with '{';
//   every tensor has a known dtype, a shape of non-negative integers and two offsets;
//   numel * dtype size is computed with overflow checks and must equal end - begin;
//   sorted by offset, tensors tile the data region exactly (no overlap, no gap, nothing past the end);
//   __metadata__, if present, maps strings to strings;
//   (added) no tensor name appears twice; (added) a sharded index names only files in its folder.
// Every failure is a UserError whose message names the file and the problem.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "host/errors.h"
#include "host/files.h"

namespace monocu {

// ---- dtypes ----

enum class DType : uint8_t { BOOL, U8, I8, F8_E4M3, F8_E5M2, F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64 };

struct DTypeInfo {
    DType dtype;
    const char* name;  // as written in safetensors headers
    size_t size;       // bytes per element
};

inline const DTypeInfo* dtype_table(size_t* n) {
    static const DTypeInfo table[] = {
        {DType::BOOL, "BOOL", 1},      {DType::U8, "U8", 1},           {DType::I8, "I8", 1},
        {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1}, {DType::F8_E8M0, "F8_E8M0", 1},
        {DType::I16, "I16", 2},        {DType::U16, "U16", 2},         {DType::F16, "F16", 2},
        {DType::BF16, "BF16", 2},      {DType::I32, "I32", 4},         {DType::U32, "U32", 4},
        {DType::F32, "F32", 4},        {DType::I64, "I64", 8},         {DType::U64, "U64", 8},
        {DType::F64, "F64", 8},
    };
    *n = sizeof(table) / sizeof(table[0]);
    return table;
}

inline const DTypeInfo& dtype_info(DType d) {
    size_t n;
    const DTypeInfo* t = dtype_table(&n);
    return t[static_cast<size_t>(d)];
}
inline const char* dtype_name(DType d) { return dtype_info(d).name; }
inline size_t dtype_size(DType d) { return dtype_info(d).size; }

inline bool dtype_from_name(const std::string& s, DType* out) {
    size_t n;
    const DTypeInfo* t = dtype_table(&n);
    for (size_t i = 0; i < n; i++)
        if (s == t[i].name) {
            *out = t[i].dtype;
            return true;
        }
    return false;
}

// ---- one tensor: a view into the mapped file ----

using Shape = std::vector<int64_t>;

inline std::string shape_str(const Shape& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); i++) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}

struct TensorView {
    std::string name;
    DType dtype = DType::U8;
    Shape shape;
    uint64_t begin = 0, end = 0;     // offsets within the data region
    const uint8_t* data = nullptr;   // begin of this tensor's bytes (set once the file is mapped)
    std::string file;                // file the tensor lives in, for messages

    size_t nbytes() const { return static_cast<size_t>(end - begin); }
    int64_t numel() const {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;  // validated not to overflow at parse time
        return n;
    }
};

// ---- header parsing (pure: bytes in, tensors out; the fuzz target calls this) ----

constexpr uint64_t kSafetensorsMaxHeader = 100u * 1000u * 1000u;  // the reference's limit

struct SafetensorsHeader {
    std::vector<TensorView> tensors;  // in the order of their data offsets
    std::map<std::string, std::string> metadata;
    uint64_t data_start = 0;  // 8 + N
};

namespace safetensors_detail {

inline bool valid_utf8(const uint8_t* s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (len == 0 || i + len > n) return false;
        uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += len;
    }
    return true;
}

// a * b into *out; false on overflow of uint64.
inline bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }

inline uint64_t json_u64(const nlohmann::json& v, const std::string& label, const std::string& what) {
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
        die("%s: %s must be a non-negative integer, found %s", label.c_str(), what.c_str(), v.dump().c_str());
    return v.get<uint64_t>();
}

inline TensorView parse_tensor_entry(const std::string& name, const nlohmann::json& e, const std::string& label) {
    std::string where = "tensor '" + name + "'";
    if (!e.is_object()) die("%s: %s: entry is not a JSON object", label.c_str(), where.c_str());
    for (const char* key : {"dtype", "shape", "data_offsets"})
        if (!e.contains(key)) die("%s: %s: missing '%s'", label.c_str(), where.c_str(), key);
    TensorView t;
    t.name = name;
    t.file = label;
    const auto& dt = e["dtype"];
    if (!dt.is_string()) die("%s: %s: dtype is not a string", label.c_str(), where.c_str());
    if (!dtype_from_name(dt.get<std::string>(), &t.dtype))
        die("%s: %s: unknown dtype '%s'", label.c_str(), where.c_str(), dt.get<std::string>().c_str());
    const auto& sh = e["shape"];
    if (!sh.is_array()) die("%s: %s: shape is not an array", label.c_str(), where.c_str());
    uint64_t numel = 1;
    for (const auto& d : sh) {
        uint64_t v = json_u64(d, label, where + " shape entry");
        if (v > static_cast<uint64_t>(INT64_MAX) || mul_overflows(numel, v, &numel))
            die("%s: %s: shape %s overflows a 64-bit element count", label.c_str(), where.c_str(), sh.dump().c_str());
        t.shape.push_back(static_cast<int64_t>(v));
    }
    if (numel > static_cast<uint64_t>(INT64_MAX))
        die("%s: %s: shape %s overflows a 64-bit element count", label.c_str(), where.c_str(), sh.dump().c_str());
    const auto& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2)
        die("%s: %s: data_offsets must be [begin, end]", label.c_str(), where.c_str());
    t.begin = json_u64(off[0], label, where + " data_offsets[0]");
    t.end = json_u64(off[1], label, where + " data_offsets[1]");
    if (t.end < t.begin)
        die("%s: %s: data_offsets end %llu is before begin %llu", label.c_str(), where.c_str(),
            (unsigned long long)t.end, (unsigned long long)t.begin);
    uint64_t bytes;
    if (mul_overflows(numel, dtype_size(t.dtype), &bytes))
        die("%s: %s: byte size of shape %s overflows", label.c_str(), where.c_str(), shape_str(t.shape).c_str());
    if (bytes != t.end - t.begin)
        die("%s: %s: %s %s needs %llu bytes but data_offsets span %llu", label.c_str(), where.c_str(),
            dtype_name(t.dtype), shape_str(t.shape).c_str(), (unsigned long long)bytes,
            (unsigned long long)(t.end - t.begin));
    return t;
}

// Parses JSON, rejecting a top-level key that appears twice (nlohmann would keep the last one).
inline nlohmann::json parse_json_unique_keys(const char* begin, const char* end, const std::string& label) {
    std::set<std::string> seen;
    std::string duplicate;
    auto on_event = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
        if (ev == nlohmann::json::parse_event_t::key && depth == 1 && duplicate.empty()) {
            const std::string& k = parsed.get_ref<const std::string&>();
            if (!seen.insert(k).second) duplicate = k;
        }
        return true;
    };
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(begin, end, on_event);
    } catch (const nlohmann::json::exception& e) {
        die("%s: header is not valid JSON (%s)", label.c_str(), e.what());
    }
    if (!duplicate.empty()) die("%s: tensor name '%s' appears twice in the header", label.c_str(), duplicate.c_str());
    return j;
}

}  // namespace safetensors_detail

// Validates the header of a safetensors file held in buf[0, size). label names the file in errors.
inline SafetensorsHeader parse_safetensors_header(const uint8_t* buf, uint64_t size, const std::string& label) {
    using namespace safetensors_detail;
    if (size < 8)
        die("%s: file is %llu bytes, too short for the 8-byte header length", label.c_str(), (unsigned long long)size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | buf[i];
    if (n > kSafetensorsMaxHeader)
        die("%s: header length %llu exceeds the 100 MB limit", label.c_str(), (unsigned long long)n);
    if (n > size - 8)
        die("%s: header length %llu runs past the end of the %llu-byte file", label.c_str(), (unsigned long long)n,
            (unsigned long long)size);
    const uint8_t* h = buf + 8;
    if (!valid_utf8(h, n)) die("%s: header is not valid UTF-8", label.c_str());
    if (n == 0 || h[0] != '{') die("%s: header does not start with '{'", label.c_str());
    nlohmann::json j = parse_json_unique_keys(reinterpret_cast<const char*>(h), reinterpret_cast<const char*>(h + n), label);
    if (!j.is_object()) die("%s: header is not a JSON object", label.c_str());

    SafetensorsHeader out;
    out.data_start = 8 + n;
    for (auto it = j.begin(); it != j.end(); ++it) {
        if (it.key() == "__metadata__") {
            if (!it->is_object()) die("%s: __metadata__ is not a JSON object", label.c_str());
            for (auto m = it->begin(); m != it->end(); ++m) {
                if (!m->is_string()) die("%s: __metadata__ value for '%s' is not a string", label.c_str(), m.key().c_str());
                out.metadata[m.key()] = m->get<std::string>();
            }
            continue;
        }
        out.tensors.push_back(parse_tensor_entry(it.key(), *it, label));
    }
    // Tensors must tile [0, data size) in offset order: no overlap, no gap, nothing past the end.
    std::sort(out.tensors.begin(), out.tensors.end(), [](const TensorView& a, const TensorView& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t data_size = size - out.data_start, at = 0;
    for (const TensorView& t : out.tensors) {
        if (t.begin < at)
            die("%s: tensor '%s' (bytes %llu..%llu) overlaps the tensor before it (ending at %llu)", label.c_str(),
                t.name.c_str(), (unsigned long long)t.begin, (unsigned long long)t.end, (unsigned long long)at);
        if (t.begin > at)
            die("%s: gap of %llu unclaimed bytes before tensor '%s'", label.c_str(), (unsigned long long)(t.begin - at),
                t.name.c_str());
        if (t.end > data_size)
            die("%s: tensor '%s' ends at byte %llu, past the %llu-byte data region (file truncated?)", label.c_str(),
                t.name.c_str(), (unsigned long long)t.end, (unsigned long long)data_size);
        at = t.end;
    }
    if (at != data_size)
        die("%s: %llu bytes after the last tensor are claimed by none", label.c_str(), (unsigned long long)(data_size - at));
    return out;
}

// ---- a read-only memory mapping ----

class MappedFile {
public:
    explicit MappedFile(const std::string& path) : path_(path) {
        int fd = open_regular_file(path, &size_);  // a folder, FIFO or device is refused, never waited on
        if (size_ > 0) {
            void* p = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
            if (p == MAP_FAILED) {
                ::close(fd);
                die("%s: mmap failed (%s)", path.c_str(), std::strerror(errno));
            }
            data_ = static_cast<const uint8_t*>(p);
        }
        ::close(fd);
    }
    ~MappedFile() {
        if (data_) munmap(const_cast<uint8_t*>(data_), size_);
    }
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const { return data_; }
    uint64_t size() const { return size_; }
    const std::string& path() const { return path_; }

private:
    std::string path_;
    const uint8_t* data_ = nullptr;
    uint64_t size_ = 0;
};

// ---- a checkpoint: one file, or the shards named by model.safetensors.index.json ----

inline bool path_is_dir(const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
inline bool path_exists(const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0;
}

class Checkpoint {
public:
    // path: a model folder (model.safetensors.index.json or model.safetensors inside) or one .safetensors file.
    static Checkpoint open(const std::string& path) {
        Checkpoint ck;
        if (!path_is_dir(path)) {
            if (!path_exists(path)) die("%s: no such file or folder", path.c_str());
            ck.add_file(path);
        } else if (path_exists(path + "/model.safetensors.index.json")) {
            ck.add_shards(path, path + "/model.safetensors.index.json");
        } else if (path_exists(path + "/model.safetensors")) {
            ck.add_file(path + "/model.safetensors");
        } else {
            die("%s: no model.safetensors or model.safetensors.index.json in this folder", path.c_str());
        }
        return ck;
    }

    const TensorView* find(const std::string& name) const {
        auto it = index_.find(name);
        return it == index_.end() ? nullptr : &tensors_[it->second];
    }

    // The tensor, with its shape checked; any dtype. Marks it used (unused() lists the rest).
    const TensorView& get(const std::string& name, const Shape& shape) const {
        const TensorView* t = find(name);
        if (!t) die("%s: missing tensor '%s'", where().c_str(), name.c_str());
        used_.insert(name);
        if (t->shape != shape)
            die("%s: tensor '%s' has shape %s, expected %s", t->file.c_str(), name.c_str(), shape_str(t->shape).c_str(),
                shape_str(shape).c_str());
        return *t;
    }

    // The tensor, with dtype and shape checked.
    const TensorView& get(const std::string& name, DType dtype, const Shape& shape) const {
        const TensorView& t = get(name, shape);
        if (t.dtype != dtype)
            die("%s: tensor '%s' has dtype %s, expected %s", t.file.c_str(), name.c_str(), dtype_name(t.dtype),
                dtype_name(dtype));
        return t;
    }

    // Tensors no get() has asked for: after an engine's load, what it did not bind (a bias its config says it
    // has not, a layer past num_hidden_layers, ...). transformers warns of such tensors too.
    std::vector<std::string> unused() const {
        std::vector<std::string> out;
        for (const TensorView& t : tensors_)
            if (!used_.count(t.name)) out.push_back(t.name);
        return out;
    }

    const std::vector<TensorView>& tensors() const { return tensors_; }
    const std::vector<std::string>& files() const { return files_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    uint64_t total_bytes() const {
        uint64_t s = 0;
        for (const auto& t : tensors_) s += t.nbytes();
        return s;
    }

private:
    std::vector<std::unique_ptr<MappedFile>> maps_;
    std::vector<std::string> files_;
    std::vector<TensorView> tensors_;
    std::unordered_map<std::string, size_t> index_;
    std::map<std::string, std::string> metadata_;
    mutable std::set<std::string> used_;

    std::string where() const { return files_.size() == 1 ? files_[0] : files_.empty() ? "checkpoint" : files_[0] + " (and other shards)"; }

    void add_file(const std::string& path) {
        maps_.push_back(std::make_unique<MappedFile>(path));
        const MappedFile& m = *maps_.back();
        SafetensorsHeader h = parse_safetensors_header(m.data(), m.size(), path);
        files_.push_back(path);
        for (auto& kv : h.metadata) metadata_[kv.first] = kv.second;
        for (TensorView& t : h.tensors) {
            t.data = m.data() + h.data_start + t.begin;
            auto prev = index_.find(t.name);
            if (prev != index_.end())
                die("%s: tensor '%s' also appears in %s", path.c_str(), t.name.c_str(), tensors_[prev->second].file.c_str());
            index_[t.name] = tensors_.size();
            tensors_.push_back(std::move(t));
        }
    }

    void add_shards(const std::string& dir, const std::string& index_path) {
        nlohmann::json j;
        {
            MappedFile f(index_path);
            const char* b = reinterpret_cast<const char*>(f.data());
            try {
                j = nlohmann::json::parse(b, b + f.size());
            } catch (const nlohmann::json::exception& e) {
                die("%s: not valid JSON (%s)", index_path.c_str(), e.what());
            }
        }
        if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
            die("%s: no 'weight_map' object", index_path.c_str());
        std::vector<std::string> shard_names;
        for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
            if (!it->is_string()) die("%s: weight_map entry for '%s' is not a file name", index_path.c_str(), it.key().c_str());
            std::string f = it->get<std::string>();
            if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos || f == "." || f == "..")
                die("%s: shard name '%s' is not a plain file name in the model folder", index_path.c_str(), f.c_str());
            if (std::find(shard_names.begin(), shard_names.end(), f) == shard_names.end()) shard_names.push_back(f);
        }
        if (shard_names.empty()) die("%s: weight_map is empty", index_path.c_str());
        std::sort(shard_names.begin(), shard_names.end());
        for (const std::string& f : shard_names) add_file(dir + "/" + f);
        for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
            const TensorView* t = find(it.key());
            std::string shard = dir + "/" + it->get<std::string>();
            if (!t) die("%s: tensor '%s' is listed in the index but missing from %s", index_path.c_str(), it.key().c_str(), shard.c_str());
            if (t->file != shard)
                die("%s: tensor '%s' is listed for %s but lives in %s", index_path.c_str(), it.key().c_str(), shard.c_str(),
                    t->file.c_str());
        }
    }
};

}  // namespace monocu
