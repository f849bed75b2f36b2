"""The kdat Python test harness: parses include/ (the state table, the uapi structs) and drives
/dev/kdat through raw ioctls.  Nothing here is retyped from the C headers."""
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INCLUDE = os.path.join(REPO, "include")
KDATCTL = os.path.join(REPO, "build", "user", "kdatctl")  # the build's kdatctl (user/tools)


def kdat_version():
    """The version of kdat's module, libraries and tools (include/kdat/version.h)."""
    import re
    with open(os.path.join(INCLUDE, "kdat", "version.h")) as f:
        return re.search(r'#define KDAT_VERSION "([0-9.]+)"', f.read()).group(1)


def supported_kernels():
    """The installed kernel of each supported series, the default first (scripts/kver)."""
    import subprocess
    kver = os.path.join(REPO, "scripts", "kver")
    series = subprocess.run([kver, "--series"], capture_output=True, text=True,
                            check=True).stdout.split()
    return [subprocess.run([kver, s], capture_output=True, text=True, check=True).stdout.strip()
            for s in series]


def guest_kver():
    """The guest kernel's version, as the build uses it (scripts/kver)."""
    import subprocess
    return subprocess.run([os.path.join(REPO, "scripts", "kver")], capture_output=True, text=True,
                          check=True).stdout.strip()
