"""``fd-conformance run``: certify models with the shipped suites and write the reports.

pytest runs in a subprocess (``python -m pytest --pyargs fd_conformance.suite``) rather than
in-process: the suites import frameworks and may initialise CUDA, and a certificate must come
from a clean interpreter, not from whatever the caller imported. The subprocess writes
conformance.json, certificate.md (through the plugin's --fd-report), junit.xml and results.jsonl
(one fsynced line per finished check); this command tails results.jsonl for live progress,
prints the matrix and turns the verdicts into the exit code (errors.EXIT_CODES).

The child runs in its own process group: a Ctrl-C or SIGTERM reaches this process only, which
ends the whole group (pytest, xdist and isolation workers), writes the partial report from
results.jsonl marked INTERRUPTED, and exits 128+signal.

This module is the command (its options, the checks before pytest starts, the run's directories);
the pytest invocation is :mod:`.pytest_command`, the supervised child :mod:`.child`, and the exit
code from how the session ended :mod:`.judge`.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

from fd_conformance.cases import locate_spec, read_selection
from fd_conformance.cli import shard as shard_cli  # --shard K/N, --durations FILE
from fd_conformance.cli.child import run_child
from fd_conformance.cli.job_summary import append_job_summary
from fd_conformance.cli.judge import (  # noqa: F401 - EMPTY_JUNIT, usage_line: re-exported, tests read them here
    EMPTY_JUNIT,
    judge_session,
    record_session_end,
    report_nothing_to_certify,
    session_judged,
)
from fd_conformance.cli.judge import usage_line as _usage_line  # noqa: F401 - re-exported: tests read it here
from fd_conformance.cli.last_failed import HELP as LAST_FAILED_HELP
from fd_conformance.cli.last_failed import announce, failed_rows, row_arguments
from fd_conformance.cli.outdir import LOG_NAME, OutLock, check_name_lengths, keep_previous
from fd_conformance.cli.pytest_command import (  # noqa: F401 - benches read NO_HYPOTHESIS_PLUGIN here
    NO_HYPOTHESIS_PLUGIN,
    absolute_spec,
    pytest_command,
    shadowed_modules,
)
from fd_conformance.cli.reproducers import run_facts, write_reproducers
from fd_conformance.cli.unfinished import report_interrupted
from fd_conformance.cli.workers import capped_workers
from fd_conformance.errors import EXIT_USAGE, MAX_CYCLES, UsageError, validate_directory, validate_int
from fd_conformance.frameworks import FRAMEWORKS
from fd_conformance.tempdirs import TEMP_ENV, make_owned_dir, remove_stale

# The imports inside functions below are for speed, not to break a circle: cli/__init__ loads this
# module for every subcommand (`lint`, `--help`), and only `run` needs the reports, the runtime
# probes and the progress display.
RUN_HELP = "run the conformance suites over the bundled reference models (or --model ones) and write reports"
MODEL_HELP = "model case spec, module:attr or path/to/file.py:attr (repeatable); default: every installed good case"
RUNTIME_HELP = "framework whose cases run: torch, paddle or auto (default)"
WORKERS_HELP = (
    "pytest-xdist workers: N (0 = serial, in one process) or auto (on a GPU host several workers share each GPU, "
    "as many as its free memory and the cores allow). Default: auto for cuda rows when pytest-xdist is installed "
    "(the models are tiny, so one GPU runs several at once), serial otherwise"
)
OUT_HELP = (
    "directory for conformance.json, junit.xml, certificate.md, results.jsonl and pytest.log (default: "
    "./fd-conformance-report), and repro/: a script per check that found a defect, `python DIR/repro/FILE` re-runs "
    "it alone without pytest (exit 1 while the defect is there, 0 once fixed); locked while the run goes on; an "
    "earlier run's reports there move to DIR/previous/, "
    "replacing the run before it (a refused run leaves DIR as it was); a file of those names that the kit did not write "
    "stops the run"
)
CYCLES_HELP = "weight-update cycles for the weight-cycle check, 3 to 1000 (default 5); its watchdog deadline grows with them"
MUTANTS_HELP = "also run the bundled mutants; passes only if each reports exactly its expected findings"
DEVICE_HELP = (
    "which rows to run: auto (default: cuda when a GPU is visible, else cpu), cpu (host-emulated graphs), "
    "cuda (real graphs) or all (both; cuda rows skip without a GPU)"
)
CASES_FILE_HELP = (
    "certify only the cases named in FILE (one per line, as `fd-conformance changed --output FILE` writes); "
    "an unknown name exits 2, an empty file exits 0 with an empty report (nothing to certify)"
)
VERBOSE_HELP = "stream pytest's own output instead of saving it to OUT/pytest.log (no progress lines then)"
QUIET_HELP = "no progress lines and no matrix: only errors and the verdict line"
ALLOW_EMPTY_HELP = "exit 0 instead of 4 when no check ran on the requested rows (e.g. --device cuda without a GPU)"
PYTEST_ARGS_HELP = (
    "extra pytest arguments after --, e.g. -- -k glm4 (whole rows); a selection that leaves out a check a row "
    "owes (-k protocol, -x) makes that row incomplete, never certified"
)

DEFAULT_OUT = "fd-conformance-report"
CHILD_SPEC_OPTION = "--fd-model"  # plugin.options.FD_MODEL, without importing pytest here (a test keeps them equal)
MIN_CYCLES = 3  # plugin.MIN_CYCLES, without importing pytest here (a test keeps them equal)
DEVICE_CHOICES = ("auto", "all", "cpu", "cuda")
TEMP_PREFIX = "fd-conformance-run-"
# The kit's own ini: the certification must not inherit the user's pytest.ini addopts (e.g. a
# `-k protocol` would silently certify one check) nor any other ini option.
KIT_INI = "[pytest]\n"


def positive_int(option: str, minimum: int) -> Any:
    """argparse ``type=``: an integer >= ``minimum`` whose error names the option."""

    def parse(text: str) -> int:
        try:
            return validate_int(text, option, minimum=minimum)
        except UsageError as err:  # argparse prints its own usage line around the problem
            raise argparse.ArgumentTypeError(err.problem) from None

    return parse


def cycle_count(text: str) -> int:
    """argparse ``type=`` for --cycles: MIN_CYCLES to MAX_CYCLES."""
    cycles: int = positive_int("--cycles", MIN_CYCLES)(text)
    if cycles > MAX_CYCLES:
        raise argparse.ArgumentTypeError(f"--cycles {cycles} is above {MAX_CYCLES}; fix: pass at most {MAX_CYCLES}")
    return cycles


def worker_count(text: str) -> str:
    """argparse ``type=`` for -n: ``auto`` or an integer >= 0, spelled as xdist takes it."""
    if text == "auto":
        return text
    return str(positive_int("-n", 0)(text))


def add_cli(subparsers: Any) -> None:
    """Register ``fd-conformance run`` (called from fd_conformance.cli.build_parser)."""
    parser = subparsers.add_parser("run", help=RUN_HELP, description=RUN_HELP)
    parser.add_argument("--model", action="append", default=[], metavar="SPEC", help=MODEL_HELP)
    parser.add_argument("--runtime", default="auto", choices=("auto", *FRAMEWORKS), help=RUNTIME_HELP)
    parser.add_argument("-n", "--workers", type=worker_count, default=None, metavar="N|auto", help=WORKERS_HELP)
    parser.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", help=OUT_HELP)
    parser.add_argument("--cycles", type=cycle_count, default=5, metavar="K", help=CYCLES_HELP)
    parser.add_argument("--include-mutants", action="store_true", help=MUTANTS_HELP)
    parser.add_argument("--device", default="auto", choices=DEVICE_CHOICES, help=DEVICE_HELP)
    parser.add_argument("--cases-file", default=None, metavar="FILE", help=CASES_FILE_HELP)
    parser.add_argument("--last-failed", "--lf", action="store_true", help=LAST_FAILED_HELP)
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    parser.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)
    parser.add_argument("--allow-empty", "--fd-allow-empty", dest="allow_empty", action="store_true", help=ALLOW_EMPTY_HELP)
    shard_cli.add_shard_arguments(parser)
    parser.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help=PYTEST_ARGS_HELP)
    parser.set_defaults(func=run)


def _validate(args: argparse.Namespace, out: Path) -> None:
    """What can be checked without starting pytest, so it fails in milliseconds with our option names."""
    from fd_conformance.runtime import installed_runtimes

    if args.runtime != "auto" and args.runtime not in installed_runtimes():
        raise UsageError(
            f"--runtime {args.runtime} is not installed", f"pip install 'fd-conformance[{args.runtime}]' or use --runtime auto"
        )
    if args.workers not in (None, "0") and importlib.util.find_spec("xdist") is None:
        raise UsageError("-n needs pytest-xdist, which is not installed", "pip install 'fd-conformance[dev]' or drop -n")
    validate_directory(str(out), "--out")
    check_name_lengths(out)
    _validate_addopts(os.environ.get("PYTEST_ADDOPTS", ""))
    _validate_cwd_modules()
    shard_cli.validate_shard_args(args)
    _validate_specs(args.model)


def _validate_addopts(addopts: str) -> None:
    """PYTEST_ADDOPTS reaches the child; quoting pytest cannot split (an unclosed quote) crashed it
    with a traceback, read as an incomplete session (exit 3) after the earlier report was moved."""
    try:
        shlex.split(addopts)
    except ValueError as err:
        raise UsageError(
            f"PYTEST_ADDOPTS {addopts!r} cannot be split into arguments ({err})",
            "close the quote (or escape it), or unset PYTEST_ADDOPTS",
        ) from None


def _validate_cwd_modules() -> None:
    """A ./pytest.py (or a folder named like a module pytest starts with) is imported by the child in
    pytest's place: the session died before collecting and read as INTERRUPTED."""
    shadows = shadowed_modules(Path.cwd())
    if shadows:
        name, path = shadows[0]
        raise UsageError(
            f"{path} would be imported as {name!r} by the run's pytest (the current directory comes first on its "
            "PYTHONPATH, for module:attr specs), and pytest could not start",
            "rename or move it, or run from another directory (a file spec, path/to/model.py:CASE, works from anywhere)",
        )


