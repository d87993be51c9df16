"""FDC102's solver (lint/guard.py): typed formulas, answers that match brute-force truth tables, and
a step budget that yields UNKNOWN (reported by FDC102 as "too complex to decide"), never a guess."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from _lint_helpers import REPO
from hypothesis import given, settings
from hypothesis import strategies as st

from fd_conformance.lint import guard as g
from fd_conformance.lint import lint_paths

NAMES = ("a", "b", "c", "d", "e")  # at most five variables: 32 rows per truth table
ROWS = [dict(zip(NAMES, r, strict=True)) for r in itertools.product((False, True), repeat=len(NAMES))]


def _evaluate(f: g.Formula, row: dict[str, bool]) -> bool:
    """The formula's meaning, written independently of the solver's constant folding."""
    if isinstance(f, g.Const):
        return f.value
    if isinstance(f, g.Var):
        return row[f.key]
    if isinstance(f, g.Not):
        return not _evaluate(f.arg, row)
    if isinstance(f, g.And):
        return all(_evaluate(p, row) for p in f.parts)
    return any(_evaluate(p, row) for p in f.parts)


def _formulas() -> st.SearchStrategy[g.Formula]:
    """Random formulas built both raw (unfolded records) and through the smart constructors."""
    leaves = st.one_of(st.sampled_from(NAMES).map(g.Var), st.booleans().map(g.Const))

    def extend(inner: st.SearchStrategy[g.Formula]) -> st.SearchStrategy[g.Formula]:
        many = st.lists(inner, min_size=1, max_size=4)
        return st.one_of(
            inner.map(g.f_not),
            inner.map(g.Not),
            many.map(lambda ps: g.f_and(*ps)),
            many.map(lambda ps: g.f_or(*ps)),
            many.map(lambda ps: g.And(tuple(ps))),
            many.map(lambda ps: g.Or(tuple(ps))),
        )

    return st.recursive(leaves, extend, max_leaves=14)


def _truth_table(f: g.Formula) -> list[bool]:
    return [_evaluate(f, row) for row in ROWS]


@settings(max_examples=300, deadline=None)
@given(_formulas())
def test_solver_matches_brute_force_truth_table(f: g.Formula) -> None:
    expected = g.Sat.YES if any(_truth_table(f)) else g.Sat.NO
    assert g.satisfiable(f) is expected


@settings(max_examples=300, deadline=None)
@given(_formulas(), st.lists(st.sampled_from(NAMES), max_size=3))
def test_smart_constructors_keep_the_meaning(f: g.Formula, others: list[str]) -> None:
    """Folding and flattening never change a truth table (the solver relies on it)."""
    rest = [g.Var(n) for n in others]
    table = _truth_table(f)
    assert _truth_table(g.f_not(f)) == [not v for v in table]
    assert _truth_table(g.f_and(f, *rest)) == [v and all(row[n] for n in others) for v, row in zip(table, ROWS, strict=True)]
    assert _truth_table(g.f_or(f, *rest)) == [v or any(row[n] for n in others) for v, row in zip(table, ROWS, strict=True)]


def test_formulas_compare_by_value_and_fold_constants() -> None:
    a, b = g.Var("a"), g.Var("b")
    assert g.f_and(a, g.f_not(b)) == g.And((g.Var("a"), g.Not(g.Var("b"))))  # a rebuilt copy is equal
    assert g.f_or() == g.FALSE and g.f_and() == g.TRUE  # the identities of empty or / and
    assert g.f_and(*(g.f_or(g.Var(f"x{i}"), g.Var(f"y{i}")) for i in range(40)), g.Const(False)) == g.FALSE
    assert g.satisfiable(g.f_and(a, g.f_not(b))) is g.Sat.YES
    assert g.satisfiable(g.f_and(a, g.f_not(a))) is g.Sat.NO


def test_budget_exhaustion_answers_unknown_and_unknown_has_no_truth_value() -> None:
    pairs = [g.f_or(g.Var(f"x{i}"), g.Var(f"y{i}")) for i in range(40)]
    z = g.Var("z")
    contradiction = g.f_and(*pairs, z, g.f_not(z))  # unsatisfiable, but only after splitting every pair
    assert g.satisfiable(contradiction) is g.Sat.UNKNOWN
    assert g.satisfiable(g.f_and(z, g.f_not(z))) is g.Sat.NO  # small enough: decided
    with pytest.raises(TypeError, match="three-valued"):
        bool(g.Sat.UNKNOWN)  # ``if satisfiable(f):`` cannot quietly read UNKNOWN as YES


def _hard_guard(tmp_path: Path, pairs: int) -> Path:
    """A draft clear reached only with the main flag on: the alternative branch is a contradiction
    (``c and not c``) that the solver can see only after splitting ``pairs`` or-pairs."""
    chain = " and ".join(f"(self.a{i} or self.b{i})" for i in range(pairs))
    src = tmp_path / "hard.py"
    src.write_text(
        "class Runner:\n"
        "    def clear_graphs(self):\n"
        f"        if self.use_cudagraph or ({chain} and self.c and not self.c):\n"
        "            self.proposer.model.clear_graph_opt_backend()\n"
    )
    return src


def test_fdc102_reports_an_undecidable_guard_as_undecided(tmp_path: Path) -> None:
    """With the old budget ("over budget -> satisfiable") this clear passed silently; now FDC102
    says the guard was too complex to decide."""
    findings = lint_paths([_hard_guard(tmp_path, 20)], root=REPO).findings
    assert [(f.code, f.location.line) for f in findings] == [("FDC102", 4)]
    assert "could not decide" in findings[0].message and "too complex" in findings[0].message
    assert "use_cudagraph" in findings[0].message


def test_fdc102_decides_the_same_guard_when_small(tmp_path: Path) -> None:
    """The same shape within budget is decided: an ordinary FDC102 (main flag on only)."""
    findings = lint_paths([_hard_guard(tmp_path, 3)], root=REPO).findings
    assert [(f.code, f.location.line) for f in findings] == [("FDC102", 4)]
    assert "only when the main model's flag use_cudagraph is on" in findings[0].message
