#!/usr/bin/python3
"""ctest's entry for the Python module's tests: runs pytest over tests/python (PYTHONPATH must
reach build/python; CMake sets it). pytest's "no tests collected" (exit 5) is a failure here: a
missing, misnamed or unimportable test file must not pass as "nothing failed"."""
import os
import sys

import pytest

here = os.path.dirname(os.path.abspath(__file__))
args = ["-q", "-p", "no:cacheprovider", "-rs", here] + sys.argv[1:]
rc = pytest.main(args)
if rc == pytest.ExitCode.NO_TESTS_COLLECTED:
    print(f"run.py: pytest collected no tests in {here}: failing (expected the test_*.py files there)",
          file=sys.stderr)
    sys.exit(1)
sys.exit(int(rc))
