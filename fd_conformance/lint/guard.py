"""FDC102's reachability analysis: under which flag values can a draft clear run at all?

Why a formula and not "which flags does an enclosing ``if`` mention": FastDeploy's fix for the
MTP hang nests the draft clear in ``if self.use_cudagraph:`` with an inner ``if ... and
draft_model_use_cudagraph:``. Both flags are mentioned, yet the clear is reachable only when the
MAIN flag is on, so with the main graphs off and the draft's on the draft graphs leak. The same
holds for an early ``return`` under the main flag (``if not self.use_cudagraph: return``) before
the clear. So the rule computes each draft clear's *path condition* (a boolean formula over the
conditions of enclosing ``if``s, ``and``/``or``/``if-else`` expressions and the early exits
before it, ``assert``s included) and asks whether it can hold with the main flag off (and with
it on).

Conditions are atoms: every main flag (see ``main_flags``) is one variable, ``M``, however it is
reached (``self.use_cudagraph``, ``self.graph_opt_config.use_cudagraph``, ``getattr(cfg,
"use_cudagraph", False)``, ``flag is True``, a local ``use_graphs = cfg.use_cudagraph``); a
draft flag is never ``M``, even when a main-flag pattern would match it; anything else is an
opaque variable keyed by its AST. Loops, ``try`` and ``match`` are over-approximated
(code after them is taken as reachable whenever the statement is), which can only hide a
finding, never invent one. Calls into other functions are not followed.
"""

from __future__ import annotations

import ast
import enum
import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeAlias, cast


# Formulas are small frozen records, compared by value (never by identity), built by the smart
# constructors ``f_not``/``f_and``/``f_or``, which fold constants and flatten nested nodes: that
# folding is what keeps the formulas of real functions at a handful of atoms.
@dataclass(frozen=True, slots=True)
class Const:
    """``True`` or ``False``."""

    value: bool


@dataclass(frozen=True, slots=True)
class Var:
    """An atom: the main flag, or an opaque condition keyed by its AST dump."""

    key: str


@dataclass(frozen=True, slots=True)
class Not:
    arg: Formula


@dataclass(frozen=True, slots=True)
class And:
    """Conjunction of two or more parts (the constructors never build fewer)."""

    parts: tuple[Formula, ...]


@dataclass(frozen=True, slots=True)
class Or:
    """Disjunction of two or more parts (the constructors never build fewer)."""

    parts: tuple[Formula, ...]


Formula: TypeAlias = Const | Var | Not | And | Or

TRUE = Const(True)
FALSE = Const(False)
MAIN = Var("<main flag>")
#: Work limit of one satisfiability question; past it the answer is ``Sat.UNKNOWN``, which FDC102
#: reports as "too complex to decide" rather than guessing either way.
SAT_BUDGET = 20000
#: Formulas larger than this (pathological merges) are replaced by a fresh opaque atom, which can
#: only hide a finding, never invent one.
MAX_SIZE = 400


class Sat(enum.Enum):
    """The answer to "can this formula be true?": three-valued, since the search is budgeted."""

    YES = "yes"
    NO = "no"
    UNKNOWN = "unknown"

    def __bool__(self) -> bool:
        # ``if satisfiable(f):`` would silently treat UNKNOWN as YES: the bug this type exists to stop.
        raise TypeError("Sat is three-valued: compare with Sat.YES / Sat.NO / Sat.UNKNOWN")


def f_not(a: Formula) -> Formula:
    if isinstance(a, Const):
        return Const(not a.value)
    if isinstance(a, Not):
        return a.arg
    return Not(a)


def _fold(node: type[And] | type[Or], absorbing: Const, parts: tuple[Formula, ...]) -> Formula:
    """One n-ary ``node`` with constants folded and nested nodes of the same kind flattened."""
    out: list[Formula] = []
    for p in parts:
        if isinstance(p, Const):
            if p == absorbing:
                return absorbing
            continue  # the identity element
        if isinstance(p, node):
            out.extend(p.parts)
        else:
            out.append(p)
    if not out:
        return Const(not absorbing.value)
    return out[0] if len(out) == 1 else node(tuple(out))


