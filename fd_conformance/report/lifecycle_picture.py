"""A failing check's lifecycle trace as a picture: a Mermaid sequence diagram, and the
certificate's section of them.

Mermaid because the reader is already where it renders: GitHub draws a ```` ```mermaid ```` block
in pull-request comments, job summaries and markdown files. One participant per lane of the trace
(:mod:`.lifecycle_trace`): the engine sends every call; a graph's life is an activation bar from
capture to destroy; replays, releases and shutdowns are messages to their lane; the step a finding
is about sits in a red box with a note naming the code and its title.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from typing import Any

from fd_conformance.findings import RULES
from fd_conformance.report.lifecycle_trace import ENGINE, GAP

FLAG_COLOUR = "rgb(255, 228, 225)"  # the box around a flagged step: a pale red that keeps text readable
#: Pictures shown open in the certificate; later ones are folded in <details>.
PICTURES_OPEN = 3
#: The most pictures one certificate holds (a page a reviewer reads in a minute); conformance.json has every trace.
PICTURES_LIMIT = 12
# Characters Mermaid reads as syntax inside a message, a note or a participant's name; written as
# its entity codes (#59; for ';'), which it shows as the character.
ESCAPED = frozenset(';#<>"{}[]%`\\')
ARROWS = {
    "capture": "->>",
    "replay": "->>",
    "restore": "->>",
    "create": "->>",
    "destroy": "-x",
    "release": "-x",
    "shutdown": "-x",
}


def escape(text: str) -> str:
    """``text`` as Mermaid shows it verbatim: one line, syntax characters as entity codes."""
    flat = " ".join(text.split())
    return "".join(f"#{ord(ch)};" if ch in ESCAPED else ch for ch in flat)


def code_note(codes: Sequence[str]) -> str:
    """``FDC201: graph alive when a parameter it captured is released``, one line per code."""
    return "<br/>".join(escape(f"{code}: {RULES[code].title}" if code in RULES else code) for code in codes)


class _Diagram:
    """The diagram's lines, and how many activations each lane has open (Mermaid refuses to close
    a bar that is not open)."""

    def __init__(self, lanes: Sequence[str]) -> None:
        self.ids = {lane: f"L{index}" for index, lane in enumerate(lanes)}
        self.lines = ["sequenceDiagram"] + [f"    participant {self.ids[lane]} as {escape(lane)}" for lane in lanes]
        self.open: dict[str, int] = {}

    def add(self, line: str) -> None:
        self.lines.append(f"    {line}")

    def move(self, lane: str, delta: int) -> None:
        """Open (positive) or close (negative) ``delta`` activation bars on ``lane``."""
        if delta < 0:
            delta = -min(-delta, self.open.get(lane, 0))
        for _ in range(abs(delta)):
            self.add(f"{'activate' if delta > 0 else 'deactivate'} {self.ids[lane]}")
        self.open[lane] = self.open.get(lane, 0) + delta

    def span(self, lanes: Sequence[str]) -> str:
        """``L1,L3``: the participants from the leftmost to the rightmost of ``lanes``."""
        order = sorted({self.ids[lane] for lane in lanes}, key=lambda lane_id: int(lane_id[1:]))
        return order[0] if len(order) == 1 else f"{order[0]},{order[-1]}"

    def step(self, step: Mapping[str, Any]) -> None:
        kind, lane, text = step["kind"], step["lane"], escape(step["text"])
        if kind == GAP:
            self.add(f"Note over {self.ids[ENGINE]}: {text}")
            for shifted, delta in step.get("shift", {}).items():
                self.move(shifted, int(delta))
            return
        if kind == "mark":
            self.add(f"Note over {self.ids[ENGINE]}: {text}")
            return
        self.add(f"{self.ids[ENGINE]}{ARROWS[kind]}{self.ids[lane]}: {text}")
        if kind == "capture":
            self.move(lane, int(step.get("count", 1)))
        elif kind == "destroy":
            self.move(lane, -int(step.get("count", 1)))


def mermaid(trace: Mapping[str, Any]) -> str:
    """The Mermaid ``sequenceDiagram`` of a trace (:func:`.lifecycle_trace.check_trace`)."""
    diagram = _Diagram(trace["lanes"])
    if trace.get("earlier"):
        diagram.add(f"Note over {diagram.ids[ENGINE]}: {trace['earlier']} earlier events not shown")
    for lane, count in trace.get("alive", {}).items():
        diagram.move(lane, int(count))
    for step in trace["steps"]:
        codes = [code for code in step.get("flag", "").split(", ") if code]
        if not codes:
            diagram.step(step)
            continue
        diagram.add(f"rect {FLAG_COLOUR}")
        diagram.step(step)
        diagram.add(f"Note over {diagram.span([step['lane'], *step.get('about', [])])}: {code_note(codes)}")
        diagram.add("end")
    if trace.get("later"):
        flags = trace.get("later_flags") or []
        also = f" (flagged {', '.join(flags)})" if flags else ""
        diagram.add(f"Note over {diagram.ids[ENGINE]}: {escape(str(trace['later']) + ' later events not shown' + also)}")
    return "\n".join(diagram.lines) + "\n"


def picture_block(trace: Mapping[str, Any]) -> str:
    """The picture as a markdown code block GitHub renders."""
    return f"```mermaid\n{mermaid(trace)}```"


def _test_of(result: Mapping[str, Any]) -> str:
    """``test_teardown_order[mainOn-draftOn]``: the result's test, its case and device left out of
    its parameters (the title names them), so two variants of one check read apart."""
    name, _, params = str(result["nodeid"]).rpartition("::")[2].partition("[")
    variant = params.rstrip("]").removeprefix(f"{result['case']}-{result['device']}").lstrip("-")
    return f"{name}[{variant}]" if variant else name


def pictures_section(results: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str], str]:
    """The certificate's pictures: one per failed check that has a trace, the first
    :data:`PICTURES_OPEN` open, the rest folded; (heading lines, items, overflow line)."""
    traced = [r for r in results if r["outcome"] == "failed" and r.get("trace")]
    items: list[str] = []
    for index, result in enumerate(traced[:PICTURES_LIMIT]):
        title = f"`{result['case']}` [{result['device']}] {result['check']} `{_test_of(result)}`: {', '.join(result['codes'])}"
        block = picture_block(result["trace"])
        if index < PICTURES_OPEN:
            items.append(f"**{title}**\n\n{block}\n")
        else:
            summary = re.sub(r"`([^`]*)`", lambda code: f"<code>{html.escape(code.group(1))}</code>", title)  # HTML: no markdown
            items.append(f"<details><summary>{summary}</summary>\n\n{block}\n\n</details>\n")
    if not items:
        return [], [], ""
    heading = [
        "",
        "## Lifecycle of each failing check",
        "",
        "The steps of the cycle each check failed in; the red box is the step its finding is about.",
        "",
    ]
    left = len(traced) - len(items)
    if left:
        items.append(f"... {left} more pictures: see conformance.json (`results[].trace`)")
    return heading, items, "... {n} more pictures: see conformance.json (`results[].trace`)"
