"""Issue 52 ("See"): a failing check's lifecycle trace and its picture.

The trace is cut from real runtime events (torch on CPU, host-emulated graphs, the real lifecycle
recorder and verdict): the failing cycle only, runs collapsed, the step each finding is about
flagged, no object id or address. The picture is its Mermaid sequence diagram; the certificate
holds one per failing check (the first few open, the rest folded), the job summary the certificate.
A real `fd-conformance run` on a mutant shows the flagged step; the docs' pictures match what the
kit draws now (scripts/code_pictures.py); each bundled mutant's picture says what its finding says.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from _helpers import torch_cpu_runtime  # noqa: E402
from _pictures import PICTURES, pictures_session  # noqa: E402
from test_lifecycle import TinyModel  # noqa: E402

from fd_conformance.findings import RULES  # noqa: E402
from fd_conformance.lifecycle import LifecycleRecorder  # noqa: E402
from fd_conformance.report import CheckResult, build_document, format_certificate  # noqa: E402
from fd_conformance.report import lifecycle_picture as picture  # noqa: E402
from fd_conformance.report import lifecycle_trace as trace_mod  # noqa: E402
from fd_conformance.verdict import CheckVerdict  # noqa: E402

pytestmark = pytest.mark.xdist_group("lifecycle_pictures")  # one session of mutants for this module and the render test


@pytest.fixture(scope="module")
def pictures_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return pictures_session(tmp_path_factory)


def _traced(steps: Any) -> tuple[dict[str, Any], CheckVerdict]:
    """Run ``steps(model, rt)`` under a recorder and a trace log, as a check runs; its trace and verdict."""
    rt = torch_cpu_runtime()
    log = trace_mod.TraceLog()
    rt.events.subscribe(log)
    verdict = CheckVerdict("demo", clock=lambda: log.last_seq)
    model = TinyModel(rt)
    with LifecycleRecorder(rt) as recorder:
        steps(model, rt)
    verdict.extend(recorder.findings())
    trace = trace_mod.check_trace(log.events, verdict.findings)
    assert trace is not None
    return trace, verdict


def _mtp_hang_order(model: TinyModel, rt: Any) -> None:
    """The MTP defect: main cleared, every weight released, THEN the draft cleared."""
    model.capture("main")
    model.capture("draft")
    for _ in range(3):
        model.graphs["main"].replay()
    model.graphs["draft"].replay()
    model.clear("main")
    model.release_all()
    model.clear("draft")


def _flagged(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [step for step in trace["steps"] if step["flag"]]


def test_trace_flags_the_release_under_a_live_graph_and_collapses_runs() -> None:
    trace, verdict = _traced(_mtp_hang_order)
    assert [f.code for f in verdict.findings] == ["FDC201"]
    [step] = _flagged(trace)
    # The embedding both graphs captured goes first: the release of main's weights, under draft's live graph.
    assert (step["kind"], step["lane"], step["flag"], step["about"]) == (
        "release",
        "main weights",
        "FDC201",
        ["graph draft-decode-2"],
    )
    assert step["text"] == "release 2 params (embed, main_w)"
    kinds = [(s["kind"], s["lane"], s["count"]) for s in trace["steps"]]
    assert ("replay", "graph main-decode-2", 3) in kinds  # three replays of one graph: one step
    assert trace["lanes"][0] == trace_mod.ENGINE and trace["earlier"] == 0 and trace["later"] == 0
    text = json.dumps(trace)
    assert "0x" not in text and not re.search(r"\d{9,}", text)  # no address, no object id: stable pictures


def test_the_picture_boxes_the_flagged_step_with_its_code() -> None:
    trace, _ = _traced(_mtp_hang_order)
    text = picture.mermaid(trace)
    lines = [line.strip() for line in text.splitlines()]
    ids = {lane: f"L{i}" for i, lane in enumerate(trace["lanes"])}
    box = lines.index(f"rect {picture.FLAG_COLOUR}")
    assert lines[box + 1] == f"L0-x{ids['main weights']}: release 2 params (embed, main_w)"
    assert lines[box + 2] == f"Note over {ids['graph draft-decode-2']},{ids['main weights']}: FDC201: {RULES['FDC201'].title}"
    assert lines[box + 3] == "end"
    # A graph's life is a bar from capture to destroy: opened once, closed once, in that order.
    draft = ids["graph draft-decode-2"]
    assert lines.index(f"activate {draft}") < lines.index(f"deactivate {draft}")
    assert lines.count(f"activate {draft}") == lines.count(f"deactivate {draft}") == 1


def test_only_the_failing_cycle_is_drawn() -> None:
    """A right first cycle, then a release under a live graph: the picture starts at the second capture."""

    def two_cycles(model: TinyModel, rt: Any) -> None:
        model.capture("main")
        model.clear("main")
        model.release_all()
        for name, param in model.params().items():
            rt.restore_parameter(param, torch.full((8, 8), 0.5), name)
        model.capture("main")
        rt.release_parameter(model.main_w, "main_w")
        model.clear("main")

    trace, _ = _traced(two_cycles)
    first = trace["steps"][0]
    assert (first["kind"], first["lane"]) == ("capture", "graph main-decode-2")
    assert trace["earlier"] > 0  # the first cycle: counted, not drawn
    assert [s["kind"] for s in trace["steps"]].count("capture") == 1
    assert _flagged(trace)[0]["text"] == "release 1 param (main_w)"
    assert f"{trace['earlier']} earlier events not shown" in picture.mermaid(trace)


def test_a_long_cycle_is_cut_around_the_flag() -> None:
    def many_steps(model: TinyModel, rt: Any) -> None:
        model.capture("main")
        model.capture("draft")
        for _ in range(trace_mod.STEPS_LIMIT):  # alternating replays: one step each
            model.graphs["main"].replay()
            model.graphs["draft"].replay()
        model.clear("main")
        model.release_all()
        model.clear("draft")

    trace, _ = _traced(many_steps)
    gaps = [s for s in trace["steps"] if s["kind"] == trace_mod.GAP]
    assert gaps and len(trace["steps"]) - len(gaps) <= trace_mod.STEPS_LIMIT
    assert _flagged(trace)[0]["flag"] == "FDC201"  # the cut keeps the step the finding is about
    assert re.fullmatch(r"\d+ steps not shown", gaps[0]["text"])


def test_no_trace_without_an_error_finding() -> None:
    rt = torch_cpu_runtime()
    log = trace_mod.TraceLog()
    rt.events.subscribe(log)
    model = TinyModel(rt)
    with LifecycleRecorder(rt) as recorder:
        model.capture("main")
        model.clear("main")
        model.release_all()
    assert recorder.findings() == []
    assert trace_mod.check_trace(log.events, []) is None  # a passing check carries no trace
    assert trace_mod.check_trace([], recorder.findings()) is None
    assert trace_mod.check_trace(log.events, [], always=True) is not None  # the docs' good twins


def test_findings_made_outside_the_recorder_flag_the_step_they_follow() -> None:
    """A finding the check makes itself (memory, outputs) is stamped with the check's latest event:
    after a clear, the clear's end."""
    from fd_conformance.findings import Location, make_finding

    rt = torch_cpu_runtime()
    log = trace_mod.TraceLog()
    rt.events.subscribe(log)
    verdict = CheckVerdict("clear", clock=lambda: log.last_seq)
    model = TinyModel(rt)
    model.capture("main")
    model.clear("main")
    verdict.add(make_finding("FDC302", "64 bytes still held after clear", Location(obj="main"), blamed="main"))
    trace = trace_mod.check_trace(log.events, verdict.findings)
    assert trace is not None
    last = trace["steps"][-1]
    assert (last["kind"], last["text"], last["flag"]) == ("mark", "main clear_graph_opt_backend:end", "FDC302")


