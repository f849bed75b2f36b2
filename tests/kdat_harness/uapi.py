"""ctypes mirrors of include/kdat/uapi/kdat.h, built by parsing the header (never retyped).

The command list (include/kdat/uapi/kdat_commands.h, KDAT_COMMANDS) is read too: commands maps each
command's short name (ia_open) to its Command: struct, first size, handle fields and zero fields.

The header keeps to a subset this parser understands: #define NAME <int or known name>, structs
of __u8/__u16/__u32/__u64/__s32/__s64/char fields, fixed arrays and nested kdat structs, and ioctl
numbers made with _IO/_IOR/_IOW/_IOWR.  tests/host checks every struct's size and offsets against
the C compiler's.

Defines the simple rules above do not cover (arithmetic with * and /, sizeof(struct x), macros with
parameters such as KDAT_RING_MAP_SIZE(entries)) are evaluated afterwards by a small evaluator of C
integer expressions (no eval of arbitrary code): consts gets the object-like ones, macros the
function-like ones, and macro(name, *args) evaluates one of those.
"""
import ast
import ctypes
import operator
import os
import re

from . import INCLUDE

UAPI_H = os.path.join(INCLUDE, "kdat", "uapi", "kdat.h")
COMMANDS_H = os.path.join(INCLUDE, "kdat", "uapi", "kdat_commands.h")
COUNTERS_H = os.path.join(INCLUDE, "kdat", "uapi", "kdat_counters.h")


class Handle:
    """A handle field the kernel resolves before a command runs."""

    def __init__(self, field, type, use, subtype):
        self.field, self.type, self.optional, self.subtype = field, type.lower(), use == "OPTIONAL", subtype

    def __repr__(self):
        return f"Handle({self.field}, {self.type}, {'optional' if self.optional else 'required'})"


class Command:
    """One entry of KDAT_COMMANDS: ioctl name, struct, the field that ended its first version,
    handles (in the order the kernel resolves them) and reserved fields that must be zero."""

    def __init__(self, name, short, first):
        self.name, self.short, self.first = "KDAT_IOC_" + name, short, first
        self.struct = "kdat_" + short
        self.handles = []
        self.zeros = []

    def __repr__(self):
        return f"Command({self.short}, handles={self.handles}, zeros={self.zeros})"

_SCALARS = {
    "__u8": ctypes.c_uint8, "__u16": ctypes.c_uint16, "__u32": ctypes.c_uint32,
    "__u64": ctypes.c_uint64, "__aligned_u64": ctypes.c_uint64, "__s8": ctypes.c_int8,
    "__s16": ctypes.c_int16, "__s32": ctypes.c_int32, "__s64": ctypes.c_int64,
    "char": ctypes.c_char,
}
_IOC_DIR = {"_IO": 0, "_IOW": 1, "_IOR": 2, "_IOWR": 3}


def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


