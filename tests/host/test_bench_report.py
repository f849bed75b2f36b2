"""bench/report's data-path section: the A/A control of dtest's ping-pong is reported beside
kdat's ratio, and its runs stay out of libdaplofa's own figures."""
import importlib.machinery
import importlib.util
import os

REPORT = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "report")


def load_report():
    loader = importlib.machinery.SourceFileLoader("bench_report", REPORT)
    spec = importlib.util.spec_from_loader("bench_report", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def run(name, rep, latency):
    return {"name": name, "rep": rep, "op": "SR", "mode": "p", "kind": "latency", "ok": True,
            "program": "dtest", "latency_us": latency}


def section(runs):
    d = {"addr": "192.0.2.1", "iters": 2000, "reps": 3, "pipeline": 16, "runs": runs,
         "providers": {"kdat": "kdat", "libdaplofa": "ofa-v2-kdat0"}}
    return "\n".join(load_report().dapltest_perf_section(d))


def test_the_control_is_reported_with_its_range_and_kept_out_of_libdaplofas_figures():
    runs = []
    for rep, (k, o, c) in enumerate([(100, 50, 40), (60, 60, 90), (30, 60, 30)]):
        runs += [run("kdat", rep, k), run("libdaplofa", rep, o), run("libdaplofa-control", rep, c)]
    text = section(runs)
    # kdat / libdaplofa per pair: 2.0, 1.0, 0.5; control / libdaplofa: 0.8, 1.5, 0.5
    assert "| send/recv | polling | latency | 1.00 | 0.50 .. 2.00 | 0.80 | 0.50 .. 1.50 | 3 |" in text
    # libdaplofa's median is of its own runs (50, 60, 60), not of the control's
    assert "| 60.0 us | 50.0 .. 60.0 |" in text


def test_no_control_no_control_table():
    runs = [run("kdat", 0, 10), run("libdaplofa", 0, 20)]
    assert "A/A control" not in section(runs)


def conn_run(kind, rep, teardown_ms, n=100, **extra):
    return {"kind": kind, "rep": rep, "n": n, "connected": n, "establish_ns": 50e6,
            "teardown_ns": teardown_ms * 1e6, "teardown_free_ns": 1e6, **extra}


def test_conn_teardown_is_also_reported_as_ratios_of_back_to_back_pairs():
    runs = []
    # raw / kdat per repetition: 0.5, 1.0, 2.0; raw / abrupt: 1.0, 1.0, 1.0
    for rep, (g, a, r) in enumerate([(200, 100, 100), (80, 80, 80), (25, 50, 50)]):
        runs += [conn_run("kdat", rep, g), conn_run("kdat_abrupt", rep, a),
                 conn_run("rdmacm", rep, r)]
    runs.append(conn_run("kdat", 3, 10, errors=1))     # a failed run is in no pair
    runs.append(conn_run("rdmacm", 3, 10))
    text = "\n".join(load_report().conn_section(
        {"addr": "192.0.2.1", "reps": 3, "runs": runs, "skipped": []}))
    assert "(median of pairs 1.00x, 1.00 .. 1.00; goal: at least 0.9x)" in text
    # of medians: raw 65 (100, 80, 50, 10) over kdat 80 (200, 80, 25; the failed run left out)
    assert "graceful: **0.81x** (median of pairs 1.00x, 0.50 .. 2.00)" in text


def test_a_blocking_latency_is_the_first_phases_time_per_operation():
    """dapltest's latency phase polls whatever -m says: a blocking case reports 1 / ops/s."""
    runs = []
    for rep, (k_ops, o_ops) in enumerate([(10000, 5000), (5000, 5000), (2500, 5000)]):
        for name, ops in (("kdat", k_ops), ("libdaplofa", o_ops)):
            for mode in ("b", "p"):
                runs.append({"name": name, "rep": rep, "op": "RW", "mode": mode,
                             "kind": "latency", "ok": True, "program": "dapltest",
                             "ops_per_s": ops, "latency_us": 70.0})
    text = section(runs)
    # blocking: 100, 200, 400 us over kdat against 200 us; paired 0.5, 1.0, 2.0
    assert "| RDMA write | blocking | latency | 200.0 us | 100.0 .. 400.0 | 200.0 us |" in text
    assert "RDMA write, blocking, latency: kdat takes **1.00x**" in text
    # polling keeps dapltest's own latency figure
    assert "| RDMA write | polling | latency | 70.0 us | 70.0 .. 70.0 | 70.0 us |" in text


def test_every_case_pools_into_one_time_ratio_with_its_interval():
    """Latency and throughput pool as time per operation: kdat at half libdaplofa's latency and
    twice its ops/s is 0.5x in both, and pairs that all agree leave no interval around it."""
    runs = []
    for rep in range(4):
        runs += [run("kdat", rep, 50.0), run("libdaplofa", rep, 100.0),
                 run("libdaplofa-control", rep, 100.0)]
        for name, ops in (("kdat", 4000.0), ("libdaplofa", 2000.0), ("libdaplofa-control", 2000.0)):
            runs.append({"name": name, "rep": rep, "op": "RW", "mode": "p", "kind": "throughput",
                         "ok": True, "program": "dapltest", "ops_per_s": ops})
    text = section(runs)
    assert ("kdat takes **0.500x** libdaplofa's (geometric mean of 8 pairs, 95% bootstrap "
            "interval 0.500 .. 0.500; goal: at most 1); libdaplofa against itself 1.000x "
            "(1.000 .. 1.000, 8 pairs)") in text


def test_conn_cpu_is_summed_over_the_runs_per_connection_and_given_as_raw_over_kdat():
    runs = []
    # teardown CPU (s) per run at N=100: kdat 0.02 + 0.04, abrupt 0.03 + 0.03, raw 0.03 + 0.03
    for rep, (g, a, r) in enumerate([(0.02, 0.03, 0.03), (0.04, 0.03, 0.03)]):
        runs += [conn_run("kdat", rep, 50, cpu_establish_s=0.05, cpu_teardown_s=g),
                 conn_run("kdat_abrupt", rep, 50, cpu_establish_s=0.05, cpu_teardown_s=a),
                 conn_run("rdmacm", rep, 50, cpu_establish_s=0.1, cpu_teardown_s=r)]
    runs.append(conn_run("kdat", 2, 50, errors=1, cpu_establish_s=9.0, cpu_teardown_s=9.0))
    text = "\n".join(load_report().conn_section(
        {"addr": "192.0.2.1", "reps": 2, "runs": runs, "skipped": []}))
    # kdat: (0.02 + 0.04) s / 200 connections = 300 us; the failed run is left out
    assert ("- N=100, busy CPU per connection (all vCPUs, summed over the runs): "
            "setup: kdat 500 us, abrupt 500 us, raw 1000 us (raw / kdat **2.00x**, raw / abrupt **2.00x**); "
            "teardown: kdat 300 us, abrupt 300 us, raw 300 us (raw / kdat **1.00x**, raw / abrupt **1.00x**).") in text


def test_runs_without_cpu_figures_give_no_cpu_line():
    runs = [conn_run("kdat", 0, 50), conn_run("rdmacm", 0, 50)]
    text = "\n".join(load_report().conn_section(
        {"addr": "192.0.2.1", "reps": 1, "runs": runs, "skipped": []}))
    assert "busy CPU" not in text


def dtestcm_run(name, rep, conn_ms, n=1000):
    return {"name": name, "rep": rep, "n": n, "pinned": False, "ok": True, "wall_s": 3.0,
            "client": {"conn_us": conn_ms * 1000 / n}, "server": {}}


def test_dtestcm_is_set_against_raw_in_kernel_rdma_cm_of_the_same_run():
    """The in-kernel rate is what a provider with no user-space cost would reach: the section
    says where kdat's and libdaplofa's rates lie against it, and what 2.5x libdaplofa would take."""
    d = {"addr": "192.0.2.1", "reps": 2, "reps_by_n": {"1000": 2},
         "runs": [dtestcm_run("kdat", 0, 1000), dtestcm_run("libdaplofa", 0, 2000),
                  dtestcm_run("kdat", 1, 1000), dtestcm_run("libdaplofa", 1, 3000)]}
    conn = {"runs": [conn_run("rdmacm", 0, 50, n=1000, establish_ns=800e6)]}
    text = "\n".join(load_report().dtestcm_section(d, conn))
    assert "kdat connects at **2.50x** libdaplofa's" in text
    # raw 800 ms: kdat 0.80x it, libdaplofa (median 2500 ms) 0.32x, 2.5x libdaplofa 0.80x it
    assert ("against raw in-kernel rdma_cm's setup rate in this run (800.0 ms for N connections, "
            "bench/conn: kernel QPs, at most 32 connects in flight), what a provider with no "
            "user-space cost would reach: kdat's provider connects at **0.80x** it, libdaplofa at "
            "0.32x; 2.5x libdaplofa is 0.80x it.") in text
    # without bench/conn's results in the run the line is left out
    assert "in-kernel" not in "\n".join(load_report().dtestcm_section(d))


def test_conn_repetitions_are_reported_per_n():
    c = {"reps": 3, "reps_by_n": {"100": 30, "1000": 9, "5000": 3}}
    assert (load_report().reps_text(c, [100, 1000, 5000])
            == "repetitions: 30 at N=100, 9 at N=1000, 3 at N=5000")
    # results written before the tiers: one factor up to small_n
    old = {"reps": 3, "small_n": 1000, "small_reps": 9}
    assert load_report().reps_text(old, [100, 5000]) == "repetitions: 9 at N=100, 3 at N=5000"


def test_dtestcm_idle_column_is_the_median_idle_share_of_the_connect_phase():
    """Each row's idle cell is the median over its good runs of idle / (busy + idle) ticks; a row
    whose runs carry no ticks (older results) shows '-' rather than a made-up share."""
    runs = [dtestcm_run("kdat", rep, 1000) for rep in range(3)]
    for r, (busy, idle) in zip(runs, [(150, 50), (160, 40), (100, 100)]):
        r["connect_ticks"] = {"busy": busy, "idle": idle}
    runs += [dtestcm_run("libdaplofa", 0, 2000)]
    text = "\n".join(load_report().dtestcm_section({"addr": "192.0.2.1", "reps": 3, "runs": runs}))
    assert "| 1000 | kdat | free | " in text
    kdat_row = next(line for line in text.splitlines() if line.startswith("| 1000 | kdat |"))
    ofa_row = next(line for line in text.splitlines() if line.startswith("| 1000 | libdaplofa |"))
    # shares 25%, 20%, 50%: median 25%
    assert kdat_row.split(" | ")[6] == "25%"
    assert ofa_row.split(" | ")[6] == "-"
    header = next(line for line in text.splitlines() if line.startswith("| N |"))
    assert header.split(" | ")[6] == "idle"
