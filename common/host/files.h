// host/files.h — a user's file read safely: only a regular file, of bounded size, read whole.
//
// Usage:
//   std::string text = read_file_bounded("config.json", kConfigMaxBytes);   // die()s with the file and the problem
//   int fd = open_regular_file(path);                                      // for mmap: never blocks on a FIFO
//
// Why: a folder, a FIFO or a device where a file is expected must be one clear error, not a hang (open(2) of a FIFO
// waits for a writer; reading a character device never ends) or an exception from the standard library; and a
// file larger than anything sensible for its kind (a 40 GB "config.json") must not be read into memory.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "host/errors.h"

namespace monocu {

constexpr uint64_t kConfigMaxBytes = 64ull << 20;      // config.json, generation_config.json, tokenizer_config.json
constexpr uint64_t kTextMaxBytes = 1ull << 30;         // a prompt file, a batch file
constexpr uint64_t kTokenizerMaxBytes = 1ull << 30;    // tokenizer.json (the largest real ones are ~35 MB)

// Opens path for reading and checks it is a regular file; returns the descriptor and its size. O_NONBLOCK, so that
// opening a FIFO returns at once (and is then refused) instead of waiting for a writer.
inline int open_regular_file(const std::string& path, uint64_t* size) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) die("%s: cannot open (%s)", path.c_str(), std::strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        ::close(fd);
        die("%s: cannot stat (%s)", path.c_str(), std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        die("%s: %s, not a regular file", path.c_str(),
            S_ISDIR(st.st_mode) ? "is a folder" : S_ISFIFO(st.st_mode) ? "is a FIFO" : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "is a device" : "is special");
    }
    *size = static_cast<uint64_t>(st.st_size);
    return fd;
}

// The whole file, if it is a regular file of at most max_bytes.
inline std::string read_file_bounded(const std::string& path, uint64_t max_bytes) {
    uint64_t size = 0;
    int fd = open_regular_file(path, &size);
    if (size > max_bytes) {
        ::close(fd);
        die("%s: %llu bytes is more than this kind of file may have (%llu)", path.c_str(), (unsigned long long)size,
            (unsigned long long)max_bytes);
    }
    std::string out(static_cast<size_t>(size), '\0');
    size_t got = 0;
    while (got < out.size()) {  // a file that shrinks while read is read short; one that grows is cut at its size
        ssize_t n = ::read(fd, &out[got], out.size() - got);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n < 0) {
            int e = errno;
            ::close(fd);
            die("%s: read failed (%s)", path.c_str(), std::strerror(e));
        }
        if (n == 0) break;
        got += static_cast<size_t>(n);
    }
    ::close(fd);
    out.resize(got);
    return out;
}

}  // namespace monocu