class Uapi:
    """Attributes: consts (name -> int), structs (name -> ctypes.Structure), ioctls (name -> int)."""

    def __init__(self, path=UAPI_H, extra_headers=()):
        self.consts = {}
        self.structs = {}
        self.ioctls = {}
        counters = _strip_comments(open(COUNTERS_H).read())
        self._parse_defines(counters)
        self.counters = self._parse_counters(counters)
        for h in extra_headers:
            self._parse_defines(_strip_comments(open(h).read()))
        text = _strip_comments(open(path).read())
        self._parse_defines(text)
        for m in re.finditer(r"struct\s+(\w+)\s*\{(.*?)\}\s*;", text, flags=re.S):
            self.structs[m.group(1)] = self._make_struct(m.group(1), m.group(2))
        self.macros = {}
        self._parse_expressions(text)
        self.commands = self._parse_commands(_strip_comments(open(COMMANDS_H).read()))
        for m in re.finditer(r"#define\s+(\w+)\s+(_IO\w*)\(\s*(\w+)\s*,\s*(\w+)\s*(?:,\s*struct\s+(\w+))?\s*\)",
                             text):
            name, macro, typ, nr, sname = m.groups()
            size = ctypes.sizeof(self.structs[sname]) if sname else 0
            self.ioctls[name] = ((_IOC_DIR[macro] << 30) | (size << 16) |
                                 (self.value(typ) << 8) | self.value(nr))

    @staticmethod
    def _parse_counters(text):
        """KDAT_IA_COUNTERS(X): the counters' short names (connects, ...), in value[] order."""
        body = re.sub(r"\\\n", " ", text)
        m = re.search(r"#define\s+KDAT_IA_COUNTERS\(\s*X\s*\)(.*)", body)
        if not m:
            raise ValueError("kdat_counters.h: no KDAT_IA_COUNTERS(X) list")
        return [short for _, short in re.findall(r"\bX\(\s*(\w+)\s*,\s*(\w+)\s*\)", m.group(1))]

    def _parse_commands(self, text):
        body = re.sub(r"\\\n", " ", text)
        m = re.search(r"#define\s+KDAT_COMMANDS\(\s*CMD\s*,\s*HANDLE\s*,\s*ZERO\s*\)(.*)", body)
        if not m:
            raise ValueError("kdat_commands.h: no KDAT_COMMANDS(CMD, HANDLE, ZERO) list")
        commands = {}
        for kind, args in re.findall(r"\b(CMD|HANDLE|ZERO)\(([^()]*)\)", m.group(1)):
            a = [x.strip() for x in args.split(",")]
            if kind == "CMD":
                commands[a[1]] = Command(*a)
            elif kind == "HANDLE":
                commands[a[0]].handles.append(Handle(*a[1:]))
            else:
                commands[a[0]].zeros.append(a[1])
        return commands

    def offsetofend(self, struct_name, dotted):
        """offsetof + sizeof of a (possibly nested, a.b) field of a parsed struct."""
        cls, off = self.structs[struct_name], 0
        for part in dotted.split("."):
            f = getattr(cls, part)
            off += f.offset
            cls = dict(cls._fields_)[part]
        return off + ctypes.sizeof(cls)

    def value(self, token):
        token = token.strip()
        if token in self.consts:
            return self.consts[token]
        return int(token.rstrip("uUlL"), 0)

    def _parse_defines(self, text):
        for m in re.finditer(r"#define\s+(\w+)\s+\(?\s*([\w]+)\s*\)?[ \t]*$", text, flags=re.M):
            name, val = m.groups()
            try:
                self.consts[name] = self.value(val)
            except ValueError:
                pass
        # simple shifts and sums used for flag masks: (1u << 3), (A | B)
        for m in re.finditer(r"#define\s+(\w+)\s+\(([^()\n]+)\)[ \t]*$", text, flags=re.M):
            name, expr = m.groups()
            if name in self.consts:
                continue
            toks = re.split(r"(<<|\||\+)", expr)
            try:
                vals = [t.strip() for t in toks]
                acc = self.value(vals[0])
                for op, v in zip(vals[1::2], vals[2::2]):
                    v = self.value(v)
                    acc = acc << v if op == "<<" else (acc | v if op == "|" else acc + v)
                self.consts[name] = acc
            except (ValueError, KeyError):
                pass

    # -- C integer expressions: the remaining defines ----------------------------------------------

    _BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
               ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.LShift: operator.lshift,
               ast.RShift: operator.rshift, ast.BitOr: operator.or_, ast.BitAnd: operator.and_,
               ast.BitXor: operator.xor}
    _UNOPS = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}

    def _parse_expressions(self, text):
        text = re.sub(r"\\\n", " ", text)   # line continuations
        for m in re.finditer(r"^#define\s+(\w+)(\(([\w\s,]*)\))?[ \t]+(.+?)[ \t]*$", text, flags=re.M):
            name, fn, params, body = m.groups()
            if name in self.consts or name in self.ioctls or re.match(r"_IO\w*\(", body):
                continue
            if fn is not None:
                self.macros[name] = ([p.strip() for p in params.split(",") if p.strip()], body)
                continue
            try:
                self.consts[name] = self.eval_c(body)
            except (ValueError, KeyError, SyntaxError, TypeError, ZeroDivisionError):
                pass

    def macro(self, name, *args):
        """Evaluate a function-like macro of the header with integer arguments."""
        params, body = self.macros[name]
        if len(args) != len(params):
            raise TypeError(f"{name} takes {len(params)} arguments")
        return self.eval_c(body, dict(zip(params, args)))

    def eval_c(self, expr, env=None):
        """The value of a C integer expression over the header's names (and env)."""
        env = dict(env or {})
        expr = re.sub(r"sizeof\s*\(\s*struct\s+(\w+)\s*\)",
                      lambda m: str(ctypes.sizeof(self.structs[m.group(1)])), expr)
        expr = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b", r"\1", expr)
        expr = expr.replace("/", "//").replace("////", "//")
        return self._eval_node(ast.parse(expr.strip(), mode="eval").body, env)

    def _eval_node(self, node, env):
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            return self.consts[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in self._BINOPS:
            return self._BINOPS[type(node.op)](self._eval_node(node.left, env),
                                               self._eval_node(node.right, env))
        if isinstance(node, ast.UnaryOp) and type(node.op) in self._UNOPS:
            return self._UNOPS[type(node.op)](self._eval_node(node.operand, env))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.macros:
            return self.macro(node.func.id, *[self._eval_node(a, env) for a in node.args])
        raise ValueError(f"not a C integer expression the harness knows: {ast.dump(node)}")

    def _make_struct(self, name, body):
        fields = []
        for decl in body.split(";"):
            decl = " ".join(decl.split())
            if not decl:
                continue
            m = re.fullmatch(r"(struct\s+\w+|\w+)\s+(\w+)((?:\[\s*\w+\s*\])*)", decl)
            if not m:
                raise ValueError(f"struct {name}: cannot parse field '{decl}'")
            typ, fname, dims = m.groups()
            if typ.startswith("struct"):
                ctype = self.structs[typ.split()[1]]
            else:
                ctype = _SCALARS[typ]
            for d in reversed(re.findall(r"\[\s*(\w+)\s*\]", dims)):
                ctype = ctype * self.value(d)
            fields.append((fname, ctype))
        return type(name, (ctypes.Structure,), {"_fields_": fields})

    def new(self, struct_name, **values):
        """A zeroed struct with size set (if it has a size field) and the given fields."""
        s = self.structs[struct_name]()
        if "size" in dict(s._fields_):
            s.size = ctypes.sizeof(s)
        for k, v in values.items():
            setattr(s, k, v)
        return s
