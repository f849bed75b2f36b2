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
