"""Why a DAT call over libdaplkdat failed, as a person running a DAPL program sees it: Debian's
unmodified dtest against a dat.conf entry whose IA the kernel cannot find.  With DAPL_KDAT_DEBUG
set the provider says on stderr which call failed and why, in words (the DAT type, the IA name);
without it, it says nothing for a failure a program can handle itself (docs/userspace.md)."""
import os
import subprocess
import tempfile

from kdat_harness.dapl import conf_entries

NO_SUCH_NETDEV = "kdatnosuch0"


def _dtest_on_missing_netdev(debug):
    library = conf_entries()["kdat"][0]
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as conf:
        conf.write(f'kdat-nonet u2.0 nonthreadsafe default {library} dapl.2.0 '
                   f'"{NO_SUCH_NETDEV}" ""\n')
        conf.flush()
        env = dict(os.environ, DAT_OVERRIDE=conf.name)
        env.pop("DAPL_KDAT_DEBUG", None)
        if debug:
            env["DAPL_KDAT_DEBUG"] = "1"
        return subprocess.run(["dtest", "-s", "-P", "kdat-nonet"], env=env, capture_output=True,
                              text=True, timeout=60)


def test_dtest_with_dapl_kdat_debug_prints_why_ia_open_failed(kdat_module, rdma):
    r = _dtest_on_missing_netdev(debug=True)
    said = [line for line in r.stderr.splitlines() if line.startswith("libdaplkdat: ")]
    assert said, f"no reason on stderr:\n{r.stdout}\n{r.stderr}"
    reason = said[0]
    assert "ia_open" in reason and NO_SUCH_NETDEV in reason, reason
    assert "DAT_PROVIDER_NOT_FOUND" in reason, reason
    # dtest saw the failure too: it did not go on as if the IA were open
    assert "CONNECTED" not in r.stdout, r.stdout


def test_dtest_without_the_variable_prints_nothing_of_the_provider(kdat_module, rdma):
    r = _dtest_on_missing_netdev(debug=False)
    assert "libdaplkdat:" not in r.stderr + r.stdout, r.stderr
    # ...though the call failed the same way (dtest says so itself)
    assert r.returncode != 0 or "DAT_PROVIDER_NOT_FOUND" in r.stdout + r.stderr, (r.stdout,
                                                                                   r.stderr)
