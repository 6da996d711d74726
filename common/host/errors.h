// host/errors.h — user errors and the one way every monocu program reports them.
//
// Usage:
//   die("%s: tensor '%s' has dtype %s, expected %s", path, name, got, want);
//       throws monocu::UserError with the formatted one-line message.
//   int main(int argc, char** argv) { return run_main([&] { ...; return 0; }); }
//       catches UserError (prints "error: <message>", returns 1), UsageError (prints the message plus a
//       pointer to --help, returns 2), and any other std::exception (one line, returns 1: never terminate()).
//
// Why throw instead of exit(): the same parsers run inside doctest, where a hostile
// file must be rejected with a specific message and the test must go on. Engines and
// tools wrap main in run_main, so users still see one line and a non-zero exit.
// CUDA and cuBLAS failures are programming or driver errors, not user errors: they
// live in cuda_check.h and abort with function, file, line and error name.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

namespace monocu {

// A problem with the user's input (file, flag, prompt): one line, exit code 1.
struct UserError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A bad command line: one line plus "see --help", exit code 2.
struct UsageError : UserError {
    using UserError::UserError;
};

inline std::string vstrf(const char* fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = std::vsnprintf(nullptr, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) return fmt;
    std::string s(static_cast<size_t>(n) + 1, '\0');
    std::vsnprintf(&s[0], s.size(), fmt, ap);
    s.resize(static_cast<size_t>(n));
    return s;
}

// printf into a std::string.
__attribute__((format(printf, 1, 2))) inline std::string strf(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vstrf(fmt, ap);
    va_end(ap);
    return s;
}

[[noreturn]] __attribute__((format(printf, 1, 2))) inline void die(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vstrf(fmt, ap);
    va_end(ap);
    throw UserError(s);
}

[[noreturn]] __attribute__((format(printf, 1, 2))) inline void die_usage(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vstrf(fmt, ap);
    va_end(ap);
    throw UsageError(s);
}

// Runs body(); turns user errors into one line on stderr and an exit code.
template <class F>
int run_main(F&& body) {
    try {
        return body();
    } catch (const UsageError& e) {
        std::fprintf(stderr, "error: %s (see --help)\n", e.what());
        return 2;
    } catch (const UserError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "error: out of host memory\n");
        return 1;
    } catch (const std::exception& e) {  // a library's exception we did not turn into a UserError: still one line
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}

}  // namespace monocu
