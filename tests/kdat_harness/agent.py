"""Another process with its own /dev/kdat file, driven over a pipe: agent.m("ep_query", ep)
calls Kdat/Side methods there; agent.kill() is kill -9."""
import json
import os
import signal
import subprocess
import sys

from . import REPO

# A child process serving Kdat/Side method calls, one JSON line per request and per answer.
_AGENT = r"""
import json, sys, types, dataclasses
sys.path.insert(0, %r)
from kdat_harness import dat
k = dat.Kdat()
s = dat.side(k)

def enc(v):
    if isinstance(v, bytes):
        return {"hex": v.hex()}
    if dataclasses.is_dataclass(v):
        v = {f.name: getattr(v, f.name) for f in dataclasses.fields(v) if f.name != "raw"}
    if isinstance(v, types.SimpleNamespace):
        v = {a: b for a, b in vars(v).items() if a != "raw"}
    if isinstance(v, dict):
        return {a: enc(b) for a, b in v.items()}
    if isinstance(v, (list, tuple)):
        return [enc(b) for b in v]
    return v

def dec(v):
    if isinstance(v, dict) and set(v) == {"hex"}:
        return bytes.fromhex(v["hex"])
    return v

print(json.dumps({"ok": {"ia": s.ia, "evd": s.evd, "crevd": s.crevd, "pid": __import__("os").getpid()}}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    try:
        fn = getattr(k, req["m"]) if req["m"] != "ep" else s.ep
        res = fn(*[dec(a) for a in req.get("a", [])], **{a: dec(b) for a, b in req.get("kw", {}).items()})
        out = {"ok": enc(res)}
    except dat.DatError as e:
        out = {"err": e.type_name, "status": e.status}
    except Exception as e:
        out = {"exc": repr(e)}
    print(json.dumps(out), flush=True)
""" % os.path.join(REPO, "tests")


def request_line(m, a, kw):
    """One request to an agent (here or on a peer host): method m, bytes as {"hex": ...}."""
    a = [{"hex": x.hex()} if isinstance(x, bytes) else x for x in a]
    kw = {k: ({"hex": v.hex()} if isinstance(v, bytes) else v) for k, v in kw.items()}
    return json.dumps({"m": m, "a": a, "kw": kw}) + "\n"


class Agent:
    """The other process: agent.m("ep_query", ep) -> its answer (dict), raising on failure."""

    def __init__(self):
        self.p = subprocess.Popen([sys.executable, "-c", _AGENT], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, bufsize=1)
        hello = self._read()
        self.ia, self.evd, self.crevd, self.pid = (hello["ok"][x] for x in ("ia", "evd", "crevd", "pid"))

    def _read(self):
        line = self.p.stdout.readline()
        assert line, f"agent died (rc {self.p.poll()})"
        return json.loads(line)

    def raw(self, m, *a, **kw):
        self.p.stdin.write(request_line(m, a, kw))
        return self._read()

    def m(self, m, *a, **kw):
        r = self.raw(m, *a, **kw)
        assert "ok" in r, f"agent {m}{a}: {r}"
        return r["ok"]

    def kill(self):
        if self.p.poll() is None:
            os.kill(self.p.pid, signal.SIGKILL)
        self.p.wait(10)

    def close(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
