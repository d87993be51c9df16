"""``fd-conformance run``: certify models with the shipped suites and write the reports.

pytest runs in a subprocess (``python -m pytest --pyargs fd_conformance.suite``) rather than
in-process: the suites import frameworks and may initialise CUDA, and a certificate must come
from a clean interpreter, not from whatever the caller imported. The subprocess writes
conformance.json, certificate.md (through the plugin's --fd-report) and junit.xml; this command
prints the matrix and turns the verdicts into the exit code (0 pass, 1 violations, 2 usage).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from fd_conformance.changed import read_selection
from fd_conformance.errors import EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, EXIT_VIOLATIONS, UsageError

RUN_HELP = "run the conformance suites over the bundled reference models (or --model ones) and write reports"
MODEL_HELP = "model case spec, module:attr or path/to/file.py:attr (repeatable); default: every installed good case"
RUNTIME_HELP = "framework whose cases run: torch, paddle or auto (default)"
WORKERS_HELP = "pytest-xdist workers (one GPU each on a GPU host); default: no xdist"
OUT_HELP = "directory for conformance.json, junit.xml, certificate.md and pytest.log (default: ./fd-conformance-report)"
CYCLES_HELP = "weight-update cycles for the weight-cycle check, at least 3 (default 5)"
MUTANTS_HELP = "also run the bundled mutants; passes only if each reports exactly its expected findings"
DEVICE_HELP = (
    "which rows to run: auto (default: cuda when a GPU is visible, else cpu), cpu (host-emulated graphs), "
    "cuda (real graphs) or all (both; cuda rows skip without a GPU)"
)
CASES_FILE_HELP = (
    "certify only the cases named in FILE (one per line, as `fd-conformance changed --output FILE` writes); "
    "an unknown name exits 2, an empty file exits 0 with an empty report (nothing to certify)"
)
VERBOSE_HELP = "stream pytest's own output instead of saving it to OUT/pytest.log"
PYTEST_ARGS_HELP = "extra pytest arguments after --, e.g. -- -x -k protocol"

DEFAULT_OUT = "fd-conformance-report"
MIN_CYCLES = 3  # plugin.MIN_CYCLES, without importing pytest here (a test keeps them equal)
DEVICE_CHOICES = ("auto", "all", "cpu", "cuda")
# pytest.ExitCode values, without importing pytest here: OK and TESTS_FAILED are the only exits
# after which conformance.json holds a whole session; NO_TESTS_COLLECTED (e.g. `-- -k nomatch`)
# leaves an empty one, which report_run turns into a usage error.
PYTEST_OK, PYTEST_TESTS_FAILED, PYTEST_USAGE_ERROR, PYTEST_NO_TESTS_COLLECTED = 0, 1, 4, 5
REPORT_FILES = ("conformance.json", "certificate.md", "junit.xml")
# The kit's own ini: the certification must not inherit the user's pytest.ini addopts (e.g. a
# `-k protocol` would silently certify one check) nor any other ini option.
KIT_INI = "[pytest]\n"
LOG_TAIL_LINES = 15
EMPTY_JUNIT = '<?xml version="1.0" encoding="utf-8"?>\n<testsuites><testsuite name="fd-conformance" tests="0" errors="0" failures="0" skipped="0" /></testsuites>\n'


def positive_int(option: str, minimum: int) -> Any:
    """argparse ``type=``: an integer >= ``minimum`` whose error names the option."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{option} {text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{option} {value} is below {minimum}")
        return value

    return parse


def add_cli(subparsers: Any) -> None:
    """Register ``fd-conformance run`` (called from fd_conformance.cli.build_parser)."""
    parser = subparsers.add_parser("run", help=RUN_HELP, description=RUN_HELP)
    parser.add_argument("--model", action="append", default=[], metavar="SPEC", help=MODEL_HELP)
    parser.add_argument("--runtime", default="auto", choices=("auto", "torch", "paddle"), help=RUNTIME_HELP)
    parser.add_argument("-n", "--workers", type=positive_int("-n", 1), default=None, metavar="N", help=WORKERS_HELP)
    parser.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", help=OUT_HELP)
    parser.add_argument("--cycles", type=positive_int("--cycles", MIN_CYCLES), default=5, metavar="K", help=CYCLES_HELP)
    parser.add_argument("--include-mutants", action="store_true", help=MUTANTS_HELP)
    parser.add_argument("--device", default="auto", choices=DEVICE_CHOICES, help=DEVICE_HELP)
    parser.add_argument("--cases-file", default=None, metavar="FILE", help=CASES_FILE_HELP)
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    parser.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help=PYTEST_ARGS_HELP)
    parser.set_defaults(func=run)


