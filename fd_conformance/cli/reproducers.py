"""OUT/repro/: after a run, one reproducer per check that found a defect, listed in the certificate.

Written from the run's own conformance.json (which checks failed, or caught a mutant, with what
codes) and results.jsonl (each isolated check's watchdog deadline), once the session is judged:
a reproducer re-runs what the report says. The earlier run's repro/ went to previous/ with its
reports (cli/outdir.py), so the folder holds this run's reproducers only.

A check that is no shipped suite check (a test of the user's own passed after ``--``) gets no
file; the certificate's list says so. Warnings never fail a check, so they get none either.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fd_conformance.cli.outdir import REPRO_DIR, RESULTS_NAME

DEFECT_OUTCOMES = ("failed", "xfailed")  # a failed check, or a mutant's check that caught its defect
SHOWN = 5  # reproducers listed in the certificate before the rest is folded
LISTED = 100  # ... and listed at all (a certificate is kept to a page; repro/ holds every one)
HOW_TO = "docs/how-to/replay-a-failure.md"


@dataclass(frozen=True)
class RunFacts:
    """How the run loaded its cases, as a reproducer must load them again."""

    specs: list[str]  # absolute (cli.pytest_command.absolute_spec)
    include_mutants: bool
    cycles: int
    path: list[str]  # the child's PYTHONPATH entries, absolute, in order


@dataclass(frozen=True)
class Listed:
    """One line of the certificate's list: a reproducer written, or why none was."""

    result: Mapping[str, Any]
    file: str | None  # relative to OUT
    why_none: str = ""

    def line(self) -> str:
        row = f"`{self.result['case']}` [{self.result['device']}] {self.result['check']}"
        codes = ",".join(self.result.get("codes") or []) or "no finding code"
        if self.file is None:
            return f"- {row} ({codes}): no reproducer: {self.why_none}"
        return f"- `{self.file}`: {row} {codes}"


def run_facts(specs: Sequence[str], include_mutants: bool, cycles: int, pythonpath: str) -> RunFacts:
    entries = [str(Path(entry).resolve()) for entry in pythonpath.split(os.pathsep) if entry]
    return RunFacts(list(specs), include_mutants, cycles, list(dict.fromkeys(entries)))


def write_reproducers(out: Path, facts: RunFacts, quiet: bool = False) -> list[Listed]:
    """Write OUT/repro/ for the run's checks that found a defect and list them in certificate.md;
    the listed entries ([] when every check passed, or the run wrote no conformance.json). A
    file system error is reported on stderr: the run's verdict stands without them."""
    from fd_conformance.replay.script import Reproduction, file_name, script_text
    from fd_conformance.replay.target import suite_module
    from fd_conformance.report import CheckResult
    from fd_conformance.report.verdicts import result_failure_reason

    try:
        document = json.loads((out / "conformance.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    defects = [r for r in document.get("results", []) if r.get("outcome") in DEFECT_OUTCOMES]
    if not defects:
        return []
    deadlines = _deadlines(out / RESULTS_NAME)
    folder = out / REPRO_DIR
    listed: list[Listed] = []
    try:
        folder.mkdir()  # the earlier run's went to previous/ with its reports (outdir.keep_previous)
        for result in defects:
            if suite_module(result["nodeid"]) is None:
                listed.append(Listed(result, None, "not a check of the shipped suites"))
                continue
            name = file_name(result["case"], result["device"], result["nodeid"])
            repro = Reproduction(
                case=result["case"],
                device=result["device"],
                nodeid=result["nodeid"],
                check=result["check"],
                specs=facts.specs,
                include_mutants=facts.include_mutants,
                cycles=facts.cycles,
                timeout=deadlines.get(result["nodeid"]),
                path=facts.path,
                codes=list(result.get("codes") or []),
                reason=result_failure_reason(CheckResult.from_dict(result)),
            )
            (folder / name).write_text(script_text(repro, str(folder / name)), encoding="utf-8")
            listed.append(Listed(result, f"{REPRO_DIR}/{name}"))
        _list_in_certificate(out / "certificate.md", listed)
    except OSError as err:
        print(f"fd-conformance run: could not write the reproducers in {folder} ({err.strerror})", file=sys.stderr)
        return listed
    written = [entry.file for entry in listed if entry.file is not None]
    if written and not quiet:
        print(f"  {folder}/ ({len(written)} reproducer(s), e.g. python {out / written[0]})")
    return listed


def _deadlines(results_file: Path) -> dict[str, float]:
    """Each isolated check's watchdog deadline, from the run's results file ({} when unreadable)."""
    from fd_conformance.errors import UsageError
    from fd_conformance.isolation.results import read_results

    try:
        records = read_results(results_file)
    except UsageError:
        return {}
    return {str(r["nodeid"]): float(r["deadline_s"]) for r in records if "deadline_s" in r}


def certificate_section(listed: Sequence[Listed]) -> str:
    """The certificate's list of reproducers: the first few shown, the rest folded."""
    lines = [entry.line() for entry in listed[:LISTED]]
    if len(listed) > LISTED:  # the certificate stays a page: the folder holds them all
        lines.append(f"- ... and {len(listed) - LISTED} more in `{REPRO_DIR}/`")
    head = [
        "## Reproducers",
        "",
        f"Each check that found a defect re-runs alone, without pytest: `python repro/<file>` prints its findings and "
        f"exits 1 while the defect is there, 0 once it is fixed ({HOW_TO}).",
        "",
        *lines[:SHOWN],
    ]
    if len(lines) > SHOWN:
        head += ["", f"<details><summary>{len(lines) - SHOWN} more</summary>", "", *lines[SHOWN:], "", "</details>"]
    return "\n".join(head) + "\n"


def _list_in_certificate(certificate: Path, listed: Sequence[Listed]) -> None:
    if not certificate.is_file():
        return
    text = certificate.read_text(encoding="utf-8")
    certificate.write_text(text.rstrip("\n") + "\n\n" + certificate_section(listed), encoding="utf-8")