def _validate_specs(specs: list[str]) -> None:
    """Locate every --model spec here (its form, its file or module), so a typo fails in
    milliseconds. Importing it is the child's: the module imports a framework (1-2 s of CPU, paid
    again by the child and its workers), and the child's errors reach the user under OUR option
    name all the same (:func:`spec_renames`). Specs resolve against the cwd, as in the child."""
    if not specs:
        return
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        # A parent package's import-time warning (torch's pynvml FutureWarning) would be all the
        # user sees around a one-line error; the child's pytest.log keeps such warnings.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for spec in specs:
                locate_spec(spec, source="--model")
    finally:
        if added:
            sys.path.remove(cwd)


def spec_renames(specs: list[str]) -> dict[str, str]:
    """The child's name for each spec (``--fd-model '/abs/m.py:CASES'``) -> the user's
    (``--model 'm.py:CASES'``): a usage error the child reports reads as if this command had."""
    renames = {}
    for spec in specs:
        child = absolute_spec(spec)
        renames[f"{CHILD_SPEC_OPTION} {child!r}"] = f"--model {spec!r}"
        if child != spec:  # a file spec: the file as the user wrote it, too
            renames[repr(child.rpartition(":")[0])] = repr(spec.rpartition(":")[0])
    return renames


def remove_stale_temp_dirs() -> None:
    """The temp dirs of runs that were SIGKILLed (no handler runs then, so their dir stays):
    removed by the next run. Only a dir whose owner.pid names a process that is gone, so a
    live run's dir (this user's or another's) is never touched."""
    remove_stale(TEMP_PREFIX)


