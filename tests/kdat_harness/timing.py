"""Judging durations on a machine that may be busy.

A timeout must never end early, whatever the load: that is checked exactly. How late it may end
depends on the load (a guest on a shared 2-core host can lose its CPU for a second), so lateness
is judged against a control measured beside it in the same run: plain timed sleeps of the same
length in this process. A kernel timer or delayed work cannot be more on time than a thread's
sleep under the same load, except for the thread's own wake-up work, which FLOOR_S covers.

    ctl = SleepControl(1.0, count=4)     # four sleeps of 1 s, started now, in threads
    ...                                  # the operation under test, timed by its own clock
    assert_on_time(took, 1.0, ctl.lateness())
"""
import threading
import time

# Lateness that is not load: Python's call overhead around an ioctl, a jiffy or two of timer
# rounding (HZ 250: 4 ms each), the work item's own run; idle in the guest, well under this.
FLOOR_S = 0.05
# How many times the control's lateness the measured operation may be late: the operation does
# more than one wake-up (a timer, then a work item, then the waiter's wake).
LOAD_FACTOR = 3


def boottime():
    """Seconds on CLOCK_BOOTTIME, the clock of the shared table's timestamps."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class SleepControl:
    """`count` timed sleeps of `seconds` each in threads, started now, or at go() if start=False;
    lateness() waits for them and returns how late the latest one woke (seconds, >= 0).

    With start=False the threads are created (and parked) in the constructor, so that go() costs
    an event, not thread creation: on a loaded debug guest creating threads takes long enough
    that judge_on_time would count it as the measured operation's lateness."""

    def __init__(self, seconds, count=1, start=True):
        self.seconds = seconds
        self.took = []
        self._lock = threading.Lock()
        self._go = threading.Event()
        self._ready = threading.Semaphore(0)
        self._threads = [threading.Thread(target=self._sleep, daemon=True) for _ in range(count)]
        for t in self._threads:
            t.start()
        for _ in self._threads:
            self._ready.acquire()
        if start:
            self.go()

    def go(self):
        self._go.set()

    def _sleep(self):
        self._ready.release()
        self._go.wait()
        t0 = boottime()
        time.sleep(self.seconds)
        took = boottime() - t0
        with self._lock:
            self.took.append(took)

    def lateness(self):
        for t in self._threads:
            t.join()
        return max(0.0, max(self.took) - self.seconds)


def allowed_lateness(control_lateness):
    return FLOOR_S + LOAD_FACTOR * control_lateness


def assert_on_time(took, asked, control_lateness, what="the timeout"):
    """took >= asked (never early), and no later than the control allows."""
    assert took >= asked, f"{what} ended early: after {took:.4f} s of {asked} s"
    allowed = allowed_lateness(control_lateness)
    assert took - asked <= allowed, (
        f"{what} came {took - asked:.3f} s late (after {took:.3f} s of {asked} s); a plain sleep "
        f"beside it was {control_lateness:.3f} s late, so at most {allowed:.3f} s is allowed")


def assert_prompt(took, waited, what="the call"):
    """A call that must not wait: it took less than half of the wait it was given (the wait is
    chosen long enough, seconds, that no load stretches a prompt return that far)."""
    assert took < waited / 2, f"{what} took {took:.3f} s: it waited (for up to {waited} s)"


def judge_on_time(attempt, asked, attempts=3, what="the timeout", controls=4):
    """Runs attempt(start) up to `attempts` times; attempt calls start() at the moment its
    operation begins (that starts `controls` plain sleeps of `asked` beside it) and returns how long
    the operation took (a number, or a list of them for several timers started together).

    Never early is checked on every attempt: one early end fails at once. Lateness is judged per
    attempt against that attempt's control, and one attempt within the allowance passes: a single
    wake-up on a loaded guest can lose its vCPU for longer than the sleeps beside it did, but a
    timer that is late by design is late every time."""
    report = []
    for _ in range(attempts):
        control = SleepControl(asked, count=controls, start=False)   # threads made before timing
        box = {}

        def start():
            box["started"] = True
            control.go()

        try:
            took = attempt(start)
        finally:
            control.go()   # never leave its threads parked, whatever the attempt did
        took = list(took) if isinstance(took, (list, tuple)) else [took]
        assert "started" in box, "attempt() never called start()"
        late = control.lateness()
        for t in took:
            assert t >= asked, f"{what} ended early: after {t:.4f} s of {asked} s"
        worst = max(took) - asked
        if worst <= allowed_lateness(late):
            return
        report.append(f"{worst:.3f} s late, control {late:.3f} s late "
                      f"(allowed {allowed_lateness(late):.3f} s)")
    raise AssertionError(f"{what} came late in all {attempts} attempts: " + "; ".join(report))
