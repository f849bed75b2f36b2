"""The man pages match the code they describe.

- Every parameter of kdat.ko (`modinfo -F parm`) has its entry in kdat(7)'s MODULE PARAMETERS, and
  so has every parameter of any other module of the tree that has a page of its own.
- Every command and option kdatctl's help names (`kdatctl --help`, `kdatctl COMMAND --help`; read
  from the program, not listed here, so a new option cannot go undocumented) is in kdatctl(8).
- Every program message a page quotes (\\(lq...\\(rq or \\(dq...\\(dq) is one the source can print.

Each checker is also run on a page made wrong on purpose, so a check that can no longer fail is
noticed."""
import glob
import os
import re
import subprocess

import pytest

from kdat_harness import KDATCTL, REPO

MAN = os.path.join(REPO, "user", "man")
KMOD = os.path.join(REPO, "kmod")
# Where the messages a page may quote are printed from.
SOURCES = ["kmod/**/*.c", "kmod/**/*.h", "user/**/*.cpp", "user/**/*.hpp", "user/**/*.c",
           "user/**/*.h", "user/**/*.sh"]


def _read(path):
    with open(path) as f:
        return f.read()


# ---- roff --------------------------------------------------------------------------------------

def plain(roff):
    """Page source as text: escapes for dashes, quotes and fonts resolved, comments dropped."""
    text = re.sub(r'^\.\\".*$', "", roff, flags=re.M)
    for escape, char in ((r"\-", "-"), (r"\(lq", "\u201c"), (r"\(rq", "\u201d"),
                         (r"\(dq", '"'), (r"\(aq", "'"), (r"\(mc", "\u00b5"), (r"\e", "\\"),
                         (r"\ ", " "), (r"\&", "")):
        text = text.replace(escape, char)
    return re.sub(r"\\f(?:[BIRP]|\[[A-Z]*\])", "", text)


def sections(roff):
    """{section name: its source lines} of a page."""
    found, name = {}, None
    for line in roff.splitlines():
        m = re.match(r'\.SH\s+"?([^"]*)"?\s*$', line)
        if m:
            name = m.group(1).strip()
            found[name] = []
        elif name is not None:
            found[name].append(line)
    return found


def _macro_words(line):
    """The words of a font macro line (.B, .BR, .BI, ...), quotes taken off."""
    return [w.strip('"') for w in re.findall(r'"[^"]*"|\S+', plain(line))[1:]]


def tags(lines):
    """The first word of each .TP entry's tag line."""
    found = []
    for i, line in enumerate(lines[:-1]):
        if line.startswith(".TP"):
            words = _macro_words(lines[i + 1]) if lines[i + 1].startswith(".") else \
                plain(lines[i + 1]).split()
            if words:
                found.append(words[0])
    return found


# ---- module parameters -------------------------------------------------------------------------

def module_params(ko):
    out = subprocess.run(["modinfo", "-F", "parm", ko], capture_output=True, text=True,
                         check=True).stdout
    return sorted({line.split(":", 1)[0] for line in out.splitlines() if line.strip()})


def undocumented_params(roff, params):
    """The parameters that have no entry (a .TP tag) in the page's MODULE PARAMETERS."""
    documented = set(tags(sections(roff).get("MODULE PARAMETERS", [])))
    return [p for p in params if p not in documented]


def _modules():
    """{module name: its built .ko} for every module of the tree (kmod/, its samples and blk)."""
    kos = {}
    for ko in glob.glob(os.path.join(KMOD, "**", "*.ko"), recursive=True):
        kos.setdefault(os.path.basename(ko)[:-3], ko)
    if "kdat" not in kos:
        pytest.fail("kmod/kdat.ko is not built: run 'make all'")
    return kos


def _page_of(module):
    """A module's own man page in user/man (kdat: kdat.7), or None."""
    pages = glob.glob(os.path.join(MAN, f"{module}.[1-9]"))
    return pages[0] if pages else None


def test_every_module_parameter_is_in_the_modules_page():
    checked = []
    for module, ko in sorted(_modules().items()):
        page = _page_of(module)
        if page is None:
            continue
        params = module_params(ko)
        missing = undocumented_params(_read(page), params)
        assert not missing, f"{os.path.basename(page)} lacks {module}.ko's parameters {missing}"
        checked.append(module)
    assert "kdat" in checked


# ---- kdatctl -----------------------------------------------------------------------------------

def _help(*args):
    r = subprocess.run([KDATCTL, *args, "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout + r.stderr


def help_commands(text):
    """The commands a help text lists: the first word of each entry of its commands section
    ("commands:", "Subcommands:", ...), aliases given as "name, --name" included.  An entry is
    either indented under the heading with its description beside it, or (CLI11's layout) a name
    alone at the left margin with its description indented on the lines below."""
    commands, inside, cli11 = [], False, False
    for line in text.splitlines():
        if re.match(r"^\s*(?:sub)?commands\s*:", line, re.I):
            inside, cli11 = True, False
            continue
        if not inside:
            continue
        if not line.strip():
            # CLI11 separates its entries with blank lines; the other layout ends at one
            inside = cli11
            continue
        m = re.match(r"^([a-z][a-z0-9-]*)\s*$", line)
        if m:
            cli11 = True
            commands.append(m.group(1))
            continue
        if cli11:
            continue  # an entry's description or options, indented below its name
        if not line.startswith(" "):
            inside = False
            continue
        # an entry starts at the left margin's indent; its description continues far right
        m = re.match(r"^ {1,4}([a-z][a-z0-9-]*)\b", line)
        if m:
            commands.append(m.group(1))
    return commands


def help_options(text):
    """Every option a help text names: --long, and a short -x given beside a long one."""
    options = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text))
    options |= set(re.findall(r"(?<![\w-])(-[a-zA-Z])(?=,\s*--|\s*,--)", text))
    return options