def resolve_device(device: str) -> str:
    """``auto`` made concrete here, so the command, the log and the matrix agree on the rows run."""
    if device != "auto":
        return device
    from fd_conformance.devices import visible_gpu_count

    return "cuda" if visible_gpu_count() > 0 else "cpu"


def pytest_command(args: argparse.Namespace, out: Path) -> list[str]:
    """The pytest invocation. Options use ``--opt=value``: pytest reads a bare value after an
    option it does not know yet (plugin options) as a path when it looks for an ini file, so
    ``--fd-report DIR`` could pick up an ini file above DIR."""
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "fd_conformance.suite", "-p", "no:cacheprovider", "-q"]
    # The suite ships no conftest.py, so --noconftest drops only foreign ones (the user's, or any
    # above the installed package) that could add fixtures, hooks or deselections to a certificate.
    cmd.append("--noconftest")
    cmd += [f"--fd-model={absolute_spec(spec)}" for spec in args.model]
    cmd += [f"--fd-runtime={args.runtime}", f"--fd-cycles={args.cycles}", f"--fd-report={out}", f"--junitxml={out / 'junit.xml'}"]
    cmd.append(f"--fd-device={resolve_device(args.device)}")
    if getattr(args, "ini_dir", None) is not None:
        cmd += [f"-c={args.ini_dir / 'pytest.ini'}", f"--rootdir={args.ini_dir}"]
    if args.cases_file is not None:
        cmd.append(f"--fd-cases-file={Path(args.cases_file).resolve()}")
    if args.include_mutants:
        cmd.append("--fd-include-mutants")
    if args.workers:
        cmd += ["-n", str(args.workers)]
    return cmd + list(args.pytest_args)


def absolute_spec(spec: str) -> str:
    """``rel/path.py:attr`` made absolute: pytest runs with another rootdir than the user's cwd."""
    module, sep, attr = spec.rpartition(":")
    if sep and module.endswith(".py"):
        return f"{Path(module).resolve()}:{attr}"
    return spec


def _validate(args: argparse.Namespace, out: Path) -> None:
    """What can be checked without starting pytest, so it fails in milliseconds with our option names."""
    from fd_conformance.runtime import installed_runtimes

    if args.runtime != "auto" and args.runtime not in installed_runtimes():
        raise UsageError(f"--runtime {args.runtime} is not installed", f"pip install 'fd-conformance[{args.runtime}]' or use --runtime auto")
    if args.workers and importlib.util.find_spec("xdist") is None:
        raise UsageError("-n needs pytest-xdist, which is not installed", "pip install 'fd-conformance[dev]' or drop -n")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {str(out)!r} is an existing file", "give a directory path")
    _validate_specs(args.model)


def _validate_specs(specs: list[str]) -> None:
    """Load every --model spec here, so a bad one is reported under OUR option name (the pytest
    child would name its own --fd-model). Specs resolve against the cwd, as in the child."""
    if not specs:
        return
    from fd_conformance.case_loading import load_spec

    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        for spec in specs:
            load_spec(spec, source="--model")
    finally:
        if added:
            sys.path.remove(cwd)


def _usage_line(text: str) -> str:
    """pytest's one-line usage error without its prefix. argparse errors come as two lines,
    "ERROR: usage: ..." then "...: error: REASON": the reason is the line worth showing."""
    lines = text.splitlines()
    for line in lines:
        if ": error: " in line:
            return line.partition(": error: ")[2].strip()
    for line in lines:
        if line.startswith("ERROR: "):
            return line[len("ERROR: ") :]
    return text.strip().splitlines()[-1] if text.strip() else "pytest rejected the arguments"


def _log_tail(log: str) -> str:
    return "\n".join(log.strip().splitlines()[-LOG_TAIL_LINES:])