def f_and(*parts: Formula) -> Formula:
    return _fold(And, FALSE, parts)


def f_or(*parts: Formula) -> Formula:
    return _fold(Or, TRUE, parts)


def _size(f: Formula) -> int:
    if isinstance(f, Not):
        return 1 + _size(f.arg)
    if isinstance(f, (And, Or)):
        return 1 + sum(_size(g) for g in f.parts)
    return 1


def _atoms(f: Formula, into: dict[Var, None]) -> None:
    if isinstance(f, Var):
        into[f] = None
    elif isinstance(f, Not):
        _atoms(f.arg, into)
    elif isinstance(f, (And, Or)):
        for g in f.parts:
            _atoms(g, into)


def _assign(f: Formula, atom: Var, value: bool) -> Formula:
    if isinstance(f, Var):
        return Const(value) if f == atom else f
    if isinstance(f, Not):
        return f_not(_assign(f.arg, atom, value))
    if isinstance(f, And):
        return f_and(*(_assign(g, atom, value) for g in f.parts))
    if isinstance(f, Or):
        return f_or(*(_assign(g, atom, value) for g in f.parts))
    return f


def _closed_value(f: Formula) -> bool:
    """The value of a formula without atoms."""
    if isinstance(f, Const):
        return f.value
    if isinstance(f, Not):
        return not _closed_value(f.arg)
    if isinstance(f, And):
        return all(_closed_value(g) for g in f.parts)
    if isinstance(f, Or):
        return any(_closed_value(g) for g in f.parts)
    raise ValueError(f"{f} has an atom")


def satisfiable(f: Formula, budget: int = SAT_BUDGET) -> Sat:
    """Can ``f`` be true? Splitting on atoms with constant folding, at most ``budget`` splits;
    past them ``Sat.UNKNOWN`` (the caller must say so, not guess)."""
    left = budget

    def go(g: Formula) -> Sat:
        nonlocal left
        if isinstance(g, Const):
            return Sat.YES if g.value else Sat.NO
        left -= 1
        if left <= 0:
            return Sat.UNKNOWN
        found: dict[Var, None] = {}
        _atoms(g, found)
        if not found:  # constants only, in a record built by hand rather than by the constructors
            return Sat.YES if _closed_value(g) else Sat.NO
        atom = next(iter(found))
        first = go(_assign(g, atom, True))
        if first is Sat.YES:
            return first
        second = go(_assign(g, atom, False))
        if second is Sat.YES:
            return second
        return Sat.UNKNOWN if Sat.UNKNOWN in (first, second) else Sat.NO

    return go(f)


