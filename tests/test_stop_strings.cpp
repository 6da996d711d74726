#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "host/stop_strings.h"

using namespace monocu;

TEST_CASE("stop strings: cut before the first one, across pieces, none of it shown; held text released at the end") {
    StopStrings a({"END", "\n\n"});
    CHECK(a.push("hello END world") == "hello ");
    CHECK(a.stopped());
    CHECK(a.push("more") == "");
    CHECK(a.flush() == "");

    StopStrings b({"END"});
    CHECK(b.push("hel") == "hel");
    CHECK(b.push("lo E") == "lo ");  // "E" may start END: held
    CHECK(b.push("N") == "");
    CHECK_FALSE(b.stopped());
    CHECK(b.push("D!") == "");
    CHECK(b.stopped());

    StopStrings c({"END"});
    CHECK(c.push("E") == "");
    CHECK(c.push("X") == "EX");  // a false start comes out
    CHECK(c.push("EN") == "");
    CHECK(c.flush() == "EN");    // generation ended without the rest

    StopStrings d({"aab"});  // a stop string that overlaps itself
    std::string out;
    for (const char* p : {"a", "a", "a", "b", "c"}) out += d.push(p);
    CHECK(out == "a");
    CHECK(d.stopped());

    StopStrings e({"xyz", "y"});  // the one complete first wins: "y" ends before "xyz" does
    CHECK(e.push("axyz") == "ax");
    StopStrings f({"b", "xab"});  // both end at the same character: the longer one, which starts earlier
    CHECK(f.push("axab") == "a");

    CHECK_THROWS_AS(StopStrings({"ok", ""}), UserError);
    StopStrings none({});
    CHECK(none.empty());
    CHECK(none.push("anything") == "anything");
}

TEST_CASE("stop strings: random texts split anywhere give the text up to the first stop string, exactly") {
    std::mt19937 g(4);
    auto word = [&](int n) {
        std::string s;
        for (int i = 0; i < n; i++) s += "abc\n"[g() % 4];
        return s;
    };
    for (int rep = 0; rep < 3000; rep++) {
        std::vector<std::string> stops;
        for (int i = 0, n = 1 + (int)(g() % 3); i < n; i++) stops.push_back(word(1 + (int)(g() % 4)));
        std::string text = word((int)(g() % 40));
        // The reference: the first end position at which some stop string is complete; cut at the longest one's start.
        size_t first = std::string::npos;
        for (size_t end = 1; end <= text.size() && first == std::string::npos; end++)
            for (const std::string& s : stops)
                if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0) first = std::min(first, end - s.size());
        std::string want = first == std::string::npos ? text : text.substr(0, first);
        StopStrings st(stops);
        std::string got;
        for (size_t at = 0; at < text.size();) {
            size_t n = 1 + g() % 5;
            got += st.push(text.substr(at, n));
            at += n;
        }
        got += st.flush();
        CAPTURE(text);
        CHECK(got == want);
        CHECK(st.stopped() == (first != std::string::npos));
    }
}
