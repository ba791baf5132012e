"""CTest entry for the Python tests: runs pytest on this directory; exit 77 (CTest: skipped) when pytest or NumPy
is missing, so that a machine without them reports the suite as skipped, not passed."""
import sys

try:
    import numpy  # noqa: F401
    import pytest
except ImportError as e:
    print(f"python tests skipped: {e} (Debian: apt-get install python3-pytest python3-numpy)")
    sys.exit(77)

sys.exit(pytest.main(["-q", "-rs", "-p", "no:cacheprovider", *sys.argv[1:]]))
