"""Text renderings of a conformance.json document: the fixed-width matrix the terminal shows and
the markdown certificate for a PR comment (bounded in size whatever the run)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fd_conformance.report.lifecycle_picture import pictures_section
from fd_conformance.report.results import FAILED, SKIPPED
from fd_conformance.report.verdicts import CAUGHT, LINE_LIMIT, shorten

CERTIFICATE_LIMIT = 60_000  # characters; GitHub rejects PR comments over 65,536
MESSAGE_LIMIT = 1_200  # a finding's message in the certificate; its fix is never cut


def format_document_matrix(document: Mapping[str, Any]) -> str:
    """The matrix of a conformance.json document: the cells and verdicts it holds, so every route
    (pytest's summary, `run`, `report`) prints the verdict computed once, placeholders included."""
    checks = list(dict.fromkeys(k for c in document["cases"] for k in c["checks"]))
    header = ["case [device, graphs]", *checks, "verdict"]
    table = [header]
    for c in document["cases"]:
        cells = [c["checks"].get(check, {}).get("cell", "-") for check in checks]
        table.append([f"{c['name']} [{c['device']}, {c['graphs']}]", *cells, c["verdict"]])
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = ["  ".join(text.ljust(widths[i]) for i, text in enumerate(line)).rstrip() for line in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _line(text: str) -> str:
    return text if len(text) <= LINE_LIMIT else text[: LINE_LIMIT - 3] + "..."


def _fit(sections: list[tuple[list[str], list[str], str]], budget: int) -> list[str]:
    """Lay out (heading lines, item lines, overflow text) sections within ``budget`` characters:
    each section gets an even share of what is left (what one leaves unused goes to the next);
    items that do not fit are counted in one overflow line ("{n}" in the text)."""
    out: list[str] = []
    left = budget
    for index, (heading, items, overflow) in enumerate(sections):
        share = left // (len(sections) - index)
        used = sum(len(h) + 1 for h in heading)
        kept: list[str] = []
        reserve = len(overflow) + 12  # room for the overflow line with its count
        for position, item in enumerate(items):
            cost = len(item) + 1
            last = position == len(items) - 1
            if used + cost + (0 if last else reserve) > share:
                break
            kept.append(item)
            used += cost
        if len(kept) < len(items):
            kept.append(overflow.format(n=len(items) - len(kept)))
            used += len(kept[-1]) + 1
        if items or heading:
            out += heading + kept
        left -= used
    return out


def format_certificate(document: Mapping[str, Any]) -> str:
    """A markdown certificate for a PR comment, at most CERTIFICATE_LIMIT characters whatever the
    run: environment, the summary table (one row per case and device), findings grouped by code
    (each with its fix and the rows it hit), a lifecycle picture per failing check (the first few
    open, the rest folded), failures without a code with their reason, missed
    mutants, and a pointer to conformance.json, which keeps every detail."""
    lines = _certificate_head(document)
    footer = ["", "Details: every result with its findings, messages and fixes is in `conformance.json` (`results`)."]
    pictures = pictures_section(document["results"])  # the lifecycle each failing check saw
    sections = [_summary_section(document), _findings_section(document), pictures, *_reason_sections(document)]
    sections.append(_mutants_section(document))
    fixed = sum(len(text) + 1 for text in lines + footer)
    body = _fit(sections, CERTIFICATE_LIMIT - fixed - 1)
    text = "\n".join(lines + body + footer) + "\n"
    assert len(text) <= CERTIFICATE_LIMIT, len(text)  # _fit's budget arithmetic is the guarantee
    return text


#: One certificate section: heading lines, item lines (cut to fit), and the overflow line's text.
Section = tuple[list[str], list[str], str]


def _certificate_head(document: Mapping[str, Any]) -> list[str]:
    """Title, an INTERRUPTED/INCOMPLETE banner, the kit and runtimes, the overall result, and the
    host-emulation caveat: the lines that are never cut."""
    env = document["environment"]
    run = document.get("run", {"status": "finished", "reason": "", "not_run": []})
    lines = ["# fd-conformance certificate", ""]
    if run["status"] != "finished":
        title = "INTERRUPTED" if run["status"] == "interrupted" else "INCOMPLETE"
        why = f" ({run['reason']})" if run["reason"] else ""
        left_out = len(run.get("deselected", []))
        also = f" and {left_out} were deselected" if left_out else ""
        lines += [
            f"> **{title}**{why}: {len(run['not_run'])} planned check(s) did not run{also}; rows that miss one are `incomplete`.",
            "",
        ]
    elif run["reason"]:  # a finished session that certified nothing says why (build_document's nothing_certified)
        allowed = " (allowed by --allow-empty)" if document["exit_code"] == 0 else ""
        lines += [_line(f"> **NOTHING CERTIFIED**{allowed}: {run['reason']}."), ""]
    lines.append(_line(f"- kit: fd-conformance {env['kit_version']} (Python {env['python']}, {env['platform']})"))
    for rt in env["runtimes"]:
        lines.append(
            _line(f"- runtime: {rt['name']} {rt['version']} on {rt['device']} ({rt['device_name']}), graphs: {rt['graphs']}")
        )
    if not env["runtimes"]:
        # Checks can end (skipped, interrupted) before any started a runtime: say that, not "none ran".
        ended = sum(int(n) for n in document["summary"].values())
        lines.append(
            f"- runtime: none recorded ({ended} check(s) ended, none on a runtime)" if ended else "- runtime: none (no check ran)"
        )
    lines.append(f"- generated: {document['generated_at']}")
    overall = {0: "PASS", 3: "INCOMPLETE", 4: "NOTHING CERTIFIED"}.get(document["exit_code"], "FAIL")
    verdict_counts: dict[str, int] = {}
    for c in document["cases"]:
        verdict_counts[c["verdict"]] = verdict_counts.get(c["verdict"], 0) + 1
    rows_text = ", ".join(f"{n} {v}" for v, n in verdict_counts.items()) or "no rows"
    tests_text = ", ".join(f"{k} {v}" for k, v in document["summary"].items())
    lines.append(f"- result: **{overall}** (rows: {rows_text}; tests: {tests_text})")
    if any(c["graphs"] != "real" for c in document["cases"]):
        lines += [
            "",
            "> Rows marked host-emulated ran on CPU with emulated graphs: they certify interface and ordering,",
            "> not GPU memory behaviour. Run `fd-conformance run` on a CUDA host for real graphs.",
        ]
    return lines


def _summary_section(document: Mapping[str, Any]) -> Section:
    """The table: one row per case and device, a column per check, the verdict."""
    checks = list(dict.fromkeys(k for c in document["cases"] for k in c["checks"]))
    columns = ["case", "device", "graphs", *checks, "verdict"]
    head = ["", "## Summary", ""]
    if document["cases"]:
        head += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    else:
        head.append("No rows: no model case was selected, so nothing was checked.")
    table = []
    for c in document["cases"]:
        cells = [c["checks"].get(k, {}).get("cell", "-") for k in checks]
        mark = "mutant " if c["mutant"] else ""
        contract = c.get("contract", "recapture")  # the weight-update contract the row was judged by
        judged = f" ({contract})" if contract != "recapture" else ""
        table.append(
            _line(
                f"| {mark}`{c['name']}`{judged} | {c['device']} | {c['graphs']} | "
                + " | ".join(cells)
                + f" | **{c['verdict']}** |"
            )
        )
    return head, table, "| ... {n} more rows: see conformance.json |"


def _findings_section(document: Mapping[str, Any]) -> Section:
    """Findings grouped by code: the first one's message and its fix, and the rows the code hit."""
    by_code: dict[str, list[tuple[Mapping[str, Any], Mapping[str, Any]]]] = {}
    for r in document["results"]:
        for f in r["findings"]:
            by_code.setdefault(f["code"], []).append((r, f))
    items: list[str] = []
    for code in sorted(by_code):
        hits = by_code[code]
        first = hits[0][1]
        rows = list(dict.fromkeys(f"`{r['case']}` [{r['device']}] {r['check']}" for r, _ in hits))
        shown = ", ".join(rows[:5]) + (f" and {len(rows) - 5} more" if len(rows) > 5 else "")
        # The message may be long (a traceback); the fix is what the reader acts on, so it is never cut.
        message = shorten(first["message"], MESSAGE_LIMIT)
        items.append(f"- **{code}** ({first['severity']}, {len(hits)}x): {message} (fix: {first['hint']})")
        items.append(_line(f"  - in {shown}"))
    return (["", "## Findings by code", ""] if items else [], items, "- ... {n} more lines: see conformance.json")


def _reason_sections(document: Mapping[str, Any]) -> list[Section]:
    """Failures without a code, skips, checks not run and checks deselected, each with its reason."""
    run = document.get("run", {"status": "finished", "reason": "", "not_run": []})
    # One line per distinct reason: a factory that raises fails every check of its row alike.
    reasons = _grouped_reasons(r for r in document["results"] if r["outcome"] == FAILED and not r["codes"])
    skips = _grouped_reasons(r for r in document["results"] if r["outcome"] == SKIPPED)
    not_run = [_line(f"- `{nodeid}`") for nodeid in run["not_run"]]
    deselected = [_line(f"- `{nodeid}`") for nodeid in run.get("deselected", [])]
    return [
        (["", "## Failures without a finding code", ""] if reasons else [], reasons, "- ... {n} more: see conformance.json"),
        (["", "## Skipped, and why", ""] if skips else [], skips, "- ... {n} more: see conformance.json"),
        (["", "## Not run", ""] if not_run else [], not_run, "- ... {n} more: see conformance.json (run.not_run)"),
        (
            ["", "## Deselected", "", "Checks these rows owe that the selection (-k, -m) left out; each such row is incomplete:"]
            if deselected
            else [],
            deselected,
            "- ... {n} more: see conformance.json (run.deselected)",
        ),
    ]


def _mutants_section(document: Mapping[str, Any]) -> Section:
    """How many mutants were caught exactly, and each one that was not, with what it reported."""
    missed = [
        _line(
            f"- `{c['name']}` [{c['device']}]: expected {', '.join(c['expected_findings'])}; "
            f"observed {', '.join(c['observed_findings']) or 'none'} -> {c['verdict']}"
        )
        for c in document["cases"]
        if c["mutant"] and c["verdict"] != CAUGHT
    ]
    if not any(c["mutant"] for c in document["cases"]):
        return [], [], "- ... {n} more: see conformance.json"
    caught = sum(1 for c in document["cases"] if c["mutant"] and c["verdict"] == CAUGHT)
    head = f"{caught} caught exactly; not caught:" if missed else f"{caught} caught exactly, every one."
    return ["", "## Mutants", "", head], missed, "- ... {n} more: see conformance.json"


def _grouped_reasons(results: Iterable[Mapping[str, Any]]) -> list[str]:
    """One certificate line per distinct reason, naming the checks it hit (a factory that raises
    fails a whole row alike; "no draft model" skips several columns)."""
    by_reason: dict[str, list[str]] = {}
    for r in results:
        reason = (r["message"] or "no reason given").removeprefix("Skipped: ")
        by_reason.setdefault(reason, []).append(f"`{r['case']}` [{r['device']}] {r['check']}")
    lines = []
    for reason, hits in by_reason.items():
        places = list(dict.fromkeys(hits))
        shown = ", ".join(places[:3]) + (f" and {len(places) - 3} more" if len(places) > 3 else "")
        count = f" ({len(hits)}x)" if len(hits) > 1 else ""
        lines.append(_line(f"- {shown}{count}: {reason}"))
    return lines
