#include <doctest/doctest.h>

#include "host/errors.h"

using namespace monocu;

TEST_CASE("die throws a UserError carrying the formatted message") {
    CHECK_THROWS_WITH_AS(die("%s: bad %d", "file.json", 7), "file.json: bad 7", UserError);
}

TEST_CASE("run_main maps errors to exit codes") {
    CHECK(run_main([] { return 0; }) == 0);
    CHECK(run_main([]() -> int { die("boom"); }) == 1);
    CHECK(run_main([]() -> int { die_usage("--temp: not a number"); }) == 2);
}

TEST_CASE("strf formats long strings without truncation") {
    std::string big(5000, 'x');
    CHECK(strf("<%s>", big.c_str()).size() == 5002);
}