def run(args: argparse.Namespace) -> int:
    """Everything that can be checked is checked before --out is touched; what only pytest finds
    (a spec's attribute, a --runtime no case matches, an unknown option) puts --out back as it was:
    either way a refused run leaves the last report where a CI job uploads it from."""
    out = Path(validate_directory(args.out, "--out")).resolve()  # first: '' would resolve to the cwd
    _validate(args, out)
    args.workers = capped_workers(args.workers)  # -n 999 on two cores: the OOM killer's, not a report
    selection = _read_cases_file(args.cases_file) if args.cases_file is not None else None
    with OutLock(out) as lock:
        if args.last_failed:  # before the earlier report moves to previous/
            rows = failed_rows(out)
            args.row_options = row_arguments(rows)
            if not args.quiet:
                print(announce(rows, out))
        kept = keep_previous(out)
        try:
            code = _session(args, out, selection)
        except UsageError:
            kept.restore()
            raise
        # pytest refused the arguments (or a --model spec failed to load there): the directory the
        # lock made goes too, and the earlier run's reports go back where they were.
        lock.refused = code == EXIT_USAGE
        if lock.refused:
            kept.restore()
        elif (moved := kept.settle()) is not None and not args.quiet:
            print(f"fd-conformance run: the earlier run's reports in {out} were moved to {moved} (replacing the run before it)")
        if not lock.refused:
            append_job_summary(out)  # GITHUB_STEP_SUMMARY: the certificate on the job's page
        return code


