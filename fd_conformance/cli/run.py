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
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import FrameType
from typing import Any

from fd_conformance.cases import load_spec, read_selection
from fd_conformance.cli import shard as shard_cli  # --shard K/N, --durations FILE
from fd_conformance.cli.junit import SUITE_NAME as JUNIT_SUITE  # the run's junit.xml is marked with it (kit_wrote)
from fd_conformance.cli.outdir import (
    LOG_HEADER,
    LOG_NAME,
    REPORT_FILES,
    RESULTS_NAME,
    RUN_FILES,
    OutLock,
    keep_previous,
    utc_now,
)
from fd_conformance.cli.unfinished import (
    print_report_paths,
    pytest_end_fix,
    pytest_end_reason,
    report_interrupted,
    write_unfinished_reports,
)
from fd_conformance.cli.workers import capped_workers
from fd_conformance.errors import (
    EXIT_INCOMPLETE,
    EXIT_NOTHING_CERTIFIED,
    EXIT_OK,
    EXIT_USAGE,
    EXIT_VIOLATIONS,
    MAX_CYCLES,
    UsageError,
    validate_directory,
    validate_int,
)
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
    "./fd-conformance-report); locked while the run goes on; an earlier run's reports there move to DIR/previous/ "
    "(an older DIR/previous/ is kept as DIR/previous-TIMESTAMP/); a file of those names that the kit did not write "
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
MIN_CYCLES = 3  # plugin.MIN_CYCLES, without importing pytest here (a test keeps them equal)
DEVICE_CHOICES = ("auto", "all", "cpu", "cuda")
# pytest.ExitCode values, without importing pytest here: OK and TESTS_FAILED are the only exits
# after which conformance.json holds a whole session; NO_TESTS_COLLECTED (e.g. `-- -k nomatch`)
# leaves an empty one, which report_run turns into a usage error.
PYTEST_OK, PYTEST_TESTS_FAILED, PYTEST_USAGE_ERROR, PYTEST_NO_TESTS_COLLECTED = 0, 1, 4, 5
TEMP_PREFIX = "fd-conformance-run-"
POLL_S = 0.25  # how often results.jsonl is read for progress while pytest runs
GRACE_S = 5.0  # after SIGTERM to the child's group, before SIGKILL
# The kit's own ini: the certification must not inherit the user's pytest.ini addopts (e.g. a
# `-k protocol` would silently certify one check) nor any other ini option.
KIT_INI = "[pytest]\n"
LOG_TAIL_LINES = 15
EMPTY_JUNIT = '<?xml version="1.0" encoding="utf-8"?>\n<testsuites><testsuite name="fd-conformance" tests="0" errors="0" failures="0" skipped="0" /></testsuites>\n'

