"""Live progress of ``fd-conformance run``: one line per check as it ends, and a bar on a terminal.

The source is the results JSONL the pytest child appends to (one fsynced line per finished test,
the plan line once collection is final), not pytest's own output: it is the same stream a later
``fd-conformance report`` reads, it works through xdist and isolation workers alike, and a line
printed here is a result that survives an interruption.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from fd_conformance.isolation.results import PLAN_KIND
from fd_conformance.matrix_keys.check_record import CheckRecord, is_result_line

BAR_WIDTH = 24
# A check's line names its model build from this many seconds on (the factory runs once per check).
SHOWN_BUILD_S = 1.0
REASON_WIDTH = 160  # a failure's reason, on the line of its check
# A record's outcomes (and the caught-mutant reading of a skip carrying codes) as shown.
OUTCOME_WORDS = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP", "hang": "HANG", "crash": "CRASH"}


def wants_bar(stream: TextIO, environ: dict[str, str] | None = None) -> bool:
    """A redrawn bar only on an interactive terminal; CI logs (CI=true) and pipes get plain lines."""
    env = os.environ if environ is None else environ
    if env.get("CI", "").lower() in ("1", "true", "yes"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def outcome_word(record: CheckRecord) -> str:
    if record.outcome == "skipped" and record.expected and record.codes:
        return "CAUGHT"  # the plugin turns a caught mutant's failure into a skip carrying its codes
    return OUTCOME_WORDS.get(record.outcome, record.outcome.upper())


def format_line(record: CheckRecord, done: int, total: int | None) -> str:
    """``[ 3/65] FAIL  torch-glm4 [cpu] clear  2.0s  FDC203 graph 'main:4' alive after clear``."""
    width = len(str(total)) if total else 1
    count = f"[{done:>{width}}/{total}]" if total else f"[{done}]"
    where = f"{record.case or record.nodeid}"
    if record.device:
        where += f" [{record.device}]"
    keys = {"nodeid": record.nodeid, "case": record.case, "device": record.device, "check": record.check}
    line = f"{count} {outcome_word(record):<6} {where} {check_label(keys)}  {record.duration:.1f}s"
    build = float(record.run.get("build_s", 0.0))
    if build >= SHOWN_BUILD_S:
        line += f" (model build {build:.1f}s)"
    if record.outcome in ("failed", "hang", "crash") and record.reason:
        line += "  " + _one_line(record.reason, REASON_WIDTH)
    return line


def check_label(test: Mapping[str, Any]) -> str:
    """The matrix column of a test (its nodeid, case, device and check keys), plus what tells its
    tests apart: ``clear[before_capture_and_twice]``, ``teardown_order[mainOff-draftOn]``."""
    check = str(test.get("check") or "")
    nodeid = str(test["nodeid"])
    name, _, params = nodeid.rpartition("::")[2].partition("[")
    rest = name.removeprefix("test_").removeprefix(check).strip("_")
    case_device = f"{test.get('case')}-{test.get('device')}"
    variant = params.rstrip("]").removeprefix(case_device).strip("-") if params.rstrip("]").startswith(case_device) else ""
    label = "-".join(part for part in (rest, variant) if part)
    if not check:
        return name
    return f"{check}[{label}]" if label else check


def _one_line(text: str, width: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 3] + "..."


class Progress:
    """Tails the results file and prints what is new. ``quiet`` prints nothing (``-q``)."""

    def __init__(self, path: Path, stream: TextIO | None = None, quiet: bool = False, bar: bool | None = None) -> None:
        self.path = path
        self.stream = stream if stream is not None else sys.stdout
        self.quiet = quiet
        self.bar = wants_bar(self.stream) if bar is None else bar
        self.offset = 0
        self.pending = b""
        self.planned: set[str] = set()
        self.done: set[str] = set()
        self.started = time.monotonic()
        self.bar_shown = False
        self.last_bar = ""
        self.builds = BuildCosts()

    @property
    def total(self) -> int | None:
        return len(self.planned) or None

    def poll(self) -> None:
        """Read the lines appended since the last poll; print one per finished test."""
        try:
            with self.path.open("rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except FileNotFoundError:
            chunk = b""
        self.offset += len(chunk)
        data = self.pending + chunk
        *lines, self.pending = data.split(b"\n")  # the last piece may be a line still being written
        for raw in lines:
            self._line(raw)
        self._draw_bar()

    def _line(self, raw: bytes) -> None:
        try:
            data = json.loads(raw)
        except ValueError:
            return  # a torn line: the report says so; progress just goes on
        if isinstance(data, dict) and data.get("kind") == PLAN_KIND:
            # Deselected checks are in the plan (their rows owe them) but will never run: not counted.
            self.planned.update(t["nodeid"] for t in data.get("tests", []) if not t.get("deselected"))
            return
        if not is_result_line(data) or data["nodeid"] in self.done:
            return  # a session line
        record = CheckRecord.from_line(data)
        self.done.add(record.nodeid)
        self.builds.add(record)
        self._print(format_line(record, len(self.done), self.total))

    def _print(self, text: str) -> None:
        if self.quiet:
            return
        if self.bar_shown:
            self.stream.write("\r\033[K")  # clear the bar; it is redrawn under the new line
            self.bar_shown = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def _draw_bar(self) -> None:
        if self.quiet or not self.bar:
            return
        elapsed = time.monotonic() - self.started
        total = self.total
        if total:
            filled = int(BAR_WIDTH * min(len(self.done), total) / total)
            text = f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {len(self.done)}/{total} checks, {elapsed:.0f}s"
        else:
            text = f"collecting the suites... {elapsed:.0f}s"
        if self.bar_shown and text == self.last_bar:
            return  # redrawn only when it changes (the seconds tick): a terminal log stays small
        self.stream.write("\r\033[K" + text)
        self.stream.flush()
        self.bar_shown, self.last_bar = True, text

    def finish(self) -> None:
        """Last read, the bar removed so the matrix starts on a clean line, and a note for a case
        whose model builds took most of its checks' time."""
        self.poll()
        if self.bar_shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.bar_shown = False
        for note in self.builds.notes():
            self._print(note)


class BuildCosts:
    """Per case: how often its factory ran and how long that took, against its checks' time.

    Every check builds a fresh model (checks release weights and destroy graphs, so a shared one
    would carry one check's damage into the next): a factory that takes a minute is paid once per
    check. Said once per case, so the author sees where the time went and can cache what the
    factory loads."""

    def __init__(self) -> None:
        self.cases: dict[str, list[float]] = {}  # case -> [builds, build seconds, check seconds]

    def add(self, record: CheckRecord) -> None:
        build = record.run.get("build_s")
        if record.case and build is not None:
            totals = self.cases.setdefault(record.case, [0, 0.0, 0.0])
            totals[0] += 1
            totals[1] += float(build)
            totals[2] += record.duration

    def notes(self) -> list[str]:
        return [
            f"note: {case}: the model was built {int(builds)} times (once per check, each check needs a fresh one), "
            f"{built:.1f}s of its checks' {spent:.1f}s; make the factory cheaper to call again (load the "
            "checkpoint once per process, e.g. a functools.cache'd loader, and build the modules from it)"
            for case, (builds, built, spent) in self.cases.items()
            if builds > 1 and built >= SHOWN_BUILD_S and built * 2 >= spent
        ]
