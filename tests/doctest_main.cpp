// doctest's main(), compiled once (rumor_doctest_main) and linked into every test binary.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