# The suite's sessions drop Hypothesis's pytest plugin (see pytest_command); the benches that time
# a suite session pass the same, so they time what this command runs.
NO_HYPOTHESIS_PLUGIN = ("-p", "no:hypothesispytest")


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
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    parser.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)
    parser.add_argument("--allow-empty", "--fd-allow-empty", dest="allow_empty", action="store_true", help=ALLOW_EMPTY_HELP)
    shard_cli.add_shard_arguments(parser)
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
    # The suite calls Hypothesis's find(), never @given, so Hypothesis's pytest plugin adds
    # nothing but its terminal summary, which imports all of Hypothesis (0.5-0.9 s, rewritten by
    # pytest's assertion hook) in every process of the session -- controller, each xdist worker,
    # each isolation worker -- one after another at the end. Kept when the user asks for it.
    if not any("hypothesis" in arg for arg in args.pytest_args):
        cmd += list(NO_HYPOTHESIS_PLUGIN)
    cmd += [f"--fd-model={absolute_spec(spec)}" for spec in args.model]
    cmd += [f"--fd-runtime={args.runtime}", f"--fd-cycles={args.cycles}", f"--fd-report={out}", f"--junitxml={out / 'junit.xml'}"]
    # The suite name marks the junit.xml as the kit's, so a later run moves it aside (kit_wrote).
    cmd.append(f"--override-ini=junit_suite_name={JUNIT_SUITE}")
    # Always a results log: progress reads it live, an interruption is rebuilt from it, and
    # `fd-conformance report` gives the same verdicts from it later. --fd-allow-empty: this
    # command judges "nothing ran" itself, with its own message.
    cmd += [f"--fd-results={out / RESULTS_NAME}", "--fd-allow-empty"]
    cmd.append(f"--fd-device={resolve_device(args.device)}")
    if getattr(args, "ini_dir", None) is not None:
        cmd += [f"-c={args.ini_dir / 'pytest.ini'}", f"--rootdir={args.ini_dir}"]
    if args.cases_file is not None:
        cmd.append(f"--fd-cases-file={Path(args.cases_file).resolve()}")
    if args.include_mutants:
        cmd.append("--fd-include-mutants")
    cmd += shard_cli.shard_pytest_args(args)
    workers = default_workers(resolve_device(args.device)) if args.workers is None else args.workers
    if workers != "0":
        cmd += ["-n", workers]
    return cmd + list(args.pytest_args)


def default_workers(device: str) -> str:
    """cuda rows: ``auto`` (the plugin sizes workers per GPU); cpu rows or no xdist: serial. On a
    CPU the isolation workers already take the cores, and serial keeps a CI log in order."""
    from fd_conformance.devices import visible_gpu_count

    if device in ("cuda", "all") and visible_gpu_count() > 0 and importlib.util.find_spec("xdist") is not None:
        return "auto"
    return "0"


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
        raise UsageError(
            f"--runtime {args.runtime} is not installed", f"pip install 'fd-conformance[{args.runtime}]' or use --runtime auto"
        )
    if args.workers not in (None, "0") and importlib.util.find_spec("xdist") is None:
        raise UsageError("-n needs pytest-xdist, which is not installed", "pip install 'fd-conformance[dev]' or drop -n")
    validate_directory(str(out), "--out")
    shard_cli.validate_shard_args(args)
    _validate_specs(args.model)


def _validate_specs(specs: list[str]) -> None:
    """Load every --model spec here, so a bad one is reported under OUR option name (the pytest
    child would name its own --fd-model). Specs resolve against the cwd, as in the child."""
    if not specs:
        return
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        # Only a pre-flight: the child imports these modules again and pytest.log keeps their
        # warnings; here a framework's import-time warning (torch's pynvml FutureWarning) would
        # be all the user sees around a one-line error.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
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


