"""The five text tables ``fd-conformance fastdeploy`` prints, one printer per table, and the
stand-ins the bridge used while importing the tree.

Apart from the command because they read only the bridges' reports (duck-typed: nothing here
imports a bridge or FastDeploy) and change with what a reader needs to see, not with how the
tables are run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, TextIO


def _codes(findings: Sequence[Any]) -> str:
    counts = Counter(f.code for f in findings)
    return ", ".join(f"{code} x{n}" if n > 1 else code for code, n in sorted(counts.items())) or "-"


def _table(out: TextIO, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    out.write("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n")
    for row in rows:
        out.write("| " + " | ".join(cell.replace("|", "/") for cell in row) + " |\n")


def _section(out: TextIO, title: str, rep: Any) -> bool:
    """The table's heading; False (after the error line) when the table could not run."""
    out.write(f"\n## {title}\n")
    if rep.error:
        out.write(f"ERROR {rep.error}\n")
    return not rep.error


def print_config(out: TextIO, rep: Any, verbose: bool) -> None:
    if not _section(out, f"1. Config (C6) on the real FDConfig ({rep.where}, current_platform patched to CUDA)", rep):
        return
    out.write(
        f"{rep.built} configs built by FastDeploy, {rep.rejected} refused by it"
        f"{' (first: ' + rep.first_rejection + ')' if rep.rejected else ''}; {rep.seconds:.1f} s\n"
    )
    _table(
        out,
        ("code", "severity", "verdict", "minimal failing raw config"),
        [
            (
                r.code,
                r.severity,
                "VIOLATED" if r.minimal and r.severity == "error" else "WARNING" if r.minimal else "holds",
                r.minimal or "-",
            )
            for r in rep.rows
        ],
    )
    for r in rep.rows:
        if r.minimal and (verbose or r.severity == "error"):
            out.write(f"  {r.code}: {r.message}\n")


def print_models(out: TextIO, rep: Any, verbose: bool) -> None:
    if not _section(out, f"2. Protocol on every registered model class ({rep.where})", rep):
        return
    out.write(
        f"{len(rep.rows)} wrapper classes from {rep.modules} modules, {len(rep.import_failures)} module(s) "
        f"failed to import; {rep.violations} wrapper(s) violate the protocol\n"
    )
    _table(
        out,
        ("wrapper", "class", "verdict", "findings"),
        [(r.name, r.qualname, "FAIL" if r.is_error else "ok", _codes(r.findings)) for r in rep.rows],
    )
    for r in rep.rows:
        for f in r.findings:
            if verbose or f.is_error:
                out.write(f"  {r.name}: {f.code} {f.message}\n")
    if rep.import_failures:
        _table(out, ("module that failed to import", "error"), sorted(rep.import_failures.items()))


def print_runner(out: TextIO, rep: Any, verbose: bool) -> None:
    doors = " / ".join(dict.fromkeys(r.method for r in rep.rows)) or "clear_parameters / update_parameters"
    if not _section(out, f"3. Runner teardown order on the real {rep.where}: {doors}", rep):
        return
    out.write(f"{len(rep.rows)} runs over recorded stand-ins (compiled ops: fd-conformance import shim)\n")
    _table(
        out,
        ("use_cudagraph", "draft_model_use_cudagraph", "spec method", "method", "verdict", "findings"),
        [
            (
                str(r.combo.use_cudagraph),
                str(r.combo.draft_model_use_cudagraph),
                r.combo.spec_method or "None",
                r.method,
                "n/a" if r.skipped else "ERROR" if r.error else "FAIL" if r.findings else "ok",
                r.skipped or r.error or _codes(r.findings),
            )
            for r in rep.rows
        ],
    )
    shown: set[tuple[str, str]] = set()
    for r in rep.rows:
        for f in _unshown(r, shown, verbose):
            out.write(f"  [{r.combo.label()} {r.method}] {f.code} {f.message}\n")
        if r.findings and (verbose or len(shown) <= 4):
            out.write(f"    calls: {' -> '.join(r.calls)}\n")


def _unshown(row: Any, shown: set[tuple[str, str]], verbose: bool) -> list[Any]:
    """The row's findings to print: every one when verbose, else the first of each (method, code)."""
    fresh = []
    for finding in row.findings:
        if verbose or (row.method, finding.code) not in shown:
            shown.add((row.method, finding.code))
            fresh.append(finding)
    return fresh


