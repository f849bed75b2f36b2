"""The endpoint state table, parsed from include/kdat/ep_table.h (the one source of truth)."""
import os
import re
from dataclasses import dataclass

from . import INCLUDE

EP_TABLE_H = os.path.join(INCLUDE, "kdat", "ep_table.h")
DAT_H = os.path.join(INCLUDE, "kdat", "uapi", "kdat_dat.h")


def dat_constants(path=DAT_H):
    """Every KDAT_DAT_* constant of the generated DAT mirror, as {name without KDAT_: int}."""
    out = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"#define\s+KDAT_(DAT_\w+)\s+(0x[0-9a-fA-F]+|\d+)u?\s*$", line)
            if m:
                out[m.group(1)] = int(m.group(2), 0)
    return out


@dataclass(frozen=True)
class Rule:
    state: str
    stimulus: str
    action: str
    next: str
    event: str
    effects: str = "NONE"


class Table:
    """States, stimuli (with their kind) and rules, plus the lookup with defaults."""

    def __init__(self, path=EP_TABLE_H):
        with open(path) as f:
            text = f.read()
        body = _macro_body(text, "KDAT_EP_STATES")
        self.states = re.findall(r"X\((\w+)\)", body)
        body = _macro_body(text, "KDAT_EP_STIMULI")
        self.stimuli = dict(re.findall(r"X\((\w+),\s*(OP|EV)\)", body))
        body = _macro_body(text, "KDAT_EP_RULES")
        self.rules = [Rule(*m) for m in re.findall(
            r"R\((\w+),\s*(\w+),\s*(\w+),\s*(\w+),\s*(\w+),\s*(\w+)\)", body)]
        dat = dat_constants()
        self.state_value = {s: dat["DAT_EP_STATE_" + s] for s in self.states}
        self.state_name = {v: k for k, v in self.state_value.items()}
        self.event_value = {"NONE": 0}
        for r in self.rules:
            if r.event != "NONE":
                self.event_value[r.event] = dat["DAT_CONNECTION_EVENT_" + r.event]
        self.event_name = {v: k for k, v in self.event_value.items()}
        self._index = {(r.state, r.stimulus): r for r in self.rules}

    def lookup(self, state, stimulus):
        """(action, next, event) for a pair, with the per-kind default where no rule exists."""
        r = self._index.get((state, stimulus))
        if r is not None:
            return r.action, r.next, r.event
        default = "STALE" if self.stimuli[stimulus] == "EV" else "INVALID"
        return default, state, "NONE"

    def stimulus_index(self, name):
        return list(self.stimuli).index(name)


def _macro_body(text, name):
    """The replacement text of a multi-line #define NAME(...) with its line continuations."""
    m = re.search(r"#define\s+" + name + r"\(\w+\)((?:[^\n]*\\\n)*[^\n]*)", text)
    if not m:
        raise ValueError(f"{name} not found in the state table header")
    return m.group(1)