# --------------------------------------------------------------------------- conditions -> formulas
def _tail(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


class _Conditions:
    """Turns condition expressions into formulas; knows the flag names and the local aliases."""

    def __init__(self, main_flags: Sequence[str], draft_flags: Sequence[str]) -> None:
        self.main_flags = tuple(main_flags)
        self.draft_flags = tuple(draft_flags)
        self.aliases: dict[str, Formula] = {}
        self.main_seen: str | None = None  # the first main flag met, as spelt (for messages)

    def _is_main(self, name: str) -> bool:
        if any(fnmatch.fnmatchcase(name, p) for p in self.main_flags) and not any(
            fnmatch.fnmatchcase(name, p) for p in self.draft_flags
        ):
            self.main_seen = self.main_seen or name
            return True
        return False

    def formula(self, node: ast.expr) -> Formula:
        if isinstance(node, ast.BoolOp):
            parts = [self.formula(v) for v in node.values]
            return f_and(*parts) if isinstance(node.op, ast.And) else f_or(*parts)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return f_not(self.formula(node.operand))
        if isinstance(node, ast.NamedExpr):
            return self.formula(node.value)
        if isinstance(node, ast.Constant):
            return TRUE if node.value else FALSE
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            polarity = _bool_comparison(node)
            if polarity is not None:
                inner = self.formula(node.left)
                return inner if polarity else f_not(inner)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "bool" and len(node.args) == 1 and not node.keywords:
                return self.formula(node.args[0])
            if (
                node.func.id == "getattr"
                and len(node.args) in (2, 3)
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
                and self._is_main(node.args[1].value)
            ):
                return MAIN
        if isinstance(node, ast.Name) and node.id in self.aliases:
            return self.aliases[node.id]
        name = _tail(node)
        if name is not None and self._is_main(name):
            return MAIN
        return Var(ast.dump(node))

    def note_assignment(self, stmt: ast.stmt) -> None:
        """``use_graphs = cfg.use_cudagraph`` makes ``use_graphs`` a main-flag alias; any other
        binding of a name drops its alias (order-aware, one function at a time)."""
        targets: list[ast.expr]
        value: ast.expr | None
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
            targets, value = [stmt.target], stmt.value if isinstance(stmt, ast.AnnAssign) else None
        else:
            return
        for target in targets:
            if not isinstance(target, ast.Name):
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        self.aliases.pop(sub.id, None)
                continue
            self.aliases.pop(target.id, None)
            if value is not None and len(targets) == 1 and not isinstance(stmt, ast.AugAssign):
                f = self.formula(value)
                if _mentions_main(f):
                    self.aliases[target.id] = f


def _mentions_main(f: Formula) -> bool:
    if isinstance(f, Not):
        return _mentions_main(f.arg)
    if isinstance(f, (And, Or)):
        return any(_mentions_main(g) for g in f.parts)
    return f == MAIN


def _bool_comparison(node: ast.Compare) -> bool | None:
    """``x is True`` / ``x == True`` -> True; ``x is False`` / ``x != True`` ... -> False; else None."""
    right = node.comparators[0]
    if not (isinstance(right, ast.Constant) and isinstance(right.value, bool)):
        return None
    op = node.ops[0]
    if isinstance(op, (ast.Is, ast.Eq)):
        return right.value
    if isinstance(op, (ast.IsNot, ast.NotEq)):
        return not right.value
    return None


# --------------------------------------------------------------------------- path conditions
class _Paths:
    """One walk of a function body computing the path condition of each target call."""

    def __init__(self, targets: Iterable[ast.Call], conditions: _Conditions) -> None:
        self.targets = {id(t): t for t in targets}
        self.lines = sorted({t.lineno for t in self.targets.values()})
        self.last = self.lines[-1] if self.lines else 0
        self.cond = conditions
        self.found: dict[int, Formula] = {}
        self._fresh = 0

    def _holds_target(self, node: ast.AST) -> bool:
        first, last = node.lineno, getattr(node, "end_lineno", None) or node.lineno  # type: ignore[attr-defined]
        return any(first <= line <= last for line in self.lines)

    def _cap(self, f: Formula) -> Formula:
        if _size(f) <= MAX_SIZE:
            return f
        self._fresh += 1
        return Var(f"<unknown {self._fresh}>")

    # -- statements
    def block(self, stmts: Sequence[ast.stmt], pc: Formula) -> Formula:
        for stmt in stmts:
            if pc == FALSE or stmt.lineno > self.last:
                break  # unreachable, or past every target: nothing more to learn
            pc = self.stmt(stmt, pc)
        return pc

    def stmt(self, node: ast.stmt, pc: Formula) -> Formula:
        if isinstance(node, ast.If):
            self.expr(node.test, pc)
            c = self.cond.formula(node.test)
            then_in, else_in = f_and(pc, c), f_and(pc, f_not(c))
            then_out, else_out = self.block(node.body, then_in), self.block(node.orelse, else_in)
            if then_out == then_in and else_out == else_in:
                return pc  # neither branch exits early: the if does not constrain what follows
            return self._cap(f_or(then_out, else_out))
        if isinstance(node, (ast.Return, ast.Raise)):
            for child in ast.iter_child_nodes(node):
                self.expr(child, pc)
            return FALSE
        if isinstance(node, ast.Assert):
            self.expr(node, pc)
            return f_and(pc, self.cond.formula(node.test))  # what follows runs only if it held
        if isinstance(node, (ast.Break, ast.Continue)):
            return FALSE  # the rest of this loop body is skipped; after the loop: see For/While
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            if isinstance(node, ast.While):
                self.expr(node.test, pc)
                body_in = f_and(pc, self.cond.formula(node.test))
            else:
                self.expr(node.iter, pc)
                body_in = pc
            self.block(node.body, body_in)
            self.block(node.orelse, pc)
            return pc  # over-approximation: the loop may run zero times or break
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                self.expr(item.context_expr, pc)
            return self.block(node.body, pc)
        if isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            tried = cast(ast.Try, node)  # ``try ... except*`` (3.11+, ast.TryStar) has the same fields
            body_out = self.block(tried.body, pc)
            outs = [self.block(tried.orelse, body_out)]
            outs.extend(self.block(h.body, pc) for h in tried.handlers)
            if tried.finalbody and self.block(tried.finalbody, pc) == FALSE:
                return FALSE
            return self._cap(f_or(*outs))
        if isinstance(node, ast.Match):
            self.expr(node.subject, pc)
            for case in node.cases:
                self._fresh += 1
                self.block(case.body, f_and(pc, Var(f"<case {self._fresh}>")))
            return pc
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return pc  # its own scope (its calls are judged with its own function)
        self.expr(node, pc)
        self.cond.note_assignment(node)
        return pc

    # -- expressions (short-circuit operators guard their right-hand side)
    def expr(self, node: ast.AST, pc: Formula) -> None:
        if not self.lines or not hasattr(node, "lineno") or not self._holds_target(node):
            return
        if id(node) in self.targets:
            self.found[id(node)] = pc
        if isinstance(node, ast.BoolOp):
            seen = pc
            for value in node.values:
                self.expr(value, seen)
                c = self.cond.formula(value)
                seen = f_and(seen, c if isinstance(node.op, ast.And) else f_not(c))
            return
        if isinstance(node, ast.IfExp):
            self.expr(node.test, pc)
            c = self.cond.formula(node.test)
            self.expr(node.body, f_and(pc, c))
            self.expr(node.orelse, f_and(pc, f_not(c)))
            return
        if isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return
        for child in ast.iter_child_nodes(node):
            self.expr(child, pc)


def path_conditions(
    body: Sequence[ast.stmt], targets: Sequence[ast.Call], main_flags: Sequence[str], draft_flags: Sequence[str]
) -> tuple[dict[int, Formula], str | None]:
    """(id(call) -> path condition for each target call reachable in ``body``, the first main
    flag name the conditions test)."""
    conditions = _Conditions(main_flags, draft_flags)
    paths = _Paths(targets, conditions)
    paths.block(body, TRUE)
    return paths.found, conditions.main_seen


def main_flag_dependence(
    body: Sequence[ast.stmt], targets: Sequence[ast.Call], main_flags: Sequence[str], draft_flags: Sequence[str]
) -> tuple[list[tuple[ast.Call, bool | None]], str | None]:
    """The draft clears whose reachability depends on the main flag, with the flag value they need
    (True: reached only with the main flag on; None: undecided, the solver ran out of budget), and
    the flag's name as spelt. A clear is not reported when another draft clear of the same function
    is reachable with the main flag at the other value (an ``else`` that also clears the draft, or an
    unguarded second clear); an undecided one is reported unless decided clears already cover both
    values, so that a budget never turns into a silent "fine"."""
    found, flag = path_conditions(body, targets, main_flags, draft_flags)
    answers: list[tuple[ast.Call, Sat, Sat]] = []
    for call in targets:
        pc = found.get(id(call))
        if pc is not None:
            answers.append((call, satisfiable(f_and(pc, MAIN)), satisfiable(f_and(pc, f_not(MAIN)))))
    # An undecided answer may cover the other value (as the budget's old "satisfiable" did) when
    # suppressing a decided finding; proof of coverage needs decided answers.
    maybe_on = any(on is not Sat.NO for _, on, _ in answers)
    maybe_off = any(off is not Sat.NO for _, _, off in answers)
    known_both = any(on is Sat.YES for _, on, _ in answers) and any(off is Sat.YES for _, _, off in answers)
    out: list[tuple[ast.Call, bool | None]] = []
    for call, on, off in answers:
        if Sat.UNKNOWN in (on, off):
            if not known_both:
                out.append((call, None))
        elif on is not off and not (maybe_off if on is Sat.YES else maybe_on):
            out.append((call, on is Sat.YES))
    return out, flag
