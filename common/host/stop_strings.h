// host/stop_strings.h — stop strings over streamed text (OpenAI's "stop"): generation ends where one first appears,
// and none of it is shown.
//
// Usage (after the tokenizer's stream decoder, which hands over whole characters):
//   StopStrings st({"\n\n", "END"});
//   std::string out = st.push(piece);   // what can be shown now: text that cannot be the start of a stop string
//   if (st.stopped()) ...               // a stop string appeared: out ended just before it; stop generating
//   out += st.flush();                  // at the end of generation: the text held back (no stop followed)
//
// Text that might be the beginning of a stop string (a suffix of what came so far that is a prefix of one) is held
// back until the next pieces decide. The stop string that is complete first wins (the text is cut at its start),
// whatever the pieces: as if the text came a character at a time.
#pragma once

#include <string>
#include <vector>

#include "host/errors.h"

namespace monocu {

class StopStrings {
public:
    explicit StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {
        for (const std::string& s : stops_)
            if (s.empty()) die("stop strings: an empty stop string");
    }

    bool empty() const { return stops_.empty(); }
    bool stopped() const { return stopped_; }

    std::string push(const std::string& piece) {
        if (stopped_) return "";
        held_ += piece;
        // The stop string that is complete first (the least end; at equal ends the longest), as if the text came one
        // character at a time: the result does not depend on how it was cut into pieces.
        size_t at = std::string::npos, end = std::string::npos;
        for (const std::string& s : stops_) {
            size_t p = held_.find(s);  // its first occurrence ends first
            if (p == std::string::npos) continue;
            if (p + s.size() < end || (p + s.size() == end && p < at)) at = p, end = p + s.size();
        }
        if (at != std::string::npos) {
            stopped_ = true;
            std::string out = held_.substr(0, at);
            held_.clear();
            return out;
        }
        // Keep the longest suffix that some stop string starts with; show the rest.
        size_t keep = 0;
        for (const std::string& s : stops_)
            for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; n--)
                if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
                    keep = n;
                    break;
                }
        std::string out = held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return out;
    }

    std::string flush() {
        std::string out = stopped_ ? "" : held_;
        held_.clear();
        return out;
    }

private:
    std::vector<std::string> stops_;
    std::string held_;
    bool stopped_ = false;
};

}  // namespace monocu
