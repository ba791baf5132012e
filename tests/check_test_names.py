"""Refuses Catch2 test names that CTest cannot run: catch_discover_tests turns each TEST_CASE name into a CTest test,
and CTest splits a name at ';' (a CMake list separator) into several tests that each match nothing and fail.
Reads every tests/**/*.cpp and *.cu, joins the adjacent string literals of each TEST_CASE name, and exits 1 naming
the file, line and name of every one that holds a ';'. Run: /usr/bin/python3 tests/check_test_names.py tests/

It also refuses names whose first ': ' comes late: Catch2 v2's console reporter indents a wrapped name's later lines
to just after its first ': ', and an indent beyond the 79-column console width makes it throw std::out_of_range while
it reports a failure (the test binary aborts instead of naming the failed check).
"""
import pathlib
import re
import sys

NAME = re.compile(r'TEST_CASE\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)')
LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')
MAX_FIRST_COLON = 60  # Catch's console width is 80; its header lines start at column 0 and wrap at 79


def main(root):
    bad = []
    files = sorted(p for p in pathlib.Path(root).rglob("*") if p.suffix in (".cpp", ".cu"))
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        for m in NAME.finditer(text):
            name = "".join(LITERAL.findall(m.group(1)))
            line = text.count("\n", 0, m.start()) + 1
            if ";" in name:
                bad.append(f"{path}:{line}: test name holds ';' (CTest would split it): {name}")
            colon = name.find(": ")
            if len(name) > MAX_FIRST_COLON and colon + 2 > MAX_FIRST_COLON:
                bad.append(f"{path}:{line}: the first ': ' of this long name is at column {colon} (at most "
                           f"{MAX_FIRST_COLON - 2}, or the reporter crashes on a failure): {name}")
    for b in bad:
        print(b)
    print(f"{len(files)} files, {len(bad)} bad test name(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "tests"))
