// The one translation unit that defines doctest's main(); linked into every test.
// Deliberately nothing else: tests live in their own files under tests/<layer>/.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