class Interrupted:
    """SIGINT/SIGTERM while pytest runs: end the child's whole process group, remember the signal.
    The handler never raises, so every ``with`` block (the temp dir, the lock) unwinds normally."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.at = 0.0
        self.pgid: int | None = None
        self.previous: dict[int, Any] = {}

    def install(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self.previous[signum] = signal.signal(signum, self.handle)

    def restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous.clear()

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum, self.at = signum, time.monotonic()
            self.kill(signal.SIGTERM)
        else:
            self.kill(signal.SIGKILL)  # a second Ctrl-C: no more grace

    def kill(self, signum: int) -> None:
        if self.pgid is not None:
            try:
                os.killpg(self.pgid, signum)
            except (ProcessLookupError, PermissionError):
                pass


def _die_with_parent() -> Any:
    """A preexec_fn for the child: die with this process (Linux PR_SET_PDEATHSIG), so a SIGKILLed
    `run` leaves no pytest behind certifying into a directory nobody holds. libc is resolved
    here, in the parent: between fork and exec the child may only make the call."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def run_child(cmd: list[str], env: dict[str, str], cwd: str, out: Path, verbose: bool, quiet: bool) -> tuple[int, int | None]:
    """Run pytest in its own process group, printing progress from results.jsonl until it ends.
    Returns (pytest's exit code, the signal that interrupted this run or None)."""
    from fd_conformance.cli.progress import Progress

    progress = Progress(out / RESULTS_NAME, quiet=quiet or verbose)
    stop = Interrupted()
    stop.install()
    log = None if verbose else (out / LOG_NAME).open("wb")
    if log is not None:
        log.write(f"{LOG_HEADER}, started {utc_now()}\n".encode())  # the kit's mark (kit_wrote)
        log.flush()  # before the child inherits the descriptor and appends after it
    try:
        proc = subprocess.Popen(
            cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT if log else None,
            start_new_session=True, preexec_fn=_die_with_parent(),  # preexec_fn is safe here: only prctl, no locks taken
        )  # fmt: skip
        stop.pgid = proc.pid
        if stop.signum is not None:  # a signal arrived before the child existed
            stop.kill(signal.SIGTERM)
        while proc.poll() is None:
            progress.poll()
            if stop.signum is not None and time.monotonic() - stop.at > GRACE_S:
                stop.kill(signal.SIGKILL)
            time.sleep(POLL_S)
        if stop.signum is not None:
            stop.kill(signal.SIGKILL)  # workers of the group that outlived pytest
        progress.finish()
        return proc.returncode, stop.signum
    finally:
        if log is not None:
            log.close()
        stop.restore()


def remove_stale_temp_dirs() -> None:
    """The temp dirs of runs that were SIGKILLed (no handler runs then, so their dir stays):
    removed by the next run. Only a dir whose owner.pid names a process that is gone, so a
    live run's dir (this user's or another's) is never touched."""
    remove_stale(TEMP_PREFIX)


def run(args: argparse.Namespace) -> int:
    out = Path(validate_directory(args.out, "--out")).resolve()  # first: '' would resolve to the cwd
    _validate(args, out)
    args.workers = capped_workers(args.workers)  # -n 999 on two cores: the OOM killer's, not a report
    selection = read_selection(args.cases_file) if args.cases_file is not None else None
    with OutLock(out) as lock:
        moved, retired = keep_previous(out)
        if moved is not None and not args.quiet:
            older = f" (the run before it is kept in {retired}; delete what you no longer need)" if retired else ""
            print(f"fd-conformance run: the earlier run's reports in {out} moved to {moved}{older}")
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
            return report_interrupted(out, signum, bool(args.quiet))
        log = "" if args.verbose else (out / LOG_NAME).read_text(encoding="utf-8", errors="replace")
        if session_judged(returncode, out):
            _record_session_end(out, returncode)  # an unfinished one is closed by judge_session's report
        code = judge_session(returncode, log, out, quiet=bool(args.quiet), allow_empty=bool(args.allow_empty))
        lock.refused = code == EXIT_USAGE  # pytest refused the arguments: the directory it made goes too
        return code


def session_judged(returncode: int, out: Path) -> bool:
    """Whether pytest ended normally and its exit status is the session's verdict: pytest's own
    normal statuses, or the exit code the kit's session set from conformance.json (3: a row owes a
    check that did not run, e.g. one -k deselected)."""
    if returncode in (PYTEST_OK, PYTEST_TESTS_FAILED, PYTEST_NO_TESTS_COLLECTED):
        return True
    try:
        return bool(json.loads((out / "conformance.json").read_text(encoding="utf-8"))["exit_code"] == returncode)
    except (OSError, ValueError, KeyError):
        return False


def _record_session_end(out: Path, returncode: int) -> None:
    """The session line of a run that ended by itself (under xdist no worker writes one)."""
    from fd_conformance.isolation.results import FINISHED, ResultLog, session_record

    if not (out / RESULTS_NAME).exists():
        return  # pytest stopped before collection: nothing to close
    log = ResultLog(out / RESULTS_NAME)
    log.append(session_record(FINISHED, f"pytest exited {returncode}"))
    log.close()


