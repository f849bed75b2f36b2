"""Comments and prose cite documents by name and carry no history.

The five man pages kdat started from are cited by name (dat_ep_dup_connect(3DAT),
dat_ep_disconnect(3DAT), VI-GM's VipConnectRequest, dat_cr_accept(3DAT), rdma_connect(3)), never
by their numbers in the starting set ("seed 000" .. "seed 004"), which a reader of the tree
cannot look up.  Dates (YYYY-MM-DD) are history: they belong in commit messages and
bench/results, not in code comments or prose."""
import fnmatch
import os
import re
import subprocess

import pytest

from kdat_harness import REPO

SELF = "tests/host/test_prose.py"

# A citation of a starting document by number: "seed 001", "Seed 004's", "seeds 000/003",
# "table_seed000_connect", and one wrapped after "seed" onto the next comment line.
SEED_CITATION = re.compile(
    r"(?<![a-z])seeds?[ \t_-]*(?:\n[ \t]*(?://|#|\*(?!/))?[ \t]*)?0{0,2}[0-4](?![0-9])",
    re.IGNORECASE)
DATE = re.compile(r"(?<![0-9])(?:19|20)[0-9]{2}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
                  r"(?![0-9])")

# Every tracked file is checked for seed citations, except these for good.
SEED_EXEMPT = ["bench/results/*", SELF]
# Where dates are checked: code (its comments) and prose.  bench/results and debian/changelog are
# outside these paths on purpose: measurements and the package's history are dated.
DATE_PATHS = ["README.md", "docs/*", "kmod/*", "kunit/*", "include/*", "user/*", "scripts/*",
              "tests/*"]
# A man page's .TH line carries the page's date, which man(7) prints in its footer: metadata the
# format asks for, not history in prose.  Only that line of a page in user/man may hold one.
DATE_ALLOWED_LINE = {"user/man/*": re.compile(r"^\.TH\s")}

def _matches(path, patterns):
    # fnmatch's * also matches "/", so "kmod/*" is everything under kmod/
    return any(fnmatch.fnmatchcase(path, p) for p in patterns)


def _line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def seed_citations(text):
    """(line, citation) of every seed citation in text, by the line it starts on."""
    return [(_line_of(text, m.start()), " ".join(m.group().split()))
            for m in SEED_CITATION.finditer(text)]


def dates(text, allowed_line=None):
    """(line, date) of every YYYY-MM-DD date in text, except on lines allowed_line matches."""
    found = []
    for number, line in enumerate(text.split("\n"), 1):
        if allowed_line is not None and allowed_line.search(line):
            continue
        found.extend((number, m.group()) for m in DATE.finditer(line))
    return found


def report(path, found):
    """The failure lines for `found` in path: file:line: what."""
    return [f"{path}:{line}: {what}" for line, what in found]


def _tracked():
    r = subprocess.run(["git", "-C", REPO, "ls-files", "-z"], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"not a git checkout: {r.stderr.strip()}")
    for path in r.stdout.split("\0"):
        full = os.path.join(REPO, path)
        if path and os.path.isfile(full):
            with open(full, "rb") as f:
                data = f.read()
            if b"\0" not in data:  # text files only
                yield path, data.decode("utf-8", errors="replace")


def test_no_file_cites_a_seed_document_by_number():
    found = [line for path, text in _tracked() if not _matches(path, SEED_EXEMPT)
             for line in report(path, seed_citations(text))]
    assert not found, ("cite the man page by name (e.g. dat_ep_disconnect(3DAT)), with the rule it "
                       "states where the comment relies on it:\n" + "\n".join(found))


def test_no_comment_or_prose_holds_a_date():
    found = []
    for path, text in _tracked():
        if not _matches(path, DATE_PATHS):
            continue
        allowed = next((rx for p, rx in DATE_ALLOWED_LINE.items() if fnmatch.fnmatchcase(path, p)),
                       None)
        found += report(path, dates(text, allowed))
    assert not found, ("dates are history: say why in the present tense, and put the when in the "
                       "commit message or bench/results:\n" + "\n".join(found))


def test_the_scanners_report_what_they_are_for():
    # Built from pieces, so that this file itself holds neither a citation nor a date.
    date = "-".join(["2026", "11", "29"])
    text = "\n".join([
        "int x;",
        "/* as " + "Seed" + " 001's graceful order says */",
        "# measured on " + date + ": 3 of 11 runs",
        "// the flushes come first (" + "seed",
        "// 001), in order",
        "seeds " + "000/003 and " + "table_seed" + "003_accept",
        "a random seed 12345, seedless 1, seed " + "(printed), version 2026-13-01",
        ".TH KDAT 7 " + date,
    ])
    assert seed_citations(text) == [(2, "Seed 001"), (4, "seed // 001"), (6, "seeds 000"),
                                    (6, "seed003")]
    assert dates(text) == [(3, date), (8, date)]
    assert dates(text, DATE_ALLOWED_LINE["user/man/*"]) == [(3, date)]
    # a failure names file:line
    assert report("kmod/x.c", dates(text))[0] == f"kmod/x.c:3: {date}"
