// Host test runner: every tests/*.cpp is linked into build/tests/host_tests.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