def kdatctl_interface():
    """(commands, options) of the built kdatctl, from its help texts."""
    if not os.access(KDATCTL, os.X_OK):
        pytest.fail(f"{KDATCTL} is not built: run 'make all'")
    top = _help()
    commands = help_commands(top)
    options = help_options(top)
    for command in commands:
        if command != "help":
            options |= help_options(_help(command))
    return commands, options


def missing_from_kdatctl_page(roff, commands, options):
    """What of kdatctl's commands (in the SYNOPSIS or as an entry of their own) and options (as
    written anywhere on the page) the page does not have."""
    text = plain(roff)
    secs = sections(roff)
    synopsis = plain("\n".join(secs.get("SYNOPSIS", [])))
    entries = {t for lines in secs.values() for t in tags(lines)}
    missing = [c for c in commands
               if c not in entries and not re.search(rf"(?<![\w-]){re.escape(c)}(?![\w-])",
                                                     synopsis)]
    missing += sorted(o for o in options if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])",
                                                          text))
    return missing


def test_kdatctl_page_has_every_command_and_option():
    commands, options = kdatctl_interface()
    # the help lists its commands: an empty list would make this test vacuous
    assert {"list", "version"} <= set(commands), commands
    assert "--json" in options, options
    missing = missing_from_kdatctl_page(_read(os.path.join(MAN, "kdatctl.8")), commands, options)
    assert not missing, f"kdatctl(8) lacks {missing}"


# ---- quoted messages ---------------------------------------------------------------------------

def quoted_messages(roff):
    """What a page quotes that reads as a program's message: \\(lq..\\(rq or \\(dq..\\(dq with a
    letter and a space in it (a lone "*" or a word is a value, not a message)."""
    text = plain(roff)
    found = re.findall(r"\u201c([^\u201d]*)\u201d", text)
    found += re.findall(r'"([^"\n]*)"', "\n".join(
        line for line in text.splitlines() if not line.startswith(".")))
    # roff's own quoting of macro arguments is not a quotation: only escapes count on macro lines
    found += re.findall(r"\\\(dq(.*?)\\\(dq", roff)
    return sorted({q.strip() for q in found if re.search(r"[A-Za-z]", q) and " " in q.strip()})


def source_strings():
    """Every string literal of the sources, adjacent literals joined as the compiler joins them,
    escapes left as written (a page quotes messages, which have few)."""
    strings = []
    for pattern in SOURCES:
        for path in glob.glob(os.path.join(REPO, pattern), recursive=True):
            if "/build/" in path or path.endswith(".mod.c"):
                continue
            text = _read(path)
            joined, end = None, None
            for m in re.finditer(r'"((?:[^"\\\n]|\\.)*)"', text):
                if joined is not None and text[end:m.start()].strip() == "":
                    joined += m.group(1)
                else:
                    if joined is not None:
                        strings.append(joined)
                    joined = m.group(1)
                end = m.end()
            if joined is not None:
                strings.append(joined)
    return strings


def unprinted_quotes(roff, strings):
    """The page's quoted messages that no string of the sources holds."""
    return [q for q in quoted_messages(roff) if not any(q in s for s in strings)]


@pytest.mark.parametrize("page", sorted(os.path.basename(p) for p in glob.glob(
    os.path.join(MAN, "*.[1-9]"))))
def test_every_quoted_message_is_printed_by_the_code(page):
    missing = unprinted_quotes(_read(os.path.join(MAN, page)), source_strings())
    assert not missing, f"{page} quotes messages the code never prints: {missing}"


# ---- the checkers fail on a wrong page ---------------------------------------------------------

WRONG_PAGE = r""".TH WRONG 7 "" "kdat" "Test"
.SH SYNOPSIS
.B kdatctl list
.RB [ \-\-json ]
.SH MODULE PARAMETERS
.TP
.B orphan_timeout_s
Seconds.
.TP
.B listen_backlog
Requests; the prose may say ack_timeout without giving it an entry.
.SH EXIT STATUS
On an error it prints \(lqname a known IA\(rq and \(lqlibdaplkdat: no IA can be opened\(rq.
"""


def test_the_checkers_fail_on_a_wrong_page(tmp_path):
    page = tmp_path / "wrong.7"
    page.write_text(WRONG_PAGE)
    roff = _read(page)

    params = module_params(_modules()["kdat"])
    assert undocumented_params(roff, params) == [p for p in params if p not in
                                                 ("orphan_timeout_s", "listen_backlog")]
    assert "ack_timeout" in undocumented_params(roff, params)

    commands, options = kdatctl_interface()
    missing = missing_from_kdatctl_page(roff, commands, options)
    assert "list" not in missing and "--json" not in missing, missing
    assert "watch" in missing and "--interval" in missing, missing

    assert quoted_messages(roff) == ["libdaplkdat: no IA can be opened", "name a known IA"]
    assert unprinted_quotes(roff, source_strings()) == ["name a known IA"]


def test_help_parsers_read_the_other_layout():
    """kdatctl's option parsing may change library (CLI11's help has "SUBCOMMANDS:" and
    "-h,--help"): the parsers read that layout too."""
    text = ("kdatctl\nUsage: kdatctl [OPTIONS] SUBCOMMAND\n\nOPTIONS:\n"
            "  -h,--help                   Print this help message and exit\n"
            "  --device TEXT               the device node\n\n"
            "SUBCOMMANDS:\n  list                        the tables\n"
            "  watch                       changes\n\n")
    assert help_commands(text) == ["list", "watch"]
    assert help_options(text) == {"-h", "--help", "--device"}
