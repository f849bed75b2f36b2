"""make install (issue #25): what it puts where, and that an out-of-tree kernel module builds and
links against kdat from the installed files alone, as a storage driver outside this tree would."""
import os
import re
import subprocess
import textwrap

import pytest

from kdat_harness import REPO, guest_kver, kdat_version
from kdat_harness.scratch_root import scratch_root




@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("destdir")
    r = subprocess.run(["make", "-s", "-C", REPO, "install", f"DESTDIR={root}", "PREFIX=/usr"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return root


def test_install_puts_the_module_rule_libraries_tools_and_kernel_headers_in_place(installed):
    kver, version = guest_kver(), kdat_version()
    ko = installed / "lib" / "modules" / kver / "updates" / "kdat.ko"
    assert ko.is_file()
    info = subprocess.run(["modinfo", "-F", "version", str(ko)], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert info == version, "MODULE_VERSION is not include/kdat/version.h's"
    for module in ("kdat_blk", "kdat_blkt"):    # the block driver pair, beside it
        assert (ko.parent / f"{module}.ko").is_file(), module
    rules = list(installed.glob("**/udev/rules.d/99-kdat.rules"))
    assert len(rules) == 1, "the udev rule is not installed"
    text = rules[0].read_text()
    assert 'SUBSYSTEM=="infiniband", RUN{builtin}+="kmod load kdat"' in text
    group = re.search(r'^KERNEL=="kdat".*GROUP="(\w+)"', text, re.M)[1]
    sysusers = (installed / "usr/lib/sysusers.d/kdat.conf").read_text()
    assert [x.split() for x in sysusers.splitlines() if not x.startswith("#")] == \
        [["g", group, "-", "-"]], "the sysusers.d entry is not the udev rule's group"
    src = installed / "usr" / "src" / f"kdat-{version}"
    for h in ("include/kdat/kdat.h", "include/kdat/ep_table.h", "include/kdat/version.h",
              "include/kdat/uapi/kdat.h", "include/kdat/uapi/kdat_dat.h",
              "include/kdat/uapi/kdat_commands.h", "include/kdat/uapi/kdat_counters.h",
              f"{kver}/Module.symvers"):
        assert (src / h).is_file(), h
    symvers = (src / kver / "Module.symvers").read_text()
    assert re.search(r"^0x[0-9a-f]+\tkdat_ep_connect\t", symvers, re.M), "kdat's exports missing"
    for f in ("usr/bin/kdatctl", "usr/lib/libkdat.so.0", "usr/lib/libdaplkdat.so.2",
              "usr/lib/pkgconfig/kdat.pc", "usr/include/kdat/kdat.hpp", "usr/share/kdat/dat.conf"):
        assert (installed / f).exists(), f
    # the installed tool runs from where it was put (RUNPATH), and says its version
    out = subprocess.run([str(installed / "usr/bin/kdatctl"), "--help"], capture_output=True,
                         text=True, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0 and "usage: kdatctl" in out.stdout, out.stderr


CONSUMER = textwrap.dedent("""\
    // SPDX-License-Identifier: GPL-2.0
    #include <linux/module.h>
    #include <kdat/kdat.h>
    #include <kdat/version.h>

    static struct kdat_ia *ia;

    static int __init consumer_init(void)
    {
    \tpr_info("consumer of kdat %s\\n", KDAT_VERSION);
    \treturn kdat_ia_open("lo", &ia) ? -ENODEV : 0;
    }

    static void __exit consumer_exit(void)
    {
    \tkdat_ia_close(ia, KDAT_IA_CLOSE_ABRUPT);
    }

    module_init(consumer_init);
    module_exit(consumer_exit);
    MODULE_LICENSE("GPL");
    """)


def test_an_out_of_tree_kernel_module_builds_against_the_installed_kdat(installed, tmp_path):
    kver, version = guest_kver(), kdat_version()
    src = installed / "usr" / "src" / f"kdat-{version}"
    (tmp_path / "consumer.c").write_text(CONSUMER)
    (tmp_path / "Kbuild").write_text(f"ccflags-y := -I{src}/include\nobj-m := consumer.o\n")
    r = subprocess.run(["make", "-C", f"/lib/modules/{kver}/build", f"M={tmp_path}",
                        f"KBUILD_EXTRA_SYMBOLS={src}/{kver}/Module.symvers", "modules"],
                       capture_output=True, text=True)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "undefined" not in out, "modpost did not find kdat's symbols: " + out[-2000:]
    deps = subprocess.run(["modinfo", "-F", "depends", str(tmp_path / "consumer.ko")],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert deps.split(",") == ["kdat"], deps


def test_install_without_destdir_creates_the_rdma_group(tmp_path):
    """Installed for real (in a scratch root whose rdma group was removed: the host may have it
    from libibverbs1), make install makes the udev rule's group as a system group."""
    if os.geteuid() != 0:
        pytest.fail("this test installs into a chrooted overlay: run the host tests as root")
    with scratch_root(tmp_path) as run:
        if run("getent", "group", "rdma", check=False).returncode == 0:
            run("groupdel", "rdma")
        run("make", "-s", "-C", REPO, "install", "PREFIX=/usr/local")
        gid = int(run("getent", "group", "rdma").stdout.split(":")[2])
        assert 100 <= gid <= 999, f"rdma is not a system group (Debian: 100-999): {gid}"
        assert (run.path / "usr/lib/sysusers.d/kdat.conf").is_file()
