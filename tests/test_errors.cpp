#include <doctest/doctest.h>

#include <stdexcept>

#include "host/errors.h"
#include "test_util.h"

using namespace monocu;
using monocu_test::capture_stderr;

TEST_CASE("die throws a UserError carrying the formatted message") {
    CHECK_THROWS_WITH_AS(die("%s: bad %d", "file.json", 7), "file.json: bad 7", UserError);
}

TEST_CASE("run_main maps errors to exit codes and one line on stderr") {
    CHECK(run_main([] { return 0; }) == 0);
    int rc = 0;
    CHECK(capture_stderr([&] { rc = run_main([]() -> int { die("boom"); }); }) == "error: boom\n");
    CHECK(rc == 1);
    CHECK(capture_stderr([&] { rc = run_main([]() -> int { die_usage("--temp: not a number"); }); }) == "error: --temp: not a number (see --help)\n");
    CHECK(rc == 2);
}

TEST_CASE("run_main turns any std::exception into one line and exit code 1, never terminate()") {
    int rc = 0;
    CHECK(capture_stderr([&] { rc = run_main([] { throw std::length_error("basic_string::_M_create"); return 0; }); }) ==
          "error: basic_string::_M_create\n");
    CHECK(rc == 1);
    CHECK(capture_stderr([&] { rc = run_main([] { throw std::out_of_range("vector::at"); return 0; }); }) == "error: vector::at\n");
    CHECK(rc == 1);
}

TEST_CASE("strf formats long strings without truncation") {
    std::string big(5000, 'x');
    CHECK(strf("<%s>", big.c_str()).size() == 5002);
}
