"""Issue 51, item 15: a case factory that takes seconds is paid once per check, and the run says so.

Every check builds a fresh model (checks release weights and destroy graphs, so a shared model
would carry one check's damage into the next): the factory's cost cannot be shared, but it must
not be silent. The build time travels with each check (a ``fd_build_s`` user property, through
xdist and isolation workers into results.jsonl); ``run``'s progress line names it and a note at
the end says how much of a case's time its builds took and what to do about it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fd_conformance.cli.progress import BuildCosts, format_line
from fd_conformance.matrix_keys.check_record import CheckRecord

pytest.importorskip("torch")

ACME = Path(__file__).resolve().parent / "fixtures" / "outside_models" / "acme_lm.py"
SLOW_MODEL = f"""
import dataclasses, importlib.util, time
spec = importlib.util.spec_from_file_location("acme_lm", {str(ACME)!r})
acme = importlib.util.module_from_spec(spec)
spec.loader.exec_module(acme)


def slow(runtime):
    time.sleep(1.5)  # a checkpoint read from disk
    return acme.AcmeSubject(runtime)


CASES = [dataclasses.replace(acme.GOOD[0], name="slow-acme", factory=slow)]
"""


def test_a_slow_factory_is_named_on_each_line_and_in_a_note(tmp_path: Path) -> None:
    (tmp_path / "slow_lm.py").write_text(SLOW_MODEL, encoding="utf-8")
    command = [sys.executable, "-m", "fd_conformance.cli", "run", "--model", "slow_lm.py:CASES", "--device", "cpu"]
    proc = subprocess.run(
        [*command, "--out", "r", "--", "-k", "protocol or capture_replay"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in proc.stdout.splitlines() if "slow-acme [cpu]" in line and line.startswith("[")]
    assert len(lines) == 2 and all("(model build 1." in line for line in lines), proc.stdout + proc.stderr
    (note,) = [line for line in proc.stdout.splitlines() if line.startswith("note: slow-acme:")]
    assert "built 2 times (once per check" in note and "functools.cache" in note


def record(case: str, build: float | None, duration: float) -> CheckRecord:
    return CheckRecord(f"t::x[{case}-cpu]", case=case, device="cpu", check="clear", duration=duration,
                       run={} if build is None else {"build_s": build})  # fmt: skip


def test_the_note_is_for_cases_whose_builds_take_most_of_their_time() -> None:
    costs = BuildCosts()
    for _ in range(3):
        costs.add(record("slow", 5.0, 6.0))  # builds are most of it
        costs.add(record("quick", 0.2, 3.0))  # builds are a small part
        costs.add(record("unknown", None, 3.0))  # a record without the fact (an older kit)
    (note,) = costs.notes()
    assert note.startswith("note: slow: the model was built 3 times") and "15.0s of its checks' 18.0s" in note
    assert "(model build" not in format_line(record("quick", 0.2, 3.0), 1, 1)
    assert format_line(record("slow", 5.0, 6.0), 1, 1).endswith("(model build 5.0s)")
