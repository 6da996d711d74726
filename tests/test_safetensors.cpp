#include <doctest/doctest.h>

#include "hostile_safetensors.h"
#include "host/safetensors.h"
#include "test_util.h"

using namespace monocu;
using namespace monocu_test;

static std::string error_of(const std::string& path) {
    try {
        Checkpoint::open(path);
    } catch (const UserError& e) {
        return e.what();
    }
    return "";
}

TEST_CASE("a valid file maps every tensor with dtype, shape and bytes") {
    TempDir dir;
    std::string bytes = valid_safetensors();
    write_file(dir / "model.safetensors", bytes);
    Checkpoint ck = Checkpoint::open(dir.path);
    REQUIRE(ck.tensors().size() == 2);
    const TensorView& a = ck.get("a", DType::F32, {2, 3});
    CHECK(a.nbytes() == 24);
    CHECK(a.numel() == 6);
    const TensorView& b = ck.get("b", {4});
    CHECK(b.dtype == DType::BF16);
    size_t data_start = bytes.size() - 32;
    CHECK(std::string(reinterpret_cast<const char*>(a.data), 24) == bytes.substr(data_start, 24));
    CHECK(std::string(reinterpret_cast<const char*>(b.data), 8) == bytes.substr(data_start + 24, 8));
    CHECK(ck.metadata().at("format") == "pt");
    CHECK(ck.find("missing") == nullptr);
    CHECK(ck.total_bytes() == 32);
}

TEST_CASE("look-ups name the tensor, what was expected and what was found") {
    TempDir dir;
    write_file(dir / "m.safetensors", valid_safetensors());
    Checkpoint ck = Checkpoint::open(dir / "m.safetensors");
    CHECK_THROWS_WITH_AS(ck.get("nope", {1}), doctest::Contains("missing tensor 'nope'"), UserError);
    CHECK_THROWS_WITH_AS(ck.get("a", {3, 2}), doctest::Contains("tensor 'a' has shape [2, 3], expected [3, 2]"), UserError);
    CHECK_THROWS_WITH_AS(ck.get("b", DType::F16, {4}), doctest::Contains("tensor 'b' has dtype BF16, expected F16"), UserError);
}

TEST_CASE("zero-sized tensors and an empty header are valid") {
    TempDir dir;
    write_file(dir / "e.safetensors", safetensors_bytes("{}", ""));
    CHECK(Checkpoint::open(dir / "e.safetensors").tensors().empty());
    write_file(dir / "z.safetensors",
               safetensors_bytes(R"({"z":{"dtype":"F32","shape":[0,5],"data_offsets":[0,0]}})", ""));
    CHECK(Checkpoint::open(dir / "z.safetensors").get("z", {0, 5}).nbytes() == 0);
}

TEST_CASE("every hostile file is rejected with its specific message") {
    TempDir dir;
    for (const HostileFile& h : hostile_safetensors()) {
        CAPTURE(h.name);
        write_file(dir / h.name, h.bytes);
        std::string msg = error_of(dir / h.name);
        CHECK_MESSAGE(msg.find(h.expected) != std::string::npos, "got: ", msg);
        CHECK(msg.find(h.name) != std::string::npos);  // the message names the file
    }
}

TEST_CASE("the parser survives every truncation and random byte flips of a valid file") {
    std::string valid = valid_safetensors();
    for (size_t n = 0; n <= valid.size(); n++) {
        try {
            parse_safetensors_header(reinterpret_cast<const uint8_t*>(valid.data()), n, "cut");
            CHECK(n == valid.size());  // only the whole file is valid
        } catch (const UserError&) {
            CHECK(n < valid.size());
        }
    }
    std::mt19937 rng(7);
    for (int i = 0; i < 2000; i++) {
        std::string s = valid;
        for (int k = 0; k < 3; k++) s[rng() % s.size()] = static_cast<char>(rng());
        try {
            parse_safetensors_header(reinterpret_cast<const uint8_t*>(s.data()), s.size(), "flip");
        } catch (const UserError&) {
        }
    }
}

