"""kmod/compat: kdat's modules build warning-free (W=1 -Werror) against the headers of every
supported kernel series, and the feature probes find in each what that kernel has."""
import os
import re
import subprocess

import pytest

from kdat_harness import REPO, supported_kernels

# What each supported series' Debian kernel has of the interfaces the layer probes (upstream
# releases in kmod/compat/probe); a probe that says otherwise is broken, or the kernel changed.
HAVE = {
    "6.1": {"BLK_MQ_F_SHOULD_MERGE"},
    "6.12": {"VM_FLAGS_SET", "BDEV_FILE_OPEN_BY_PATH", "BLK_MQ_ALLOC_DISK_LIMITS",
             "BLK_FEAT_WRITE_CACHE", "BLK_MQ_F_SHOULD_MERGE"},
}


def _series(kver):
    return ".".join(kver.split(".")[:2])


def _config(path):
    with open(path) as f:
        text = f.read()
    return (set(re.findall(r"^#define KDAT_HAVE_(\w+) 1", text, re.M)),
            set(re.findall(r"#undef KDAT_HAVE_(\w+)", text)))


@pytest.mark.parametrize("kver", supported_kernels())
def test_the_modules_build_on_each_supported_kernel_with_what_the_probes_found(kver):
    if os.path.isfile(os.path.join(REPO, "kmod", "kdat_config.h")) and \
            f" {kver}, " in open(os.path.join(REPO, "kmod", "kdat_config.h")).readline():
        kmod = os.path.join(REPO, "kmod")  # make built kmod/ for this kernel
    else:
        r = subprocess.run([os.path.join(REPO, "scripts", "build-modules"), kver],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        kmod = os.path.join(REPO, "build", "modules", kver, "kmod")
    for ko in ("kdat.ko", "blk/kdat_blk.ko", "blk/kdat_blkt.ko", "samples/kdat_echo.ko",
               "samples/kdat_blkio.ko"):
        path = os.path.join(kmod, ko)
        assert os.path.isfile(path), path
        vermagic = subprocess.run(["modinfo", "-F", "vermagic", path], capture_output=True,
                                  text=True, check=True).stdout
        assert vermagic.startswith(kver + " "), (path, vermagic)
    have, absent = _config(os.path.join(kmod, "kdat_config.h"))
    assert have | absent and not have & absent
    assert have == HAVE[_series(kver)], f"{kver}: probes found {sorted(have)}"


def test_a_probe_that_cannot_compile_at_all_stops_the_build(tmp_path):
    """Flags that break every compile must not read as "every interface absent"."""
    out = tmp_path / "kdat_config.h"
    r = subprocess.run([os.path.join(REPO, "kmod", "compat", "probe"), str(out), "x", "false"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and not out.exists()
    assert "no probe can work" in r.stderr
