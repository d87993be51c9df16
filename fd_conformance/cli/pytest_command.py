"""The pytest invocation ``fd-conformance run`` starts: the shipped suite, the kit's own ini and
plugins, the run's options spelled as the kit's pytest plugin reads them.

Apart from the command because it is what the benches time and the tests read (what a run asks
pytest for), and it changes with the plugin's options, not with how a run is supervised.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from fd_conformance.cli import shard as shard_cli  # --shard K/N, --durations FILE
from fd_conformance.cli.junit import SUITE_NAME as JUNIT_SUITE  # the run's junit.xml is marked with it (kit_wrote)
from fd_conformance.cli.outdir import RESULTS_NAME

# Imports inside functions below are for speed: cli/__init__ loads this module (through run) for
# every subcommand, and only `run` needs the GPU probe.

# The suite's sessions drop Hypothesis's pytest plugin (see pytest_command); the benches that time
# a suite session pass the same, so they time what this command runs.
NO_HYPOTHESIS_PLUGIN = ("-p", "no:hypothesispytest")

#: What the child imports before anything can report an error: pytest and what it requires. (A
#: plugin's module shadowed there dies with a traceback, whose last line the run's reason quotes.)
PYTEST_STARTUP_MODULES = ("pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging")


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
    cmd += getattr(args, "row_options", [])  # run --last-failed: the rows to run again (cli.last_failed)
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


def shadowed_modules(directory: Path) -> list[tuple[str, str]]:
    """(module, file) for each file or package in ``directory`` named like a module pytest imports
    at startup. The child has the user's cwd first on its PYTHONPATH (module:attr specs resolve
    there), so ./pytest.py would be run as pytest, and the session would die before it began."""
    from importlib.machinery import PathFinder

    here = directory.resolve()
    elsewhere = [entry for entry in sys.path if entry and Path(entry).resolve() != here]
    found = []
    for name in PYTEST_STARTUP_MODULES:
        spec = PathFinder.find_spec(name, [str(here)])
        if spec is None or spec.origin is None:  # none there, or a namespace portion (a bare folder): no shadow
            continue
        installed = PathFinder.find_spec(name, elsewhere)
        if installed is not None and installed.origin != spec.origin:  # pytest's own folder is no shadow
            found.append((name, spec.origin))
    return found


def absolute_spec(spec: str) -> str:
    """``rel/path.py:attr`` made absolute: pytest runs with another rootdir than the user's cwd."""
    module, sep, attr = spec.rpartition(":")
    if sep and module.endswith(".py"):
        return f"{Path(module).resolve()}:{attr}"
    return spec
