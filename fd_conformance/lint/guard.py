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
import fnmatch
from collections.abc import Iterable, Sequence
from typing import cast

# Formulas: TRUE, FALSE, ("v", key), ("not", f), ("and", f, ...), ("or", f, ...): plain tuples,
# built by the smart constructors below, which fold constants (that folding is what keeps the
# formulas of real functions at a handful of atoms).
TRUE: tuple = ("T",)
FALSE: tuple = ("F",)
MAIN: tuple = ("v", "<main flag>")
#: Work limit of one satisfiability question; past it the answer is "satisfiable" (no finding).
SAT_BUDGET = 20000
#: Formulas larger than this (pathological merges) are replaced by an unknown: no finding.
MAX_SIZE = 400

Formula = tuple


def f_not(a: Formula) -> Formula:
    if a is TRUE:
        return FALSE
    if a is FALSE:
        return TRUE
    if a[0] == "not":
        return a[1]
    return ("not", a)


def _fold(op: str, absorbing: Formula, identity: Formula, parts: tuple[Formula, ...]) -> Formula:
    """One n-ary ``op`` node with constants folded and nested ``op`` nodes flattened."""
    out: list[Formula] = []
    for p in parts:
        if p is absorbing:
            return absorbing
        if p is identity:
            continue
        if p[0] == op:
            out.extend(p[1:])
        else:
            out.append(p)
    if not out:
        return identity
    return out[0] if len(out) == 1 else (op, *out)


def f_and(*parts: Formula) -> Formula:
    return _fold("and", FALSE, TRUE, parts)


def f_or(*parts: Formula) -> Formula:
    return _fold("or", TRUE, FALSE, parts)


def _size(f: Formula) -> int:
    return 1 if f[0] in ("T", "F", "v") else 1 + sum(_size(g) for g in f[1:])


def _atoms(f: Formula, into: dict[Formula, None]) -> None:
    if f[0] == "v":
        into[f] = None
    elif f[0] in ("not", "and", "or"):
        for g in f[1:]:
            _atoms(g, into)


def _assign(f: Formula, atom: Formula, value: bool) -> Formula:
    kind = f[0]
    if kind == "v":
        return (TRUE if value else FALSE) if f == atom else f
    if kind == "not":
        return f_not(_assign(f[1], atom, value))
    if kind == "and":
        return f_and(*(_assign(g, atom, value) for g in f[1:]))
    if kind == "or":
        return f_or(*(_assign(g, atom, value) for g in f[1:]))
    return f


def satisfiable(f: Formula) -> bool:
    """Can ``f`` be true? Splitting on atoms with constant folding; over budget -> True."""
    budget = [SAT_BUDGET]

    def go(g: Formula) -> bool:
        if g is TRUE:
            return True
        if g is FALSE:
            return False
        budget[0] -= 1
        if budget[0] <= 0:
            return True
        found: dict[Formula, None] = {}
        _atoms(g, found)
        atom = next(iter(found))
        return go(_assign(g, atom, True)) or go(_assign(g, atom, False))

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
        return ("v", ast.dump(node))

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
    if f == MAIN:
        return True
    return f[0] in ("not", "and", "or") and any(_mentions_main(g) for g in f[1:])


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
        return ("v", f"<unknown {self._fresh}>")

    # -- statements
    def block(self, stmts: Sequence[ast.stmt], pc: Formula) -> Formula:
        for stmt in stmts:
            if pc is FALSE or stmt.lineno > self.last:
                break  # unreachable, or past every target: nothing more to learn
            pc = self.stmt(stmt, pc)
        return pc

    def stmt(self, node: ast.stmt, pc: Formula) -> Formula:
        if isinstance(node, ast.If):
            self.expr(node.test, pc)
            c = self.cond.formula(node.test)
            then_in, else_in = f_and(pc, c), f_and(pc, f_not(c))
            then_out, else_out = self.block(node.body, then_in), self.block(node.orelse, else_in)
            if then_out is then_in and else_out is else_in:
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
            if tried.finalbody and self.block(tried.finalbody, pc) is FALSE:
                return FALSE
            return self._cap(f_or(*outs))
        if isinstance(node, ast.Match):
            self.expr(node.subject, pc)
            for case in node.cases:
                self._fresh += 1
                self.block(case.body, f_and(pc, ("v", f"<case {self._fresh}>")))
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
) -> tuple[list[tuple[ast.Call, bool]], str | None]:
    """The draft clears whose reachability depends on the main flag, with the flag value they need
    (True: reached only with the main flag on), and the flag's name as spelt. A clear is not
    reported when another draft clear of the same function is reachable with the main flag at the
    other value (an ``else`` that also clears the draft, or an unguarded second clear)."""
    found, flag = path_conditions(body, targets, main_flags, draft_flags)
    reach_on = reach_off = False
    needs: list[tuple[ast.Call, bool]] = []
    for call in targets:
        pc = found.get(id(call))
        if pc is None:
            continue
        on = satisfiable(f_and(pc, MAIN))
        off = satisfiable(f_and(pc, f_not(MAIN)))
        reach_on |= on
        reach_off |= off
        if on != off:
            needs.append((call, on))
    return [(call, on) for call, on in needs if not (reach_off if on else reach_on)], flag