def judge_session(returncode: int, log: str, out: Path, quiet: bool = False, allow_empty: bool = False) -> int:
    """The command's exit code from pytest's and the document's: a session pytest did not finish
    normally (INTERNALERROR, interrupted) is never a PASS, whatever partial results it wrote."""
    json_path = out / "conformance.json"
    if returncode == PYTEST_USAGE_ERROR:
        print(f"fd-conformance run: error: {_usage_line(log)}", file=sys.stderr)
        for name in RUN_FILES:  # a refused run leaves no file: what the child began goes
            (out / name).unlink(missing_ok=True)
        return EXIT_USAGE
    if not session_judged(returncode, out) or not json_path.is_file():
        # The reports are written all the same, from results.jsonl, marked with why the session did
        # not end: a conformance.json the child wrote before dying (or none) must not stand.
        reason = pytest_end_reason(returncode)
        document = write_unfinished_reports(out, reason)[0]
        where = f"{out / LOG_NAME}" if log else "the output above"
        print(
            f"fd-conformance run: {reason} (an incomplete session; see {where}); fix: {pytest_end_fix(returncode)}\n{_log_tail(log)}",
            file=sys.stderr,
        )
        from fd_conformance.cli.summary import verdict_line

        print(verdict_line(document))
        if not quiet:
            print_report_paths(out)
        return EXIT_INCOMPLETE
    document = json.loads(json_path.read_text(encoding="utf-8"))
    if shard_cli.is_empty_shard(document) and returncode == PYTEST_OK:
        return shard_cli.report_empty_shard(document, out, quiet=quiet)
    # pytest failing while the matrix passes: something outside the matrix failed (a fixture
    # error in a non-suite test, a plugin's own check), which the matrix alone would hide.
    outside = returncode == PYTEST_TESTS_FAILED and (
        document["exit_code"] == EXIT_OK or bool(document["run"].get("outside_failures"))
    )
    code = report_run(document, out, outside_failures=outside, quiet=quiet, allow_empty=allow_empty)
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


def report_run(
    document: dict[str, Any], out: Path, outside_failures: bool = False, quiet: bool = False, allow_empty: bool = False
) -> int:
    """Print the matrix and where the reports are; the exit code from the verdicts (and from
    failures pytest reported outside the matrix). No check ran: EXIT_NOTHING_CERTIFIED with the
    reason (a CI job must not go green having certified nothing), unless ``allow_empty``."""
    from fd_conformance.cli.summary import verdict_line
    from fd_conformance.report import format_document_matrix, nothing_ran_reason, results_from_records, write_reports

    results = results_from_records(document["results"])
    owed_left_out = document["run"].get("deselected") or document["run"]["not_run"]
    if not any(r.outcome != "skipped" for r in results) and not owed_left_out:
        # The child judged with --fd-allow-empty (see pytest_command): its reports say what this
        # command exits with only once rewritten with the user's own --allow-empty.
        reason = nothing_ran_reason(results)
        write_reports(out, results, bool(document["expect_mutants"]), nothing_certified=reason, allow_empty=allow_empty)
        print(
            f"fd-conformance run: certified nothing: {reason}; fix: pass --model SPEC or install a package "
            "registering fd_conformance.cases, check --runtime/--device (cuda rows and graphs='native' cases need a GPU), or pass --allow-empty",
            file=sys.stderr,
        )
        return EXIT_OK if allow_empty else EXIT_NOTHING_CERTIFIED
    if not quiet:
        print(format_document_matrix(document))
        print()
    code = EXIT_VIOLATIONS if outside_failures else int(document["exit_code"])
    line = verdict_line({**document, "exit_code": code})
    if outside_failures:
        line += " pytest reported failures outside the matrix, see pytest.log"
    print(line)
    if not quiet:  # -q: the verdict line only, as its help says
        for name in (*REPORT_FILES, RESULTS_NAME):
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
        sys.exit(err.exit_code)
