"""Kernel code passes checkpatch.pl; C++ is clang-format clean (scripts/check-style)."""
import os
import subprocess

from kdat_harness import REPO


def test_check_style_is_clean():
    r = subprocess.run([os.path.join(REPO, "scripts", "check-style")], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr
