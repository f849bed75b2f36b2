"""Two hosts (scripts/vm-pair): the peer service that guest B runs, and guest A's handle on it.

B serves on its control link (never faulted) one JSON line per request and per answer:
  {"op": "sh", "cmd": "...", "timeout": s}        -> {"rc", "out", "err"} (a shell command)
  {"op": "spawn", "cmd": "..."}                   -> {"id"} (a background shell command)
  {"op": "wait", "id": n, "timeout": s}           -> {"rc", "out", "err"} (rc null: still running)
  {"op": "kill", "id": n}                         -> {} (SIGKILL to every process of its session,
                                                      answered once they have all exited)
  {"op": "agent", "env": {...}}                   -> the connection becomes an Agent (agent.py):
        a process of B with its own /dev/kdat file and an IA on env's KDAT_TEST_ADDR, serving
        Kdat method calls; it is killed when the connection closes.
  {"op": "finish"}                                -> {} and the service ends (B powers off).
A's Peer gives these as methods; Peer.power_off() powers B off hard, Peer.power_on() lets
vm-pair boot it again and waits for its service.
"""
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time

from . import REPO
from .agent import _AGENT, Agent, request_line

PORT = 7777
RESULTS = "/run/kdat-results"


# ---- guest B ---------------------------------------------------------------------------------

class _Handler(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            req = json.loads(line)
            op = req["op"]
            if op == "agent":
                self._agent(req.get("env", {}))
                return
            if op == "finish":
                self._reply({})
                threading.Thread(target=self.server.shutdown, daemon=True).start()
                return
            try:
                self._reply(getattr(self.server, "op_" + op)(req))
            except Exception as e:   # reported to A, whose test fails with it
                self._reply({"exc": repr(e)})

    def _reply(self, obj):
        self.wfile.write((json.dumps(obj) + "\n").encode())
        self.wfile.flush()

    def _agent(self, env):
        p = subprocess.Popen([sys.executable, "-c", _AGENT], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, bufsize=1,
                             env={**os.environ, **env})
        try:
            def answers():
                for out in p.stdout:
                    self.wfile.write(out.encode())
                    self.wfile.flush()
            t = threading.Thread(target=answers, daemon=True)
            t.start()
            for line in self.rfile:
                p.stdin.write(line.decode())
                p.stdin.flush()
        except (BrokenPipeError, ConnectionError):
            pass
        finally:
            if p.poll() is None:
                p.kill()
            p.wait()


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, addr):
        super().__init__(addr, _Handler)
        self.jobs = {}
        self.next_id = 1
        self.lock = threading.Lock()

    def op_sh(self, req):
        r = subprocess.run(["bash", "-c", req["cmd"]], capture_output=True, text=True,
                           timeout=req.get("timeout", 120), cwd=REPO)
        return {"rc": r.returncode, "out": r.stdout, "err": r.stderr}

    def op_spawn(self, req):
        p = subprocess.Popen(["bash", "-c", req["cmd"]], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=REPO, start_new_session=True)
        with self.lock:
            job = self.next_id
            self.next_id += 1
            self.jobs[job] = p
        return {"id": job}

    def op_wait(self, req):
        p = self.jobs[req["id"]]
        try:
            out, err = p.communicate(timeout=req.get("timeout", 60))
        except subprocess.TimeoutExpired:
            return {"rc": None, "out": "", "err": ""}
        return {"rc": p.returncode, "out": out, "err": err}

    def op_kill(self, req):
        p = self.jobs[req["id"]]
        kill_session(p.pid)
        p.wait()
        return {}


def _session_of(pid):
    """pid's session, or None once it has exited (a zombie has released its files)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in "ZX" else int(fields[3])


def kill_session(sid, timeout=30):
    """SIGKILL to every process of session sid, until none is left.  Not killpg: coreutils
    `timeout` puts itself and its command in a process group of their own, which killpg of the
    shell's group misses -- a killed dtest server kept listening (and its port in use) until its
    own timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit() and _session_of(int(d)) == sid]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    raise TimeoutError(f"session {sid} still has processes {timeout} s after SIGKILL")


def serve(host):
    with _Server((host, PORT)) as server:
        server.serve_forever()


# ---- guest A ---------------------------------------------------------------------------------

class PeerError(AssertionError):
    pass


def _connect(host, timeout):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.create_connection((host, PORT), timeout=5)
        except OSError:
            if time.monotonic() > deadline:
                raise PeerError(f"the peer's service at {host}:{PORT} does not answer")
            time.sleep(0.5)


class _Line:
    """One connection to the service, one JSON line each way."""

    def __init__(self, host, timeout=120):
        self.sock = _connect(host, timeout)
        self.sock.settimeout(None)
        self.f = self.sock.makefile("rw", encoding="utf-8", newline="\n")

    def ask(self, obj, timeout=None):
        return self.ask_line(json.dumps(obj) + "\n", timeout, obj)

    def ask_line(self, line, timeout=None, what=None):
        self.sock.settimeout(timeout)
        self.f.write(line)
        self.f.flush()
        answer = self.f.readline()
        if not answer:
            raise PeerError(f"the peer closed the connection during {what or line.strip()}")
        return json.loads(answer)

    def close(self):
        try:
            self.f.close()
            self.sock.close()
        except OSError:
            pass