def test_escape_writes_mermaid_syntax_as_entity_codes() -> None:
    assert picture.escape('a;b #c "d" [e] {f} <g>\nh') == "a#59;b #35;c #34;d#34; #91;e#93; #123;f#125; #60;g#62; h"
    trace = {
        "lanes": ["engine", "graph x;y"],
        "alive": {},
        "steps": [{"kind": "capture", "lane": "graph x;y", "text": "capture", "count": 1, "flag": "", "about": []}],
        "earlier": 0,
        "later": 0,
        "later_flags": [],
    }
    assert "participant L1 as graph x#59;y" in picture.mermaid(trace)


def _result(case: str, outcome: str, trace: dict[str, Any] | None, codes: list[str]) -> CheckResult:
    return CheckResult(
        nodeid=f"suite/test_x.py::test_x[{case}-cpu]", case=case, device="cpu", check="weight_cycle", outcome=outcome,
        codes=codes, runtime="torch", graphs_real=False, trace=trace,
    )  # fmt: skip


def test_certificate_has_a_picture_per_failing_check_the_first_few_open() -> None:
    trace, _ = _traced(_mtp_hang_order)
    failing = [_result(f"bad-{i}", "failed", trace, ["FDC201"]) for i in range(picture.PICTURES_OPEN + 2)]
    passing = [_result("good", "passed", None, [])]
    document = build_document([*passing, *failing])
    assert "trace" not in document["results"][0]  # a passing check: no trace in conformance.json
    text = format_certificate(document)
    assert text.count("```mermaid") == len(failing)
    assert text.count("<details><summary>") == len(failing) - picture.PICTURES_OPEN
    assert "`good`" not in text.split("## Lifecycle of each failing check")[1]
    head = text.split("<details>")[0]
    assert head.count("```mermaid") == picture.PICTURES_OPEN and "**`bad-0` [cpu] weight_cycle `test_x`: FDC201**" in head