def print_stand_ins(out: TextIO, env: Any) -> None:
    """What the bridge stood in for while importing this tree: the checks ran without these, so a
    reader knows what was not real (a name FastDeploy used at run time would have stopped the run)."""
    out.write("\n## Stand-ins (imported by FastDeploy, never run by the checks)\n")
    ops = sorted(set(env.ops.imported))
    out.write(f"- {env.ops.__name__} (compiled CUDA ops): {len(ops)} name(s) imported, none called\n")
    for record in env.stand_ins:
        out.write(f"- {record.describe()}\n")


def print_wrappers(out: TextIO, rep: Any, verbose: bool) -> None:
    if not _section(
        out, f"4. Real wrappers: built on CPU, graphs recorded in their backends, their own clear called ({rep.where})", rep
    ):
        return
    shared = rep.shared_raises
    own = sum(r.verdict == "FAIL" for r in rep.rows)
    out.write(
        f"{len(rep.rows)} wrappers: after capture {sum(r.verdict == 'ok' for r in rep.rows)} ok, {own} violate, "
        f"{rep.not_checked} not checked (not built on CPU or could not run: each row says why); before any capture: "
        f"{len(shared)} raise(s), each counted once by where it is raised, reached by "
        f"{sum(len(g.wrappers) for g in shared)} wrapper(s)\n"
    )
    cells = {name: group.cell() for group in shared for name in group.wrappers}
    _table(
        out,
        ("wrapper", "clear before capture", "verdict (after capture)", "findings", "graphs recorded in", "why / what"),
        [
            (
                r.name,
                cells.get(r.name, "ok" if r.cleared_before_capture else "-"),
                r.verdict,
                _codes(r.findings),
                f"{r.graphs} in {', '.join(r.backends)}" if r.graphs else ", ".join(r.backends) or "-",
                r.reason or "-",
            )
            for r in rep.rows
        ],
    )
    for r in rep.rows:
        for f in r.findings:
            if verbose or f.is_error:
                out.write(f"  {r.name}: {f.code} {f.message}\n")
    for group in shared:
        finding = group.finding()
        out.write(f"  (shared) {group.short_at}: {finding.code} {finding.message}\n")


def _combo_cells(rows: Sequence[Any], method: str) -> str:
    """``main=on draft=on spec=mtp: FDC201 x37; ...`` for the rows of ``method`` that failed or could not run."""
    cells = [
        f"{r.combo.label()}: {_codes(r.findings) if r.findings else 'ERROR'}"
        for r in rows
        if r.method == method and (r.findings or r.error)
    ]
    return "; ".join(cells) or "-"


def print_real_runner(out: TextIO, rep: Any, verbose: bool) -> None:
    if not _section(
        out, f"5. Runner teardown over the real wrappers ({rep.where}: self.model, proposer.model built on CPU)", rep
    ):
        return
    drafts = sum(1 for pair in rep.pairs if pair.pairing.draft_wrapper is not None)
    out.write(
        f"{len(rep.pairs)} main wrappers ({drafts} with their MTP draft), {len(rep.rows)} runs; {rep.violations} "
        f"violate; not built: {', '.join(sorted(rep.not_built)) or 'none'} (the wrappers table says why)\n"
    )
    table = []
    doors = list(dict.fromkeys(r.method for pair in rep.pairs for r in pair.rows))  # a column per entry point
    for pair in rep.pairs:
        rows, pairing = pair.rows, pair.pairing
        failed = any(f.is_error for r in rows for f in r.findings)
        verdict = "FAIL" if failed else "ERROR" if any(r.error for r in rows) else "ok"
        draft = pairing.draft if pairing.draft_wrapper is not None else pairing.draft_problem or "-"
        table.append((pairing.main, draft, verdict, *(_combo_cells(rows, m) for m in doors)))
    _table(out, ("main wrapper", "MTP draft", "verdict", *doors), table)
    for pair in rep.pairs:
        shown: set[tuple[str, str]] = set()
        for r in pair.rows:
            for f in _unshown(r, shown, verbose):
                out.write(f"  {pair.pairing.main} [{r.combo.label()} {r.method}] {f.code} {f.message}\n")
            if r.error:
                out.write(f"  {pair.pairing.main} [{r.combo.label()} {r.method}] ERROR {r.error}\n")
