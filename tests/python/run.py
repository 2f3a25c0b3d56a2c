#!/usr/bin/env python3
"""Runs the python suite under pytest.

Exit 77 (skipped) where a required Debian package (python3-numpy, python3-pytest) is
missing or nothing ran (no device), unless CI is set: then a missing package fails, so CI
never passes on a suite that did not run.
"""
import os
import sys


def main():
    missing = []
    for mod in ("numpy", "pytest", "cffi"):
        try:
            __import__(mod)
        except ImportError:
            missing.append("python3-" + mod)
    if missing:
        print("missing Debian packages for %s: %s" % (sys.executable, " ".join(missing)))
        return 1 if os.environ.get("CI") else 77
    import pytest  # pylint: disable=import-outside-toplevel

    class Count:
        def __init__(self):
            self.passed = self.skipped = 0

        def pytest_runtest_logreport(self, report):
            if report.when == "call" and report.passed:
                self.passed += 1
            if report.skipped:
                self.skipped += 1

    count = Count()
    args = ["-q", "-p", "no:cacheprovider", "-rs",
            "--rootdir", os.path.dirname(os.path.abspath(__file__))] + sys.argv[1:]
    rc = pytest.main(args, plugins=[count])
    if rc == 5 or (rc == 0 and count.passed == 0):
        return 77
    return int(rc)


if __name__ == "__main__":
    sys.exit(main())
