"""Kernel reports from code outside kdat that may be excused by name (scripts/known-kernel-defects).

    python3 known_defects.py NAME... < LOG   prints LOG without the excused reports (stdout) and
                                             one line per excused report (stderr)

One implementation for scripts/check-kernel-log (a lane's whole log) and the harness's KernelLog
(one test's lines).  Standalone: it imports nothing of the harness."""
import os
import re
import sys

DEFECTS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                            "known-kernel-defects")
CUT_HERE = "------------[ cut here ]------------"
END_TRACE = re.compile(r"---\[ end trace [0-9a-f]+ \]---")
MAX_REPORT_LINES = 300      # a report whose end was lost (log wrapped) ends here


class Defect:
    """A report's first line (the one after "cut here") matches `first`, and, where `frame` is
    given, one line of the report matches it too (a generic warning in the code of the defect)."""

    def __init__(self, first, frame=None):
        self.first, self.frame = re.compile(first), frame and re.compile(frame)

    def matches(self, report):
        return bool(self.first.search(report[0])) and \
            (not self.frame or any(self.frame.search(line) for line in report[1:]))


def load(path=DEFECTS_FILE):
    """{name: Defect} of every defect the file lists."""
    defects = {}
    with open(path) as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            name, first, frame, _what = line.rstrip("\n").split("\t", 3)
            defects[name] = Defect(first, None if frame == "-" else frame)
    return defects


def excuse(lines, names, defects=None):
    """(kept lines, [(name, the report's first line)]): each report that starts with "cut here"
    and matches an allowed defect is removed through its "end trace" line."""
    defects = load() if defects is None else defects
    unknown = [n for n in names if n not in defects]
    if unknown:
        raise KeyError(f"not in scripts/known-kernel-defects: {', '.join(unknown)}")
    allowed = [(n, defects[n]) for n in names]
    kept, excused = [], []
    i = 0
    while i < len(lines):
        if CUT_HERE in lines[i] and i + 1 < len(lines):
            end = i + 1
            while end < len(lines) and end - i < MAX_REPORT_LINES and \
                    not END_TRACE.search(lines[end]):
                end += 1
            hit = next((n for n, d in allowed if d.matches(lines[i + 1:end + 1])), None)
            if hit:
                excused.append((hit, lines[i + 1].strip()))
                i = end + 1
                continue
        kept.append(lines[i])
        i += 1
    return kept, excused


def main(argv):
    lines = sys.stdin.read().splitlines()
    kept, excused = excuse(lines, argv[1:])
    for name, first in excused:
        print(f"excused ({name}, scripts/known-kernel-defects): {first}", file=sys.stderr)
    sys.stdout.write("".join(line + "\n" for line in kept))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
