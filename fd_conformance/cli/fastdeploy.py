"""``fd-conformance fastdeploy PATH``: the five tables for a FastDeploy checkout, on CPU.

Exit codes: 0 every table clean; 1 any violation (an error-level finding in any table);
2 bad PATH (the message says what a checkout must hold); 3 a table could not run (its module
failed to import, or FastDeploy's teardown body raised on the stand-ins) and nothing else was
wrong; 6 a package FastDeploy imports is missing (the message names it and the install).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from fd_conformance.errors import EXIT_INCOMPLETE, EXIT_OK, EXIT_VIOLATIONS, UsageError

# The bridges are imported inside the functions below for speed: every subcommand loads this
# module, and only `fastdeploy` needs them (they build FastDeploy's import environment).
HELP = (
    "certify a FastDeploy checkout on CPU: its real FDConfig (C6), model classes (protocol), runner teardown (C3), "
    "real wrappers' clear, the runner over the real wrappers"
)
TABLES = ("config", "models", "runner", "wrappers", "real-runner")
DEFAULT_EXAMPLES = 100


def add_cli(subparsers: Any) -> None:
    """Register ``fd-conformance fastdeploy`` (called from fd_conformance.cli.build_parser)."""
    parser = subparsers.add_parser(
        "fastdeploy", help=HELP, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "path",
        nargs="?",
        default=None,
        metavar="PATH",
        help="FastDeploy checkout (the directory holding fastdeploy/); default: the installed fastdeploy",
    )
    parser.add_argument(
        "--only", action="append", choices=TABLES, default=None, help="run only this table (repeatable); default: all five"
    )
    parser.add_argument(
        "--max-examples",
        type=int,
        default=DEFAULT_EXAMPLES,
        metavar="N",
        help=f"Hypothesis examples per config rule (default {DEFAULT_EXAMPLES})",
    )
    parser.add_argument("--json", dest="json_out", default=None, metavar="FILE", help="also write the tables as JSON")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every finding in full, and the calls made")
    parser.add_argument(
        "--history",
        default=None,
        metavar="A..B",
        help="PATH is a git repository: certify every commit on B's first-parent line after A (and A) in a fresh "
        "interpreter each and print the first commit where each table row changed verdict; exits with B's code",
    )
    parser.add_argument(
        "--bisect",
        action="store_true",
        help="with --history: certify A and B, then bisect each row that differs (assumes one change per row)",
    )
    parser.set_defaults(func=run)


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
    if not _section(out, f"3. Runner teardown order on the real {rep.where}.clear_parameters / update_parameters", rep):
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


def stand_ins_json(env: Any) -> list[dict[str, Any]]:
    return [
        {"module": env.ops.__name__, "package": None, "imported_by": "compiled ops", "reached": []},
        *(
            {"module": r.module, "package": r.package, "imported_by": r.imported_by, "reached": list(r.reached)}
            for r in env.stand_ins
        ),
    ]


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
    for pair in rep.pairs:
        rows, pairing = pair.rows, pair.pairing
        failed = any(f.is_error for r in rows for f in r.findings)
        verdict = "FAIL" if failed else "ERROR" if any(r.error for r in rows) else "ok"
        draft = pairing.draft if pairing.draft_wrapper is not None else pairing.draft_problem or "-"
        table.append(
            (pairing.main, draft, verdict, _combo_cells(rows, "clear_parameters"), _combo_cells(rows, "update_parameters"))
        )
    _table(out, ("main wrapper", "MTP draft", "verdict", "clear_parameters", "update_parameters"), table)
    for pair in rep.pairs:
        shown: set[tuple[str, str]] = set()
        for r in pair.rows:
            for f in _unshown(r, shown, verbose):
                out.write(f"  {pair.pairing.main} [{r.combo.label()} {r.method}] {f.code} {f.message}\n")
            if r.error:
                out.write(f"  {pair.pairing.main} [{r.combo.label()} {r.method}] ERROR {r.error}\n")


def _runner_row_json(row: Any) -> dict[str, Any]:
    """One runner row (stand-in or real models) as ``--json`` writes it (history reads these keys)."""
    return {
        "use_cudagraph": row.combo.use_cudagraph,
        "draft_model_use_cudagraph": row.combo.draft_model_use_cudagraph,
        "spec_method": row.combo.spec_method,
        "method": row.method,
        "error": row.error,
        "skipped": row.skipped,
        "codes": [f.code for f in row.findings],
    }


def to_json(reports: dict[str, Any], seconds: dict[str, float]) -> dict[str, Any]:
    data: dict[str, Any] = {"seconds": seconds}
    if "config" in reports:
        c = reports["config"]
        data["config"] = {
            "error": c.error,
            "built": c.built,
            "rejected": c.rejected,
            "rows": [{"code": r.code, "severity": r.severity, "minimal": r.minimal} for r in c.rows],
        }
    if "models" in reports:
        m = reports["models"]
        data["models"] = {
            "error": m.error,
            "import_failures": m.import_failures,
            "rows": [
                {"name": r.name, "class": r.qualname, "codes": [f.code for f in r.findings], "failed": r.is_error} for r in m.rows
            ],
        }
    if "runner" in reports:
        r = reports["runner"]
        data["runner"] = {
            "error": r.error,
            "rows": [_runner_row_json(x) for x in r.rows],
        }
    if "wrappers" in reports:
        w = reports["wrappers"]
        data["wrappers"] = {
            "error": w.error,
            "rows": [
                {
                    "name": r.name,
                    "class": r.qualname,
                    "verdict": r.verdict,
                    "codes": [f.code for f in r.findings],
                    "reason": r.reason,
                    "backends": r.backends,
                    "graphs": r.graphs,
                    "before_capture": r.before_capture.code if r.before_capture else None,
                    "raised_at": r.raised_at or None,
                }
                for r in w.rows
            ],
            "shared_raises": [
                {
                    "code": "FDC303",
                    "when": "before any capture",
                    "at": g.at or None,
                    "raised": g.raised,
                    "fix": g.fix,
                    "wrappers": g.wrappers,
                }
                for g in w.shared_raises
            ],
        }
    if "real-runner" in reports:
        rr = reports["real-runner"]
        data["real_runner"] = {
            "error": rr.error,
            "not_built": rr.not_built,
            "rows": [
                {
                    "main": pair.pairing.main,
                    "draft": pair.pairing.draft if pair.pairing.draft_wrapper is not None else None,
                    **_runner_row_json(x),
                }
                for pair in rr.pairs
                for x in pair.rows
            ],
        }
    return data


def run(args: argparse.Namespace) -> int:
    from fd_conformance.fastdeploy.checkout import MissingDependency

    try:
        if args.history is not None:
            return _history(args)
        if args.bisect:
            raise UsageError("--bisect needs --history A..B", "pass PATH --history A..B --bisect")
        return _run(args)
    except MissingDependency as err:  # a direct call (tests, scripts) gets code 6 too, not an exception
        print(f"fd-conformance fastdeploy: error: {err}", file=sys.stderr)
        return err.exit_code


def _history(args: argparse.Namespace) -> int:
    from fd_conformance.fastdeploy.history import run_history

    if args.max_examples < 1:
        raise UsageError(f"--max-examples={args.max_examples} must be at least 1", "pass e.g. --max-examples 100")
    if args.json_out:
        raise UsageError("--json is per tree; --history prints the changes", "drop --json, or run one commit without --history")
    options = ["--max-examples", str(args.max_examples), *(f"--only={table}" for table in args.only or ())]
    return run_history(args.path, args.history, options, use_bisect=args.bisect, out=sys.stdout)


def _run(args: argparse.Namespace) -> int:
    from fd_conformance.fastdeploy.checkout import import_environment, import_module, locate

    if args.max_examples < 1:
        raise UsageError(f"--max-examples={args.max_examples} must be at least 1", "pass e.g. --max-examples 100")
    checkout = locate(args.path)
    tables = args.only or list(TABLES)
    out = sys.stdout
    reports: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    with import_environment(checkout) as env:
        started = time.perf_counter()
        import_module("fastdeploy", checkout)
        seconds["import"] = time.perf_counter() - started
        # FastDeploy's import leaves a large heap; freezing it keeps Hypothesis's many small
        # collections cheap. Its INFO logging per FDConfig would drown the tables.
        gc.freeze()
        logging.disable(logging.INFO)
        out.write(f"# fd-conformance fastdeploy {checkout} (import {seconds['import']:.1f} s)\n")
        try:
            for table in tables:
                started = time.perf_counter()
                if table == "config":
                    from fd_conformance.fastdeploy.config_bridge import check_checkout_config

                    reports[table] = check_checkout_config(checkout, max_examples=args.max_examples)
                    print_config(out, reports[table], args.verbose)
                elif table == "models":
                    from fd_conformance.fastdeploy.models_bridge import check_models

                    reports[table] = check_models(checkout)
                    print_models(out, reports[table], args.verbose)
                elif table == "runner":
                    from fd_conformance.fastdeploy.runner_bridge import check_runner

                    reports[table] = check_runner(checkout)
                    print_runner(out, reports[table], args.verbose)
                elif table == "wrappers":
                    from fd_conformance.fastdeploy.wrappers_bridge import check_wrappers

                    reports[table] = check_wrappers(checkout)
                    print_wrappers(out, reports[table], args.verbose)
                else:
                    from fd_conformance.fastdeploy.real_runner import check_real_runner

                    reports[table] = check_real_runner(checkout)
                    print_real_runner(out, reports[table], args.verbose)
                seconds[table] = time.perf_counter() - started
                out.write(f"({table}: {seconds[table]:.1f} s)\n")
                out.flush()
        finally:
            logging.disable(logging.NOTSET)
            gc.unfreeze()
        print_stand_ins(out, env)
    violations = sum(rep.violations for rep in reports.values())
    broken = (
        sum(1 for rep in reports.values() if rep.error)
        + sum(1 for row in getattr(reports.get("runner"), "rows", []) if row.error)
        + sum(1 for row in getattr(reports.get("real-runner"), "rows", []) if row.error)
        + getattr(reports.get("wrappers"), "not_checked", 0)
    )
    if args.json_out:
        data = to_json(reports, seconds) | {
            "checkout": str(checkout),
            "violations": violations,
            "broken": broken,
            "stand_ins": stand_ins_json(env),
        }
        Path(args.json_out).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    verdict = EXIT_VIOLATIONS if violations else EXIT_INCOMPLETE if broken else EXIT_OK
    out.write(f"\n{violations} table row(s) with violations, {broken} that could not run -> exit {verdict}\n")
    return verdict
