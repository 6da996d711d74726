// gpu/profile.cuh — where a forward pass's time goes, operation by operation (--bench's breakdown).
//
// Usage:
//   { OpScope op("gemm", stream, flops, L.label); ...launches...; }   // in a kit launcher: times what it queues
//   op_profile().start();  model.forward(...);  op_profile().stop(stream);   // an eager (uncaptured) pass
//   for (const OpProfile::Row& r : op_profile().rows()) ...     // name, calls, ms, flops, in first-call order
//
// Off (the default), a scope costs one branch. On, each scope records a CUDA event before and after its
// launches, so each operation runs alone: the next one cannot overlap its tail (the events also stop
// programmatic dependent launch from overlapping them). The sum of the rows against the measured pass is
// what chaining the operations costs or saves. Never on during a graph capture (events would be captured).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "gpu/cuda_check.h"

namespace monocu {

class OpProfile {
public:
    struct Row {
        std::string name;
        int calls = 0;
        double ms = 0, flops = 0;
    };
    bool on() const { return on_; }
    void start() {
        reset();
        on_ = true;
    }
    // Ends a profiled pass: waits for its events and sums them by name.
    void stop(cudaStream_t stream) {
        on_ = false;
        CUDA_CHECK(cudaStreamSynchronize(stream));
        for (const Mark& m : marks_) {
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, m.begin, m.end));
            auto it = index_.find(m.name);
            if (it == index_.end()) it = index_.emplace(m.name, rows_.size()).first, rows_.push_back(Row{m.name});
            Row& r = rows_[it->second];
            r.calls++, r.ms += ms, r.flops += m.flops;
        }
        release_events();
    }
    const std::vector<Row>& rows() const { return rows_; }
    void reset() {
        release_events();
        rows_.clear(), index_.clear();
    }

    // Used by OpScope.
    size_t begin(const std::string& name, double flops, cudaStream_t s) {
        Mark m{name, flops, event(), event()};
        CUDA_CHECK(cudaEventRecord(m.begin, s));
        marks_.push_back(m);
        return marks_.size() - 1;
    }
    void end(size_t mark, cudaStream_t s) { CUDA_CHECK(cudaEventRecord(marks_[mark].end, s)); }

    ~OpProfile() { release_events(); }

private:
    struct Mark {
        std::string name;
        double flops;
        cudaEvent_t begin, end;
    };
    cudaEvent_t event() {
        cudaEvent_t e;
        CUDA_CHECK(cudaEventCreate(&e));
        return e;
    }
    void release_events() {
        for (Mark& m : marks_) cudaEventDestroy(m.begin), cudaEventDestroy(m.end);
        marks_.clear();
    }
    bool on_ = false;
    std::vector<Mark> marks_;
    std::vector<Row> rows_;
    std::map<std::string, size_t> index_;
};

inline OpProfile& op_profile() {
    static OpProfile p;
    return p;
}

// Times the launches queued on `stream` while it lives, when profiling is on.
class OpScope {
public:
    // The row is "name" or, with a detail, "name detail" (e.g. "gemm o_proj"): built only when profiling.
    OpScope(const char* name, cudaStream_t s, double flops = 0, const char* detail = nullptr) : stream_(s) {
        if (!op_profile().on()) return;
        std::string row = detail ? std::string(name) + " " + detail : std::string(name);
        mark_ = op_profile().begin(row, flops, s), active_ = true;
    }
    ~OpScope() {
        if (active_) op_profile().end(mark_, stream_);
    }
    OpScope(const OpScope&) = delete;
    OpScope& operator=(const OpScope&) = delete;

private:
    cudaStream_t stream_;
    size_t mark_ = 0;
    bool active_ = false;
};

}  // namespace monocu
