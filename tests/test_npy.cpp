#include <doctest/doctest.h>

#include "host/npy.h"
#include "test_util.h"

using namespace monocu;
using namespace monocu_test;

static std::string npy_bytes(const std::string& dict, const std::string& data) {
    std::string h = dict;
    size_t total = 10 + h.size() + 1;
    h.append((64 - total % 64) % 64, ' ');
    h += '\n';
    std::string out = "\x93NUMPY";
    out += '\x01';
    out += '\x00';
    out += static_cast<char>(h.size() & 0xFF);
    out += static_cast<char>(h.size() >> 8);
    return out + h + data;
}

TEST_CASE("float32 round trip keeps shape and values, including 1-d and 0-size arrays") {
    TempDir dir;
    std::mt19937 rng(3);
    std::normal_distribution<float> nd;
    std::vector<float> v(3 * 5 * 7);
    for (auto& x : v) x = nd(rng);
    npy_write_f32(dir / "a.npy", v.data(), {3, 5, 7});
    NpyArray a = npy_read(dir / "a.npy");
    CHECK(a.shape == std::vector<int64_t>{3, 5, 7});
    CHECK(a.data == v);
    CHECK(read_file(dir / "a.npy").substr(0, 10).size() == 10);
    CHECK((read_file(dir / "a.npy").size() - v.size() * 4) % 64 == 0);  // header padded to 64 bytes

    npy_write_f32(dir / "b.npy", v.data(), {11});
    CHECK(npy_read(dir / "b.npy").shape == std::vector<int64_t>{11});
    npy_write_f32(dir / "c.npy", v.data(), {0, 4});
    CHECK(npy_read(dir / "c.npy").data.empty());
    std::vector<int32_t> ids = {5, -1, 151645};
    npy_write_i32(dir / "ids.npy", ids.data(), {3});
    CHECK(npy_read(dir / "ids.npy").data == std::vector<float>{5, -1, 151645});
}

TEST_CASE("float16, bfloat16 and float64 files widen to float32") {
    TempDir dir;
    // 1.0, -2.0, 0.5 in float16: 0x3C00, 0xC000, 0x3800; in bfloat16: 0x3F80, 0xC000, 0x3F00.
    write_file(dir / "h.npy", npy_bytes("{'descr': '<f2', 'fortran_order': False, 'shape': (3,), }",
                                        std::string("\x00\x3C\x00\xC0\x00\x38", 6)));
    CHECK(npy_read(dir / "h.npy").data == std::vector<float>{1.0f, -2.0f, 0.5f});
    write_file(dir / "bf.npy", npy_bytes("{'descr': 'bfloat16', 'fortran_order': False, 'shape': (3,), }",
                                         std::string("\x80\x3F\x00\xC0\x00\x3F", 6)));
    CHECK(npy_read(dir / "bf.npy").data == std::vector<float>{1.0f, -2.0f, 0.5f});
    double d[2] = {1.25, -3.5};
    write_file(dir / "d.npy", npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2), }",
                                        std::string(reinterpret_cast<char*>(d), 16)));
    CHECK(npy_read(dir / "d.npy").data == std::vector<float>{1.25f, -3.5f});
}

TEST_CASE("hostile .npy files are rejected with the file named") {
    TempDir dir;
    auto err = [&](const std::string& bytes) {
        write_file(dir / "x.npy", bytes);
        try {
            npy_read(dir / "x.npy");
        } catch (const UserError& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    std::string d8(8, '\x01');
    CHECK(err("garbage").find("not a .npy file") != std::string::npos);
    CHECK(err(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", d8)).find("needs 12") != std::string::npos);
    CHECK(err(npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", d8)).find("Fortran") != std::string::npos);
    CHECK(err(npy_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", d8)).find("unsupported npy dtype") !=
          std::string::npos);
    CHECK(err(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (a, b), }", d8)).find("not a tuple") !=
          std::string::npos);
    CHECK(err(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", d8))
              .find("too large") != std::string::npos);
    CHECK(err(npy_bytes("{'fortran_order': False, 'shape': (2,), }", d8)).find("no 'descr'") != std::string::npos);
    std::string cut = npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", d8);
    cut[8] = '\x7F';  // header length past the end
    cut[9] = '\x7F';
    CHECK(err(cut).find("runs past the end") != std::string::npos);
    CHECK_THROWS_WITH_AS(npy_read(dir / "absent.npy"), doctest::Contains("absent.npy: cannot open"), UserError);
}
