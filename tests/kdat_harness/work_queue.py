"""A suite's test files shared out among guests as they go (run-tests' two-guest lanes).

Every guest collects the whole suite and walks its files in one order, longest first by the
measured weights (tests/guest/KERNEL-weights.txt: seconds per file; a file not listed counts
DEFAULT_WEIGHT).  Before a file's first test a guest claims the file by making a directory of its
name in the queue directory, which all the lane's guests share over 9p: mkdir is atomic on the
host, so exactly one guest runs each file, and a guest that is slower (started later, or starved
on a busy host) simply claims fewer.  The lane's guests then end within about one file of each
other whatever the load, which a split fixed in advance cannot promise: under load one guest of
such a split can end long before the other, which then runs on alone.

Enabled by KDAT_QUEUE (the shared directory); KDAT_QUEUE_WEIGHTS names the weights file and
KDAT_QUEUE_NAME what a claim records as its owner."""
import errno
import os

import pytest

DEFAULT_WEIGHT = 10.0


def read_weights(path):
    """{file name: seconds} from a weights file ('SECONDS NAME' lines, '#' comments)."""
    weights = {}
    if path and os.path.exists(path):
        with open(path) as f:
            for line in f:
                fields = line.split()
                if len(fields) == 2 and not line.startswith("#"):
                    weights[fields[1]] = float(fields[0])
    return weights


def order(names, weights):
    """Longest first; ties by name, so that every guest walks the same order."""
    return sorted(set(names), key=lambda n: (-weights.get(n, DEFAULT_WEIGHT), n))


class Queue:
    """The claims of one lane: a directory shared by its guests."""

    def __init__(self, path, owner=""):
        self.path = path
        self.owner = owner

    def claim(self, name):
        """True if this caller is the first to claim `name` (and so must run it)."""
        if os.sep in name or name in ("", ".", ".."):
            raise ValueError(f"not a file name: {name!r}")
        try:
            os.mkdir(os.path.join(self.path, name))
        except OSError as e:
            if e.errno == errno.EEXIST:
                return False
            raise
        if self.owner:
            # who ran it, for a reader of the results; the claim itself is the mkdir
            with open(os.path.join(self.path, name, "owner"), "w") as f:
                f.write(self.owner + "\n")
        return True


def _file_of(item):
    return os.path.basename(str(item.fspath))


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    """pytest's own loop, over the files this guest claims (with KDAT_QUEUE; else pytest's)."""
    path = os.environ.get("KDAT_QUEUE")
    if not path:
        return None
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(f"{session.testsfailed} errors during collection")
    if session.config.option.collectonly:
        return True
    queue = Queue(path, os.environ.get("KDAT_QUEUE_NAME", ""))
    groups = {}
    for item in session.items:
        groups.setdefault(_file_of(item), []).append(item)
    names = order(groups, read_weights(os.environ.get("KDAT_QUEUE_WEIGHTS")))

    def claim_from(start):
        return next((k for k in range(start, len(names)) if queue.claim(names[k])), None)

    current = claim_from(0)
    while current is not None:
        items = groups[names[current]]
        for j, item in enumerate(items):
            if j + 1 < len(items):
                nextitem = items[j + 1]
            else:
                # The next file is claimed before this file's last test, so that pytest knows the
                # item that follows (None: the last, when the session's fixtures go too).
                current = claim_from(current + 1)
                nextitem = groups[names[current]][0] if current is not None else None
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
    return True