static std::string shard_file(const std::string& name, uint32_t seed) {
    return safetensors_bytes(std::string(R"({")") + name + R"(":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
                             random_bytes(16, seed));
}

TEST_CASE("a sharded checkpoint is read through model.safetensors.index.json") {
    TempDir dir;
    write_file(dir / "model-00001-of-00002.safetensors", shard_file("x", 1));
    write_file(dir / "model-00002-of-00002.safetensors", shard_file("y", 2));
    write_file(dir / "model.safetensors.index.json",
               R"({"metadata":{"total_size":32},"weight_map":{"x":"model-00001-of-00002.safetensors",)"
               R"("y":"model-00002-of-00002.safetensors"}})");
    Checkpoint ck = Checkpoint::open(dir.path);
    CHECK(ck.files().size() == 2);
    CHECK(ck.get("x", {4}).file == dir / "model-00001-of-00002.safetensors");
    CHECK(ck.get("y", {4}).file == dir / "model-00002-of-00002.safetensors");
    CHECK(std::string(reinterpret_cast<const char*>(ck.get("y", {4}).data), 16) == random_bytes(16, 2));
}

TEST_CASE("a lying or escaping shard index is rejected") {
    TempDir dir;
    write_file(dir / "s1.safetensors", shard_file("x", 1));
    write_file(dir / "s2.safetensors", shard_file("x", 2));
    auto index = [&](const std::string& body) { write_file(dir / "model.safetensors.index.json", body); };
    index(R"({"weight_map":{"x":"../s1.safetensors"}})");
    CHECK(error_of(dir.path).find("is not a plain file name") != std::string::npos);
    index(R"({"weight_map":{"x":"s1.safetensors","z":"s1.safetensors"}})");
    CHECK(error_of(dir.path).find("tensor 'z' is listed in the index but missing") != std::string::npos);
    index(R"({"weight_map":{"x":"s1.safetensors","w":"s2.safetensors"}})");
    CHECK(error_of(dir.path).find("tensor 'x' also appears in") != std::string::npos);
    index(R"({"weight_map":{"x":"missing.safetensors"}})");
    CHECK(error_of(dir.path).find("cannot open") != std::string::npos);
    index(R"({"weight_map":[]})");
    CHECK(error_of(dir.path).find("no 'weight_map' object") != std::string::npos);
    index(R"({"weight_map":)");
    CHECK(error_of(dir.path).find("not valid JSON") != std::string::npos);
}

TEST_CASE("a folder without weights is a clear error") {
    TempDir dir;
    CHECK(error_of(dir.path).find("no model.safetensors or model.safetensors.index.json") != std::string::npos);
    CHECK(error_of(dir / "nothing-here").find("no such file or folder") != std::string::npos);
}

TEST_CASE("build/tools/inspect lists a valid sharded checkpoint and rejects each hostile file") {
    const char* inspect = MONOCU_HOST_BUILD_DIR "/tools/inspect";
    if (access(inspect, X_OK) != 0) {
        MESSAGE("skipped: " << inspect << " not built (run make first)");
        return;
    }
    TempDir dir;
    write_file(dir / "model-00001-of-00002.safetensors", shard_file("model.embed_tokens.weight", 1));
    write_file(dir / "model-00002-of-00002.safetensors", shard_file("model.norm.weight", 2));
    write_file(dir / "model.safetensors.index.json",
               R"({"weight_map":{"model.embed_tokens.weight":"model-00001-of-00002.safetensors",)"
               R"("model.norm.weight":"model-00002-of-00002.safetensors"}})");
    std::string out;
    REQUIRE(run_command(std::string(inspect) + " " + dir.path, &out) == 0);
    CHECK(out.find("model.embed_tokens.weight") != std::string::npos);
    CHECK(out.find("model.norm.weight") != std::string::npos);
    CHECK(out.find("2 tensors") != std::string::npos);
    for (const HostileFile& h : hostile_safetensors()) {
        CAPTURE(h.name);
        write_file(dir / h.name, h.bytes);
        CHECK(run_command(std::string(inspect) + " " + (dir / h.name), &out) == 1);
        CHECK(out.find(h.expected) != std::string::npos);
        CHECK(std::count(out.begin(), out.end(), '\n') == 1);  // one line
    }
}
