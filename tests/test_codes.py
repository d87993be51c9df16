"""The finding-code registry: every code has its four parts, and each part is real.

A code's parts (fd_conformance/codes/): the function that detects it, its fix hint (the one text
its findings carry), a fixture or mutant that trips it with a clean twin, and its doc. These tests
fail when a part is missing, names something that does not exist, or does not do what it says.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from fd_conformance.cli import main
from fd_conformance.errors import EXIT_OK, EXIT_USAGE
from fd_conformance.findings import CODES_DOC, RULES, Rule, codes_markdown, fix_hint, make_finding
from fd_conformance.protocol import check_protocol

REPO = Path(__file__).resolve().parents[1]
CODES = sorted(RULES)


def _resolve(dotted: str) -> object:
    """Import the longest module prefix of ``dotted``, then walk attributes (Class.method)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def _is_path(ref: str) -> bool:
    return "/" in ref


def _top_level_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _case_codes() -> dict[str, frozenset[str]]:
    """Every reference case name -> the codes it must raise (its expected findings)."""
    sys.path.insert(0, str(REPO / "models"))
    try:
        from fd_reference_models import cases
    finally:
        sys.path.remove(str(REPO / "models"))
    return {case.name: case.expected_findings for case in cases.all_cases()}


def _missing_parts(rule: Rule) -> list[str]:
    """What ``rule`` lacks of its four parts (empty when whole)."""
    missing = [] if rule.detectors else ["no detector"]
    missing += [] if rule.hint.strip() else ["no fix hint"]
    missing += [] if rule.trips and rule.clean else ["needs a fixture or mutant that trips it and a clean twin"]
    missing += [f"doc has no {part!r}" for part in ("what", "why", "bad", "good") if not getattr(rule.doc, part).strip()]
    return missing + (["doc's bad and good examples are the same"] if rule.doc.bad == rule.doc.good else [])


def _missing_files(rule: Rule) -> list[str]:
    """The fixture paths (``file`` or ``file::Name``) ``rule`` names that do not exist."""
    missing = []
    for ref in (r for r in (*rule.trips, *rule.clean) if _is_path(r)):
        file, _, name = ref.partition("::")
        if not (REPO / file).is_file():
            missing.append(f"{file} does not exist")
        elif name and name not in _top_level_names(REPO / file):
            missing.append(f"{file} defines no {name}")
    return missing


@pytest.mark.parametrize("code", CODES)
def test_every_code_has_its_four_parts(code: str) -> None:
    assert _missing_parts(RULES[code]) == [], code


@pytest.mark.parametrize("code", CODES)
def test_detectors_exist_and_are_functions(code: str) -> None:
    for dotted in RULES[code].detectors:
        assert dotted.startswith("fd_conformance."), dotted
        assert callable(_resolve(dotted)), dotted


@pytest.mark.parametrize("code", CODES)
def test_named_fixtures_and_mutants_exist(code: str) -> None:
    rule = RULES[code]
    assert _missing_files(rule) == [], code
    cases: dict[str, frozenset[str]] | None = None
    for ref, must_raise in [*((t, True) for t in rule.trips), *((c, False) for c in rule.clean)]:
        if _is_path(ref):
            continue
        if cases is None:
            pytest.importorskip("torch")
            pytest.importorskip("transformers")
            cases = _case_codes()
        assert ref in cases, f"{code}: no model case named {ref!r}"
        assert (code in cases[ref]) is must_raise, f"{code}: case {ref} expects {sorted(cases[ref])}"


def test_a_missing_part_or_fixture_is_refused() -> None:
    """The checks above can fail: the same helpers they use find each hole in a broken entry."""
    whole = RULES["FDC101"]
    assert _missing_parts(whole) == [] and _missing_files(whole) == []
    doc = dataclasses.replace(whole.doc, why=" ", good=whole.doc.bad)
    broken = dataclasses.replace(whole, detectors=(), hint="", trips=(), doc=doc)
    assert _missing_parts(broken) == [
        "no detector",
        "no fix hint",
        "needs a fixture or mutant that trips it and a clean twin",
        "doc has no 'why'",
        "doc's bad and good examples are the same",
    ]
    nowhere = dataclasses.replace(whole, trips=("tests/fixtures/lint/rules/fdc101_nope.py", "tests/_helpers.py::Nope"))
    assert _missing_files(nowhere) == [
        "tests/fixtures/lint/rules/fdc101_nope.py does not exist",
        "tests/_helpers.py defines no Nope",
    ]


# --------------------------------------------------------------------------- fixtures do what they say
def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_codes_fixture_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _judged_classes(path: Path) -> Iterator[type]:
    module = _load(path)
    for name, value in vars(module).items():
        if isinstance(value, type) and value.__module__ == module.__name__ and not name.startswith("_"):
            yield value


def _protocol_refs(code: str, clean: bool) -> list[Path]:
    rule = RULES[code]
    return [REPO / r for r in (rule.clean if clean else rule.trips) if r.startswith("tests/fixtures/protocol/")]


