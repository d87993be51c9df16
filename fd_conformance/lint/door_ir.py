"""What each method of a class does to graphs, weights and groups, as small plain data (FDC103's input).

Why a summary and not the AST: FDC103 follows a runner's method into the runner's own helpers, the
weight manager it was built with and the proposer that holds the draft, which usually live in other
files; the per-file pass (run in worker processes for large trees) keeps only these picklable
summaries, and :mod:`.doors` joins them after the walk. A summary keeps exactly what decides the
rule: graph clears (whose graphs: the main model's or the draft's), weight releases and group
shutdowns, calls into ``self`` and into ``self.<attr>``, the ``if``s whose conditions are the graph
flags or the speculative method (other conditions are kept as unknown, so both ways are taken),
early returns, loops and ``try``, and every ``self.<attr> = Ctor(...)`` (which models a weight
manager was built with, under which condition).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from fd_conformance.lint.config import LintConfig
from fd_conformance.lint.files import matches

# A condition over the facts that decide which graphs exist: ("main",) the main model's graph flag,
# ("draft",) the draft's graph flag, ("mtp",) a draft model is in use, ("spec",) any speculative
# method (true when mtp is), ("?",) anything else; ("not", c), ("and", c...), ("or", c...).
Cond = tuple[Any, ...]

UNKNOWN: Cond = ("?",)


@dataclass(frozen=True)
class Site:
    """A call in the source: where it is and how it is written (for messages)."""

    line: int
    col: int  # 1-based characters, as reports show it
    text: str


#: (line, ast column offset) -> the 1-based character column (the scanner's conversion).
Column = Callable[[int, int], int]


@dataclass(frozen=True)
class Clear:
    role: str  # "main" | "draft": whose graphs the call destroys
    site: Site


@dataclass(frozen=True)
class Release:
    kind: str  # "weights" | "groups"
    site: Site
    role: str | None = None  # for a direct release: "draft" when its receiver is the draft's


@dataclass(frozen=True)
class CallSelf:
    method: str
    site: Site


@dataclass(frozen=True)
class CallSuper:
    """``super().<method>(...)``: the base class's method, followed through the class's bases."""

    method: str
    site: Site


@dataclass(frozen=True)
class CallAttr:
    attr: str  # self.<attr>.<method>(...)
    method: str
    site: Site
    role: str | None = None  # "draft" when the receiver chain names the draft


@dataclass(frozen=True)
class Branch:
    cond: Cond
    then: tuple[Op, ...]
    orelse: tuple[Op, ...]


@dataclass(frozen=True)
class Loop:
    body: tuple[Op, ...]  # zero or more times


@dataclass(frozen=True)
class Exit:
    """``return`` or ``raise``: the path ends here."""


Op = Union[Clear, Release, CallSelf, CallSuper, CallAttr, Branch, Loop, Exit]  # noqa: UP007 (a runtime alias on 3.10)


@dataclass(frozen=True)
class Construction:
    """``self.<attr> = <ctor>(...)``: the class an attribute holds, the models it was given, and
    the conditions (of enclosing ``if``s) under which this assignment runs."""

    attr: str
    ctor: str
    roles: tuple[str, ...]
    conds: tuple[Cond, ...]
    line: int
    text: str


@dataclass
class ClassDoors:
    """One class's summary: its methods as ops, what its attributes are built from, and whether it
    owns graphs (clears a model's graphs somewhere: the classes whose methods are doors; a runner
    that never destroys a graph is one whose platform has none, as FastDeploy's config decides for GCU)."""

    name: str
    path: str
    draft_owner: bool
    bases: tuple[str, ...] = ()
    methods: dict[str, tuple[Op, ...]] = field(default_factory=dict)
    constructions: list[Construction] = field(default_factory=list)
    owns_graphs: bool = False
    # The models the class names at all ("main", "draft"): a clear of their graphs, their graph flag
    # or the speculative method tested, a manager built with them. Graphs of a model the class never
    # names are not its to destroy.
    roles: set[str] = field(default_factory=set)


def _chain(node: ast.expr) -> list[str]:
    """``self.proposer.model`` -> ["self", "proposer", "model"]; [] when not a plain chain."""
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        names.append(node.id)
        return names[::-1]
    return []


class _Builder:
    """Turns one class's methods into ops, with the linter's names (config) deciding what is what."""

    def __init__(self, cls: ast.ClassDef, path: str, config: LintConfig, draft_owner: bool, column: Column) -> None:
        self.cfg = config
        self.column = column
        self.clear = config.all_graph_clear_calls
        self.release = frozenset(config.release_calls)
        self.groups = frozenset(config.group_release_calls)
        bases = tuple(c[-1] for c in (_chain(b) for b in cls.bases) if c)
        self.doors = ClassDoors(cls.name, path, draft_owner, bases)
        self.own_methods = {s.name for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.cls = cls

    # -- names
    def _flag(self, name: str) -> str | None:
        if matches(name, self.cfg.draft_flags):
            self.doors.roles.add("draft")
            return "draft"
        if matches(name, self.cfg.main_flags):
            self.doors.roles.add("main")
            return "main"
        if name in self.cfg.speculative_switches:
            self.doors.roles.add("draft")
            return "spec"
        return None

    def _is_draft_chain(self, chain: Sequence[str]) -> bool:
        if any(matches(n, self.cfg.draft_receivers) for n in chain[1:]):
            return True
        return self.doors.draft_owner and len(chain) > 1 and chain[0] == "self" and not any("main" in n for n in chain)

    def _model_role(self, node: ast.expr) -> str | None:
        """The role of a model reference (``self.model``, ``self.proposer.model``, ``self.draft_model``)."""
        chain = _chain(node)
        if len(chain) < 2 or chain[0] != "self":
            return None
        last = chain[-1]
        if last != "model" and not last.endswith("_model") and not matches(last, self.cfg.draft_receivers):
            return None
        return "draft" if self._is_draft_chain(chain) else "main"

    def _mentions_draft_method(self, node: ast.expr) -> bool:
        for sub in ast.walk(node):
            text = sub.value if isinstance(sub, ast.Constant) and isinstance(sub.value, str) else None
            if isinstance(sub, ast.Attribute):
                text = sub.attr
            elif isinstance(sub, ast.Name):
                text = sub.id
            if text is not None and text.lower() in self.cfg.draft_methods:
                return True
        return False

    # -- conditions
    def cond(self, node: ast.expr) -> Cond:
        if isinstance(node, ast.BoolOp):
            return ("and" if isinstance(node.op, ast.And) else "or", *(self.cond(v) for v in node.values))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return ("not", self.cond(node.operand))
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            sides = (node.left, node.comparators[0])
            spec_side = any(
                (c := _chain(s)) and c[-1] in self.cfg.speculative_method_names for s in sides if isinstance(s, ast.expr)
            )
            if spec_side and any(self._mentions_draft_method(s) for s in sides):
                op = node.ops[0]
                self.doors.roles.add("draft")
                if isinstance(op, (ast.Eq, ast.In, ast.Is)):
                    return ("mtp",)
                if isinstance(op, (ast.NotEq, ast.NotIn, ast.IsNot)):
                    return ("not", ("mtp",))
            return UNKNOWN
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) >= 2:
            name = node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                flag = self._flag(name.value)
                return (flag,) if flag else UNKNOWN
        chain = _chain(node)
        if chain:
            flag = self._flag(chain[-1])
            if flag:
                return (flag,)
        return UNKNOWN

    # -- statements
    def body(self, stmts: Sequence[ast.stmt], conds: tuple[Cond, ...]) -> tuple[Op, ...]:
        ops: list[Op] = []
        for stmt in stmts:
            ops.extend(self.stmt(stmt, conds))
        return tuple(ops)

    def stmt(self, node: ast.stmt, conds: tuple[Cond, ...]) -> list[Op]:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return []  # a nested definition runs only when called: not part of this path
        if isinstance(node, ast.If):
            test = self.cond(node.test)
            pre = self.calls(node.test)
            return [
                *pre,
                Branch(test, self.body(node.body, (*conds, test)), self.body(node.orelse, (*conds, ("not", test)))),
            ]
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            head = self.calls(node.iter if isinstance(node, (ast.For, ast.AsyncFor)) else node.test)
            return [*head, Loop(self.body(node.body, conds)), *self.body(node.orelse, conds)]
        if isinstance(node, (ast.With, ast.AsyncWith)):
            return [*(op for item in node.items for op in self.calls(item.context_expr)), *self.body(node.body, conds)]
        if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            body = self.body(node.body, conds)  # type: ignore[attr-defined]
            handlers = [self.body(h.body, conds) for h in node.handlers]  # type: ignore[attr-defined]
            # A handler runs after some prefix of the body: taken as "the body, then maybe a handler".
            alt = tuple(op for h in handlers for op in h)
            rest = [Branch(UNKNOWN, alt, ())] if alt else []
            return [
                *body,
                *rest,
                *self.body(node.orelse, conds),  # type: ignore[attr-defined]
                *self.body(node.finalbody, conds),  # type: ignore[attr-defined]
            ]
        if isinstance(node, (ast.Return, ast.Raise)):
            value = node.value if isinstance(node, ast.Return) else node.exc
            return [*(self.calls(value) if value is not None else []), Exit()]
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            self._construction(node.targets[0], node.value, conds)
        return self.calls(node)

    def _construction(self, target: ast.expr, value: ast.expr, conds: tuple[Cond, ...]) -> None:
        chain = _chain(target)
        if len(chain) != 2 or chain[0] != "self" or not isinstance(value, ast.Call):
            return
        ctor = _chain(value.func)
        if not ctor or not ctor[-1][:1].isupper():
            return
        roles: list[str] = []
        for arg in (*value.args, *(k.value for k in value.keywords)):
            items = arg.elts if isinstance(arg, (ast.List, ast.Tuple)) else [arg]
            roles.extend(r for r in (self._model_role(i) for i in items) if r and r not in roles)
        self.doors.roles.update(roles)
        self.doors.constructions.append(
            Construction(chain[1], ctor[-1], tuple(roles), conds, value.lineno, ast.unparse(value)[:120])
        )

    def calls(self, node: ast.AST) -> list[Op]:
        """The calls inside a simple statement or expression, in evaluation order (arguments first)."""
        ops: list[Op] = []
        for sub in _calls_in_order(node):
            op = self._call(sub)
            if op is not None:
                ops.append(op)
        return ops

    def _call(self, node: ast.Call) -> Op | None:
        func = node.func
        if isinstance(func, ast.Name):
            if func.id in self.clear and node.args:
                role = self._model_role(node.args[0]) or "main"
                return Clear(role, self._site(node, func.id))
            return None
        if not isinstance(func, ast.Attribute):
            return None
        name, chain = func.attr, _chain(func.value)
        site = self._site(node, name)
        if chain == ["self"] and name in self.own_methods:
            return CallSelf(name, site)  # the class's own helper, followed even when named like a clear
        if name in self.clear:
            role = "draft" if chain and self._is_draft_chain(chain) else "main"
            return Clear(role, site)
        if chain == ["self"]:
            return CallSelf(name, site)
        inner = func.value
        if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and inner.func.id == "super":
            return CallSuper(name, site)
        if len(chain) == 2 and chain[0] == "self":
            return CallAttr(chain[1], name, site, "draft" if self._is_draft_chain(chain) else None)
        if name in self.groups:
            return Release("groups", site)
        if name in self.release:
            return Release("weights", site, "draft" if chain and self._is_draft_chain(chain) else None)
        return None

    def _site(self, node: ast.Call, name: str) -> Site:
        func = node.func
        line = (func.end_lineno or node.lineno) if isinstance(func, ast.Attribute) else node.lineno
        col = (func.end_col_offset or 0) - len(name) if isinstance(func, ast.Attribute) else node.col_offset
        if isinstance(func, ast.Attribute):
            chain = _chain(func.value)
            receiver = ".".join(chain) if chain else ("super()" if isinstance(func.value, ast.Call) else "...")
            text = f"{receiver}.{name}()"
        else:
            text = f"{name}()"
        return Site(line, self.column(line, col), text)

    def build(self) -> ClassDoors:
        for stmt in self.cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.doors.methods[stmt.name] = self.body(stmt.body, ())
        every = [op for ops in self.doors.methods.values() for op in walk(ops)]
        clears = [op for op in every if isinstance(op, Clear)]
        self.doors.owns_graphs = bool(clears)
        self.doors.roles.update(op.role for op in clears)
        self.doors.roles.update("draft" for op in every if isinstance(op, (CallAttr, Release)) and op.role == "draft")
        return self.doors


def walk(ops: Sequence[Op]) -> list[Op]:
    """Every op, those inside branches and loops included."""
    found: list[Op] = []
    for op in ops:
        found.append(op)
        if isinstance(op, Branch):
            found += walk(op.then) + walk(op.orelse)
        elif isinstance(op, Loop):
            found += walk(op.body)
    return found


_SKIPPED = (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Constant, ast.Name, ast.Load, ast.Store)


def _calls_in_order(node: ast.AST) -> list[ast.Call]:
    """Calls in the order they run: an argument's call before the call that takes it (a call ends
    after its arguments, so sorting by end position gives that order); lambdas' bodies are left
    out (they run later, not on this path). An explicit stack: this is the linter's hot loop."""
    found: list[ast.Call] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Call):
            found.append(n)
        for name in n._fields:
            value = getattr(n, name, None)
            if isinstance(value, list):
                stack.extend(v for v in value if isinstance(v, ast.AST) and not isinstance(v, _SKIPPED))
            elif isinstance(value, ast.AST) and not isinstance(value, _SKIPPED):
                stack.append(value)
    found.sort(key=lambda c: (c.end_lineno or 0, c.end_col_offset or 0))
    return found


def summarize_class(cls: ast.ClassDef, path: str, config: LintConfig, column: Column) -> ClassDoors:
    """The door summary of one class (see the module docstring)."""
    return _Builder(cls, path, config, matches(cls.name, config.draft_owner_classes), column).build()


_DRAFT_WORD = re.compile(r"\w*draft\w*")


def reads_draft_flag(source: str, config: LintConfig) -> bool:
    """Does the file name a draft graph flag at all? Across the tree this decides whether a draft can
    have graphs (FastDeploy before ``draft_model_use_cudagraph`` had none): ``str.find`` first, so
    the common file costs one scan."""
    if "draft" not in source:
        return False
    return any(matches(word, config.draft_flags) for word in set(_DRAFT_WORD.findall(source)))
