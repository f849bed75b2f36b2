"""A throw-away root for host tests that install: an overlay on the host's / (which stays
untouched) with proc, sys, dev, tmp and run mounted, in which commands run chrooted.  Needs
root."""
import contextlib
import subprocess


@contextlib.contextmanager
def scratch_root(tmp_path, upper=None):
    """Yields a function run(*cmd, check=True) -> CompletedProcess that runs cmd chrooted in the
    root, with the merged root's path as its .path.  upper: a directory (a copy of an installed
    root's upper layer) to use as the overlay's upper layer instead of an empty one.  (A copy, not
    one more layer: a layer below / on the same file system is an overlapping lower layer, which
    overlayfs refuses.)"""
    up = upper or tmp_path / "up"
    work, merged = tmp_path / "work", tmp_path / "merged"
    for d in (up, work, merged):
        d.mkdir(exist_ok=True)
    mounts = []
    try:
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir=/,upperdir={up},workdir={work}", str(merged)], check=True)
        mounts.append(merged)
        for fs, sub in (("proc", "proc"), ("sysfs", "sys"), ("tmpfs", "tmp"), ("tmpfs", "run")):
            subprocess.run(["mount", "-t", fs, fs, str(merged / sub)], check=True)
            mounts.append(merged / sub)
        subprocess.run(["mount", "--bind", "/dev", str(merged / "dev")], check=True)
        mounts.append(merged / "dev")

        def run(*cmd, check=True):
            r = subprocess.run(["chroot", str(merged), "env", "-i",
                                "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", *cmd],
                               capture_output=True, text=True)
            if check:
                assert r.returncode == 0, f"{' '.join(cmd)}: rc {r.returncode}\n" \
                    f"{r.stdout[-3000:]}{r.stderr[-3000:]}"
            return r
        run.path = merged
        yield run
    finally:
        for m in reversed(mounts):
            subprocess.run(["umount", str(m)], check=False)