def run(args: argparse.Namespace) -> int:
    out = Path(args.out).resolve()
    _validate(args, out)
    selection = read_selection(args.cases_file) if args.cases_file is not None else None
    out.mkdir(parents=True, exist_ok=True)
    for name in REPORT_FILES:  # a stale report must never pass for this run's result
        (out / name).unlink(missing_ok=True)
    if selection == []:
        return report_nothing_to_certify(Path(args.cases_file), out, bool(args.include_mutants))
    env = dict(os.environ)
    # module:attr specs name modules relative to where the user stands, as `python -m` would.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH", "")) if p)
    with tempfile.TemporaryDirectory(prefix="fd-conformance-run-") as ini_dir:
        # pytest runs from the kit's own directory with the kit's ini: neither the user's
        # pytest.ini/pyproject addopts nor a conftest.py in their cwd reaches the certification.
        args.ini_dir = Path(ini_dir)
        (args.ini_dir / "pytest.ini").write_text(KIT_INI, encoding="utf-8")
        cmd = pytest_command(args, out)
        if args.verbose:
            proc = subprocess.run(cmd, env=env, text=True, cwd=ini_dir)
            log = ""
        else:
            proc = subprocess.run(cmd, env=env, text=True, capture_output=True, cwd=ini_dir)
            log = proc.stdout + proc.stderr
            (out / "pytest.log").write_text(log, encoding="utf-8")
    return judge_session(proc.returncode, log, out)


def judge_session(returncode: int, log: str, out: Path) -> int:
    """The command's exit code from pytest's and the document's: a session pytest did not finish
    normally (INTERNALERROR, interrupted) is never a PASS, whatever partial results it wrote."""
    json_path = out / "conformance.json"
    if returncode == PYTEST_USAGE_ERROR:
        print(f"fd-conformance run: error: {_usage_line(log)}", file=sys.stderr)
        return EXIT_USAGE
    if returncode not in (PYTEST_OK, PYTEST_TESTS_FAILED, PYTEST_NO_TESTS_COLLECTED) or not json_path.is_file():
        where = f"{out / 'pytest.log'}" if log else "the output above"
        print(
            f"fd-conformance run: pytest exited {returncode} (an incomplete session; see {where}); fix: rerun with -v to see why\n{_log_tail(log)}",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
    document = json.loads(json_path.read_text(encoding="utf-8"))
    # pytest failing while the matrix passes: something outside the matrix failed (a fixture
    # error in a non-suite test, a plugin's own check), which the matrix alone would hide.
    outside = returncode == PYTEST_TESTS_FAILED and document["exit_code"] == EXIT_OK
    code = report_run(document, out, outside_failures=outside)
    if outside:
        print(_log_tail(log), file=sys.stderr)
    return code


def report_nothing_to_certify(cases_file: Path, out: Path, expect_mutants: bool) -> int:
    """An empty selection (the change touches no model) is a success, not a usage error: CI must
    pass a PR that changes no model. The reports are still written, valid and empty, with the
    reason in the certificate, so a workflow that posts or uploads them never finds them missing."""
    from fd_conformance.report import CERTIFICATE_NAME, write_reports

    write_reports(out, [], expect_mutants)
    reason = f"Nothing to certify: the cases file `{cases_file}` selects no model case."
    with (out / CERTIFICATE_NAME).open("a", encoding="utf-8") as certificate:
        certificate.write(f"\n{reason}\n")
    (out / "junit.xml").write_text(EMPTY_JUNIT, encoding="utf-8")
    print(f"fd-conformance: PASS (nothing to certify: {cases_file} selects no case)")
    for name in ("conformance.json", "junit.xml", "certificate.md"):
        print(f"  {out / name}")
    return EXIT_OK


def report_run(document: dict[str, Any], out: Path, outside_failures: bool = False) -> int:
    """Print the matrix and where the reports are; the exit code from the verdicts (and from
    failures pytest reported outside the matrix)."""
    from fd_conformance.report import format_matrix, results_from_records

    results = results_from_records(document["results"])
    if not any(r.outcome != "skipped" for r in results):
        raise UsageError(
            "no conformance check ran (no case selected, or every check skipped here)",
            "pass --model SPEC, install a package registering fd_conformance.cases, or check --runtime/--device",
        )
    print(format_matrix(results, bool(document["expect_mutants"])))
    summary = ", ".join(f"{count} {outcome}" for outcome, count in document["summary"].items() if count)
    if outside_failures:
        summary += "; pytest reported failures outside the matrix, see pytest.log"
    code = EXIT_VIOLATIONS if outside_failures else int(document["exit_code"])
    verdict = "PASS" if code == EXIT_OK else "FAIL"
    print(f"\nfd-conformance: {verdict} ({summary})")
    for name in ("conformance.json", "junit.xml", "certificate.md"):
        print(f"  {out / name}")
    return code


if __name__ == "__main__":  # pragma: no cover
    parser = argparse.ArgumentParser(prog="fd-conformance")
    add_cli(parser.add_subparsers(dest="command", required=True))
    ns = parser.parse_args()
    try:
        sys.exit(ns.func(ns))
    except UsageError as err:
        print(f"fd-conformance run: error: {err}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
