"""``fd-conformance``: run | lint | report | merge | changed | fastdeploy | explain.

The command line lives here only (argparse nowhere else in the kit's own commands).

One module per subcommand (:mod:`.run`, :mod:`.lint`, :mod:`.report`, :mod:`.merge`, :mod:`.changed`, :mod:`.fastdeploy`, :mod:`.explain`), each
adding its subparser and a ``func`` (args -> exit code) over the package that does the work; none
of them imports a framework at module import time, so ``fd-conformance --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from fd_conformance import __version__
from fd_conformance.cli import changed as changed_cli
from fd_conformance.cli import explain as explain_cli
from fd_conformance.cli import fastdeploy as fastdeploy_cli
from fd_conformance.cli import lint as lint_cli
from fd_conformance.cli import merge as merge_cli
from fd_conformance.cli import report as report_cli
from fd_conformance.cli import run as run_cli
from fd_conformance.cli.pipes import tolerate_closed_pipes
from fd_conformance.errors import EXIT_SIGINT, UsageError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fd-conformance", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"fd-conformance {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    lint_cli.add_cli(sub)  # `lint PATH`: static graph-lifecycle checks
    run_cli.add_cli(sub)  # `run`: the suites over models -> matrix, JSON, JUnit, certificate
    report_cli.add_cli(sub)  # `report FILE`: matrix from a results JSONL
    merge_cli.add_cli(sub)  # `merge DIR...`: one report from the shards of a run
    changed_cli.add_cli(sub)  # `changed --base REV`: model cases a git change can affect
    fastdeploy_cli.add_cli(sub)  # `fastdeploy PATH`: the real engine on CPU
    explain_cli.add_cli(sub)  # `explain CODE`: a finding code's page
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    with tolerate_closed_pipes():  # `fd-conformance run | head`: the run goes on, its reports and exit code intact
        return _run_command(build_parser().parse_args(argv))


def _run_command(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args))
    except UsageError as err:
        print(f"fd-conformance {args.command}: error: {err}", file=sys.stderr)
        return err.exit_code  # EXIT_USAGE, or EXIT_INCOMPLETE for an unreadable results file
    except KeyboardInterrupt:  # Ctrl-C before `run` installed its own handler: no traceback either
        print(f"fd-conformance {args.command}: interrupted", file=sys.stderr)
        return EXIT_SIGINT