@pytest.mark.parametrize("code", [c for c in CODES if _protocol_refs(c, clean=False)])
def test_protocol_fixture_trips_exactly_its_code(code: str) -> None:
    for path in _protocol_refs(code, clean=False):
        judged = list(_judged_classes(path))
        assert judged, path
        for cls in judged:
            assert [f.code for f in check_protocol(cls)] == [code], (path, cls.__qualname__)
    for path in _protocol_refs(code, clean=True):
        for cls in _judged_classes(path):
            assert check_protocol(cls) == [], (path, cls.__qualname__)


@pytest.mark.parametrize("code", [c for c in CODES if any(t.startswith("tests/fixtures/lint/") for t in RULES[c].trips)])
def test_lint_fixture_trips_its_code_and_its_twin_does_not(code: str) -> None:
    from fd_conformance.lint import lint_paths

    rule = RULES[code]
    for ref in rule.trips:
        if ref.startswith("tests/fixtures/lint/"):
            assert code in {f.code for f in lint_paths([REPO / ref]).findings}, ref
    for ref in rule.clean:
        if ref.startswith("tests/fixtures/lint/"):
            assert code not in {f.code for f in lint_paths([REPO / ref]).findings}, ref


# --------------------------------------------------------------------------- one hint per code
def _make_finding_calls() -> Iterator[tuple[str, ast.Call]]:
    for path in sorted((REPO / "fd_conformance").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "make_finding":
                yield str(path.relative_to(REPO)), node


def test_emitting_sites_take_the_hint_from_the_registry() -> None:
    """No site passes its own hint (at most code, message, location positionally); a site naming
    its code fills every field that code's hint needs."""
    calls = list(_make_finding_calls())
    assert len(calls) > 20
    for where, call in calls:
        shown = f"{where}:{call.lineno}"
        assert len(call.args) <= 3 and "hint" not in {k.arg for k in call.keywords}, shown
        if call.args and isinstance(call.args[0], ast.Constant):
            fields = set(RULES[call.args[0].value].hint_fields)
            given = {k.arg for k in call.keywords}
            assert fields <= given or None in given, f"{shown}: {call.args[0].value} needs {sorted(fields - given)}"


def test_findings_carry_the_registry_hint() -> None:
    found = make_finding("FDC101", "m", clear="clear_graph_opt_backend", release="clear_parameters")
    assert (
        found.hint
        == "move the clear_graph_opt_backend() call before clear_parameters()"
        == fix_hint("FDC101", clear="clear_graph_opt_backend", release="clear_parameters")
    )
    with pytest.raises(KeyError, match="needs clear, release"):
        make_finding("FDC101", "m")
    with pytest.raises(TypeError, match="hint now comes from the registry"):
        make_finding("FDC101", "m", "an old-style hint")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- explain, README, SARIF
def test_explain_prints_the_page(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "fdc201"]) == EXIT_OK
    out = capsys.readouterr().out
    rule = RULES["FDC201"]
    for text in (rule.title, rule.doc.what, rule.doc.why, rule.hint, *rule.detectors, *rule.trips):
        assert text in out
    assert out.index("### What it does") < out.index("### Why is this bad?") < out.index("### Example") < out.index("### Fix")


def test_explain_shows_hint_fields_as_placeholders(capsys: pytest.CaptureFixture[str]) -> None:
    main(["explain", "FDC101"])
    assert "move the <clear>() call before <release>()" in capsys.readouterr().out


def test_explain_lists_every_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain"]) == EXIT_OK
    assert re.findall(r"^(FDC\d{3}) ", capsys.readouterr().out, re.M) == CODES


def test_explain_unknown_code_is_one_line_with_the_near_miss(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "FDC2O1"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err == "fd-conformance explain: error: unknown finding code 'FDC2O1'; fix: did you mean FDC201?\n"
    assert main(["explain", "nonsense"]) == EXIT_USAGE
    assert "fix: run `fd-conformance explain` to list the codes" in capsys.readouterr().err


def test_code_pages_are_generated_from_the_registry() -> None:
    assert (REPO / CODES_DOC).read_text(encoding="utf-8") == codes_markdown(), (
        f"{CODES_DOC} is stale: run `python -m fd_conformance.findings --pages > {CODES_DOC}`"
    )


def test_sarif_rules_link_each_code_to_its_page() -> None:
    from fd_conformance.lint.facts import LintResult
    from fd_conformance.lint.output import CODE_PAGES_URI, to_sarif

    rules = to_sarif(LintResult(findings=[], files_scanned=0))["runs"][0]["tool"]["driver"]["rules"]
    assert rules
    for rule in rules:
        assert rule["helpUri"] == f"{CODE_PAGES_URI}#{rule['id'].lower()}"
        assert f"## {rule['id']}" in rule["help"]["markdown"] and RULES[rule["id"]].hint_shown() in rule["help"]["text"]
    anchors = set(re.findall(r"^## (FDC\d{3})$", codes_markdown(), re.M))
    assert {rule["id"] for rule in rules} <= anchors
