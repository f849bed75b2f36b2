"""scripts/known-kernel-defects and its filter: a report of a named defect of code outside kdat
is removed whole and named; every other report in the same log still fails the check."""
import os
import subprocess

import pytest

from kdat_harness import REPO, known_defects
from kdat_harness.guest import reports

CHECK = os.path.join(REPO, "scripts", "check-kernel-log")

# rxe-completer-loss as a guest's log shows it (the call trace shortened)
RXE_REPORT = """\
[ 1642.139000] ------------[ cut here ]------------
[ 1642.139100] WARNING: CPU: 0 PID: 14 at drivers/infiniband/sw/rxe/rxe_comp.c:756 rxe_completer+0x86c/0xd60 [rdma_rxe]
[ 1642.139200] Modules linked in: kdat rdma_rxe ip6_udp_tunnel udp_tunnel ib_uverbs
[ 1642.139300] Call Trace:
[ 1642.139400]  <TASK>
[ 1642.139802]  __udp4_lib_rcv+0x517/0xc30
[ 1642.140943]  ret_from_fork+0x22/0x30
[ 1642.140950]  </TASK>
[ 1642.140960] ---[ end trace 0000000000000000 ]---""".splitlines()
KDAT_REPORT = """\
[ 1650.000000] ------------[ cut here ]------------
[ 1650.000100] WARNING: CPU: 1 PID: 99 at kmod/kdat_ep.c:120 kdat_ep_step+0x10/0x20 [kdat]
[ 1650.000200] Call Trace:
[ 1650.000300] ---[ end trace 0000000000000000 ]---""".splitlines()
BEFORE, AFTER = ["[ 1640.0] kroce speed is unknown, defaulting to 1000"], ["[ 1660.0] after"]


def test_every_listed_defect_parses_and_names_are_unique():
    defects = known_defects.load()
    assert "rxe-completer-loss" in defects
    with open(known_defects.DEFECTS_FILE) as f:
        names = [line.split("\t")[0] for line in f if line.strip() and not line.startswith("#")]
    assert len(names) == len(set(names)) == len(defects)


def test_an_allowed_report_is_removed_whole_and_named():
    kept, excused = known_defects.excuse(BEFORE + RXE_REPORT + AFTER, ["rxe-completer-loss"])
    assert kept == BEFORE + AFTER
    assert excused == [("rxe-completer-loss", RXE_REPORT[1])]
    assert reports(BEFORE + RXE_REPORT + AFTER, ["rxe-completer-loss"]) == []


def test_without_the_name_or_beside_another_report_it_still_fails():
    assert "Call Trace:" in "".join(reports(BEFORE + RXE_REPORT + AFTER))
    kept = reports(RXE_REPORT + KDAT_REPORT, ["rxe-completer-loss"])
    assert KDAT_REPORT[1] in kept and RXE_REPORT[1] not in kept


def test_an_unknown_name_is_an_error():
    with pytest.raises(KeyError, match="no-such-defect"):
        known_defects.excuse(RXE_REPORT, ["no-such-defect"])


@pytest.mark.parametrize("allow,lines,rc", [
    ("", RXE_REPORT, 1),
    ("rxe-completer-loss", RXE_REPORT, 0),
    ("rxe-completer-loss", RXE_REPORT + KDAT_REPORT, 1),
    ("rxe-completer-loss", BEFORE + AFTER, 0),
])
def test_check_kernel_log_takes_the_names_from_the_environment(tmp_path, allow, lines, rc):
    log = tmp_path / "dmesg.txt"
    log.write_text("\n".join(BEFORE + lines + AFTER) + "\n")
    env = dict(os.environ, KDAT_KERNEL_LOG_ALLOW=allow)
    r = subprocess.run([CHECK, str(log)], capture_output=True, text=True, env=env)
    assert r.returncode == rc, r.stderr
    if allow and RXE_REPORT[0] in lines:
        assert "excused (rxe-completer-loss" in r.stderr
    if rc:
        assert f"kernel report(s) in {log}" in r.stderr


# rxe-user-mr-page-info as a 6.12 guest's log shows it (the call trace shortened), and the same
# warning from another caller, which the entry must not excuse
PAGE_ALLOC_WARN = "[   27.60] WARNING: CPU: 0 PID: 200 at mm/page_alloc.c:4835 __alloc_pages_noprof+0x303/0x310"


def _page_alloc_report(frame):
    return ["[   27.50] ------------[ cut here ]------------", PAGE_ALLOC_WARN, "[   27.70] Call Trace:",
            f"[   27.71]  {frame}", "[   27.80] ---[ end trace 0000000000000000 ]---"]


def test_a_frame_bound_defect_is_excused_only_with_its_frame():
    rxe = _page_alloc_report("rxe_mr_init_user+0xf5/0x2d0 [rdma_rxe]")
    other = _page_alloc_report("kdat_ep_create+0x10/0x80 [kdat]")
    kept, excused = known_defects.excuse(BEFORE + rxe + other, ["rxe-user-mr-page-info"])
    assert [name for name, _ in excused] == ["rxe-user-mr-page-info"]
    assert kept == BEFORE + other
    assert reports(BEFORE + other, ["rxe-user-mr-page-info"])