def _session(args: argparse.Namespace, out: Path, selection: list[str] | None) -> int:
    """The run proper, inside the lock on --out: pytest in the run's own temp dir, then its verdict."""
    if selection == []:
        return report_nothing_to_certify(Path(args.cases_file), out, bool(args.include_mutants))
    env = dict(os.environ)
    # module:attr specs name modules relative to where the user stands, as `python -m` would.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH", "")) if p)
    remove_stale_temp_dirs()
    run_dir = make_owned_dir(TEMP_PREFIX)
    try:
        # Every temp path of the run (isolation workers' dirs, pytest's tmp_path, a torch
        # FileStore, a model's files) is made under the run's own dir, which this process
        # removes however the child ended: a SIGTERMed pytest cleans up nothing itself.
        env[TEMP_ENV] = str(run_dir / "tmp")
        (run_dir / "tmp").mkdir()
        # pytest runs from the kit's own directory with the kit's ini: neither the user's
        # pytest.ini/pyproject addopts nor a conftest.py in their cwd reaches the certification.
        args.ini_dir = run_dir
        (args.ini_dir / "pytest.ini").write_text(KIT_INI, encoding="utf-8")
        cmd = pytest_command(args, out)
        returncode, signum = run_child(cmd, env, str(run_dir), out, bool(args.verbose), bool(args.quiet))
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    if signum is not None:
        code = report_interrupted(out, signum, bool(args.quiet))
    else:
        log = "" if args.verbose else (out / LOG_NAME).read_text(encoding="utf-8", errors="replace")
        if session_judged(returncode, out):
            record_session_end(out, returncode)  # an unfinished one is closed by judge_session's report
        code = judge_session(
            returncode, log, out, quiet=bool(args.quiet), allow_empty=bool(args.allow_empty), renames=spec_renames(args.model)
        )
    if code != EXIT_USAGE:  # the checks that found a defect, each re-runnable alone (OUT/repro/)
        facts = run_facts(
            [absolute_spec(spec) for spec in args.model], bool(args.include_mutants), args.cycles, env["PYTHONPATH"]
        )
        write_reproducers(out, facts, quiet=bool(args.quiet))
    return code


def _read_cases_file(path: str) -> list[str]:
    """read_selection, with a file that is not UTF-8 text (a binary, a UTF-16 export) a usage error
    rather than a UnicodeDecodeError traceback."""
    try:
        return read_selection(path)
    except UnicodeDecodeError as err:
        raise UsageError(
            f"cases file {path} is not UTF-8 text (byte {err.object[err.start]:#04x} at offset {err.start})",
            "pass the file `fd-conformance changed --output FILE` wrote, or save it as UTF-8",
        ) from None


if __name__ == "__main__":  # pragma: no cover
    parser = argparse.ArgumentParser(prog="fd-conformance")
    add_cli(parser.add_subparsers(dest="command", required=True))
    ns = parser.parse_args()
    try:
        sys.exit(ns.func(ns))
    except UsageError as err:
        print(f"fd-conformance run: error: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