def test_job_summary_is_appended_only_when_asked_and_never_costs_the_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fd_conformance.cli.job_summary import JOB_SUMMARY_ENV, append_job_summary

    (tmp_path / "certificate.md").write_text("# fd-conformance certificate\n", encoding="utf-8")
    monkeypatch.delenv(JOB_SUMMARY_ENV, raising=False)
    append_job_summary(tmp_path)  # not in a GitHub job: nothing anywhere
    monkeypatch.setenv(JOB_SUMMARY_ENV, str(tmp_path / "missing-dir" / "summary.md"))
    append_job_summary(tmp_path)  # unwritable: one line, no exception
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and JOB_SUMMARY_ENV in err and "fix:" in err
    monkeypatch.setenv(JOB_SUMMARY_ENV, str(tmp_path / "summary.md"))
    append_job_summary(tmp_path)
    assert (tmp_path / "summary.md").read_text() == "# fd-conformance certificate\n\n"


# --- a real run, and the bundled mutants -----------------------------------------------------------
CASE_FILE = """from fd_reference_models.cases import all_cases

CASE = next(c for c in all_cases() if c.name == "mutant-group-shutdown-first")
"""


def test_run_on_a_mutant_draws_the_flagged_step_in_certificate_and_job_summary(tmp_path: Path) -> None:
    """Through the isolation worker and two xdist workers, into conformance.json, results.jsonl,
    certificate.md and the job summary; never into junit.xml."""
    (tmp_path / "case.py").write_text(CASE_FILE, encoding="utf-8")
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step's summary\n", encoding="utf-8")
    out = tmp_path / "out"
    env = {**os.environ, "GITHUB_STEP_SUMMARY": str(summary), "FD_CONFORMANCE_GPU": "0"}
    cmd = [sys.executable, "-m", "fd_conformance.cli", "run", "--model", "case.py:CASE", "--out", str(out), "--device", "cpu",
           "--cycles", "3", "-n", "2", "-q", "--", "-k", "teardown_order"]  # fmt: skip
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    document = json.loads((out / "conformance.json").read_text())
    failed = [r for r in document["results"] if r["outcome"] == "failed"]
    assert failed and all(r.get("trace") for r in failed)
    assert all("trace" not in r for r in document["results"] if r["outcome"] == "passed")
    certificate = (out / "certificate.md").read_text()
    assert certificate.count("```mermaid") == len(failed)
    assert f"FDC202: {picture.escape(RULES['FDC202'].title)}" in certificate
    assert re.search(r"rect rgb.*\n\s+L0-xL\d+: shut down\n\s+Note over L\d+,L\d+: FDC202", certificate)
    assert summary.read_text() == "earlier step's summary\n" + certificate.rstrip("\n") + "\n\n"
    assert "fd_trace" not in (out / "junit.xml").read_text()
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    logged = {line["nodeid"]: line.get("trace") for line in lines if line.get("outcome") == "failed"}
    assert logged == {r["nodeid"]: r["trace"] for r in failed}  # `fd-conformance report` draws them too
    assert "`test_teardown_order[mainOn-draftOn]`: FDC202" in certificate  # the variants read apart


def test_docs_pictures_are_what_the_kit_draws_now(pictures_run: dict[str, Any]) -> None:
    """docs/reference/pictures/ is generated (scripts/code_pictures.py): stale files fail here."""
    made = {p.name: p.read_text() for p in pictures_run["pictures"].glob("FDC*.md")}
    committed = {p.name: p.read_text() for p in PICTURES.glob("FDC*.md")}
    assert made, pictures_run["log"]
    assert made == committed, "docs/reference/pictures/ is stale; fix: python scripts/code_pictures.py"


def test_each_mutant_picture_says_what_its_finding_says(pictures_run: dict[str, Any]) -> None:
    """Every error finding a bundled mutant's check made is on a flagged step of its picture, and
    the graph that step names is the graph the finding names."""
    checked = 0
    for result in pictures_run["document"]["results"]:
        if not result["codes"] or not result.get("trace"):
            continue
        steps = _flagged(result["trace"])
        flagged = {code for step in steps for code in step["flag"].split(", ")} | set(result["trace"]["later_flags"])
        errors = [f for f in result["findings"] if f["severity"] == "error"]
        assert {f["code"] for f in errors} <= flagged, result["nodeid"]
        for finding in errors:
            named = [a for s in steps if finding["code"] in s["flag"] for a in s["about"]]
            if named:  # a lifecycle finding: its graph is a lane the flagged step names
                assert any(repr(lane.removeprefix("graph ")) in finding["message"] for lane in named), (
                    result["nodeid"],
                    named,
                    finding["message"],
                )
        checked += 1
    mutants = {r["case"] for r in pictures_run["document"]["results"] if r["codes"] and r.get("trace")}
    assert checked >= 10 and len(mutants) >= 10, (checked, sorted(mutants))
