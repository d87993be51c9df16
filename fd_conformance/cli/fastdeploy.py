"""``fd-conformance fastdeploy PATH``: the five tables for a FastDeploy checkout, on CPU.

Exit codes: 0 every table clean; 1 any violation (an error-level finding in any table);
2 bad PATH (the message says what a checkout must hold); 3 a table could not run (its module
failed to import, or FastDeploy's teardown body raised on the stand-ins) and nothing else was
wrong; 6 a package FastDeploy imports is missing (the message names it and the install).

This module runs the tables (each bridge's check, in :data:`CHECKS`) and writes ``--json``;
:mod:`.fastdeploy_tables` prints them.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from fd_conformance.cli.fastdeploy_tables import (
    print_config,
    print_models,
    print_real_runner,
    print_runner,
    print_stand_ins,
    print_wrappers,
)
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


def stand_ins_json(env: Any) -> list[dict[str, Any]]:
    return [
        {"module": env.ops.__name__, "package": None, "imported_by": "compiled ops", "reached": []},
        *(
            {"module": r.module, "package": r.package, "imported_by": r.imported_by, "reached": list(r.reached)}
            for r in env.stand_ins
        ),
    ]


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


def _config_json(c: Any) -> dict[str, Any]:
    return {
        "error": c.error,
        "built": c.built,
        "rejected": c.rejected,
        "rows": [{"code": r.code, "severity": r.severity, "minimal": r.minimal} for r in c.rows],
    }


def _models_json(m: Any) -> dict[str, Any]:
    return {
        "error": m.error,
        "import_failures": m.import_failures,
        "rows": [
            {"name": r.name, "class": r.qualname, "codes": [f.code for f in r.findings], "failed": r.is_error} for r in m.rows
        ],
    }


def _runner_json(r: Any) -> dict[str, Any]:
    return {
        "error": r.error,
        "rows": [_runner_row_json(x) for x in r.rows],
    }


def _wrappers_json(w: Any) -> dict[str, Any]:
    return {
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


def _real_runner_json(rr: Any) -> dict[str, Any]:
    return {
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


#: table -> (its key in ``--json``, what writes it), in the order the document lists them.
TABLE_JSON: dict[str, tuple[str, Callable[[Any], dict[str, Any]]]] = {
    "config": ("config", _config_json),
    "models": ("models", _models_json),
    "runner": ("runner", _runner_json),
    "wrappers": ("wrappers", _wrappers_json),
    "real-runner": ("real_runner", _real_runner_json),
}


def to_json(reports: dict[str, Any], seconds: dict[str, float]) -> dict[str, Any]:
    data: dict[str, Any] = {"seconds": seconds}
    for table, (key, table_json) in TABLE_JSON.items():
        if table in reports:
            data[key] = table_json(reports[table])
    return data


def run(args: argparse.Namespace) -> int:
    from fd_conformance.fastdeploy.stand_ins import MissingDependency

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


def _check_config(checkout: Any, args: argparse.Namespace) -> Any:
    from fd_conformance.fastdeploy.config_bridge import check_checkout_config

    return check_checkout_config(checkout, max_examples=args.max_examples)


def _check_models(checkout: Any, args: argparse.Namespace) -> Any:
    from fd_conformance.fastdeploy.models_bridge import check_models

    return check_models(checkout)


def _check_runner(checkout: Any, args: argparse.Namespace) -> Any:
    from fd_conformance.fastdeploy.runner_bridge import check_runner

    return check_runner(checkout)


def _check_wrappers(checkout: Any, args: argparse.Namespace) -> Any:
    from fd_conformance.fastdeploy.wrappers_bridge import check_wrappers

    return check_wrappers(checkout)


def _check_real_runner(checkout: Any, args: argparse.Namespace) -> Any:
    from fd_conformance.fastdeploy.real_runner import check_real_runner

    return check_real_runner(checkout)


#: table -> (the bridge check that makes its report, the printer of its text table).
CHECKS: dict[str, tuple[Callable[[Any, argparse.Namespace], Any], Callable[[TextIO, Any, bool], None]]] = {
    "config": (_check_config, print_config),
    "models": (_check_models, print_models),
    "runner": (_check_runner, print_runner),
    "wrappers": (_check_wrappers, print_wrappers),
    "real-runner": (_check_real_runner, print_real_runner),
}


@contextmanager
def _quiet_heap() -> Iterator[None]:
    """FastDeploy's import leaves a large heap; freezing it keeps Hypothesis's many small
    collections cheap. Its INFO logging per FDConfig would drown the tables. Both undone on exit."""
    gc.freeze()
    logging.disable(logging.INFO)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)
        gc.unfreeze()


def _run(args: argparse.Namespace) -> int:
    from fd_conformance.fastdeploy.checkout import import_environment, import_module, locate

    if args.max_examples < 1:
        raise UsageError(f"--max-examples={args.max_examples} must be at least 1", "pass e.g. --max-examples 100")
    checkout = locate(args.path)
    out = sys.stdout
    reports: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    with import_environment(checkout) as env:
        started = time.perf_counter()
        import_module("fastdeploy", checkout)
        seconds["import"] = time.perf_counter() - started
        with _quiet_heap():
            out.write(f"# fd-conformance fastdeploy {checkout} (import {seconds['import']:.1f} s)\n")
            for table in args.only or list(TABLES):
                started = time.perf_counter()
                check, print_table = CHECKS[table]
                reports[table] = check(checkout, args)
                print_table(out, reports[table], args.verbose)
                seconds[table] = time.perf_counter() - started
                out.write(f"({table}: {seconds[table]:.1f} s)\n")
                out.flush()
        print_stand_ins(out, env)
    violations, broken = _tally(reports)
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


def _tally(reports: dict[str, Any]) -> tuple[int, int]:
    """(rows with violations, tables and rows that could not run) over every table's report."""
    violations = sum(rep.violations for rep in reports.values())
    broken = (
        sum(1 for rep in reports.values() if rep.error)
        + sum(1 for row in getattr(reports.get("runner"), "rows", []) if row.error)
        + sum(1 for row in getattr(reports.get("real-runner"), "rows", []) if row.error)
        + getattr(reports.get("wrappers"), "not_checked", 0)
    )
    return violations, broken