class RemoteAgent(Agent):
    """agent.Agent on the peer: the same calls (agent.m("ep_query", ep)) over the control link."""

    def __init__(self, host, ia_addr):  # its own transport: Agent.__init__ starts a process
        self.line = _Line(host)
        self.line.f.write(json.dumps({"op": "agent", "env": {"KDAT_TEST_ADDR": ia_addr}}) + "\n")
        self.line.f.flush()
        hello = json.loads(self.line.f.readline())
        self.ia, self.evd, self.crevd, self.pid = (hello["ok"][x] for x in ("ia", "evd", "crevd", "pid"))

    def raw(self, m, *a, timeout=60, **kw):
        return self.line.ask_line(request_line(m, a, kw), timeout)

    def kill(self):
        """The connection closes: the service kills the process (as kill -9 would)."""
        self.line.close()


def _says(path, word):
    try:
        with open(path) as f:
            return f.read().strip() == word
    except FileNotFoundError:
        return False


class Peer:
    """Guest B, seen from guest A."""

    def __init__(self, host=None):
        self.host = host or os.environ["KDAT_WIRE_CTL_PEER"]
        self.powered = True
        self.line = _Line(self.host)

    def _ask(self, obj, timeout=None):
        r = self.line.ask(obj, timeout)
        if "exc" in r:
            raise PeerError(f"peer {obj['op']}: {r['exc']}")
        return r

    def sh(self, cmd, timeout=120, check=True):
        r = self._ask({"op": "sh", "cmd": cmd, "timeout": timeout}, timeout + 30)
        if check and r["rc"] != 0:
            raise PeerError(f"peer: `{cmd}` exited {r['rc']}: {r['err'][-2000:]}")
        return r

    def spawn(self, cmd):
        return self._ask({"op": "spawn", "cmd": cmd})["id"]

    def wait(self, job, timeout=60):
        return self._ask({"op": "wait", "id": job, "timeout": timeout}, timeout + 30)

    def kill(self, job):
        self._ask({"op": "kill", "id": job})

    def agent(self, ia_addr):
        """A process on the peer with an IA on `ia_addr` (one of the peer's addresses)."""
        return RemoteAgent(self.host, ia_addr)

    def finish(self):
        try:
            self.line.ask({"op": "finish"}, timeout=30)
        except (OSError, PeerError):
            pass
        self.line.close()

    def _sysrq(self, key):
        """The peer's kernel does `key` at once (b: reset); no answer comes."""
        try:
            self.line.f.write(json.dumps({"op": "sh", "cmd": f"echo {key} > /proc/sysrq-trigger"})
                              + "\n")
            self.line.f.flush()
        except OSError:
            pass
        self.line.close()

    def power_off(self, timeout=120):
        """B's plug is pulled: vm-pair stops its QEMU, so B's kernel runs nothing more (no DREQ,
        no REJ, no FIN, no shutdown); returns once B is gone.  vm-pair does not boot it again
        until power_on()."""
        state = os.path.join(RESULTS, "b-state")
        with open(os.path.join(RESULTS, "b-power"), "w") as f:
            f.write("off\n")
        self.powered = False
        self.line.close()
        deadline = time.monotonic() + timeout
        while not _says(state, "off"):
            if time.monotonic() > deadline:
                raise PeerError(f"vm-pair did not stop guest B within {timeout} s")
            time.sleep(0.1)

    def power_on(self, timeout=300):
        """vm-pair boots B again; returns once its service answers (its setup is done)."""
        with open(os.path.join(RESULTS, "b-power"), "w") as f:
            f.write("on\n")
        self._reach(timeout)
        self.powered = True

    def _reach(self, timeout):
        """A new connection to the service that has answered a request: a connection made while
        B was still booting may fail its first send (EHOSTUNREACH seen), so try until one works."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.line = _Line(self.host, max(1, deadline - time.monotonic()))
                self._ask({"op": "sh", "cmd": "true", "timeout": 30}, 60)
                return
            except OSError:
                self.line.close()
                if time.monotonic() > deadline:
                    raise PeerError(f"the peer's service at {self.host} does not answer")
                time.sleep(1)

    def reboot(self, timeout=300):
        """B resets at once (sysrq b) and boots again."""
        self._sysrq("b")
        time.sleep(2)
        self._reach(timeout)


def print_matrix(path):
    """The fault matrix tests/wire/ recorded (one JSON object per line), as a table."""
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            print(f"{r['wire']:6} {r['fault']:28} {r['state']:48} {r['event']:42} "
                  f"{r['seconds']:7.2f} s")
