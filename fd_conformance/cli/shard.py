"""``fd-conformance run --shard K/N [--durations FILE] [--run-id ID]``: the options, their checks, and what an empty
shard prints. The partition itself is :mod:`fd_conformance.cases.shard`'s, computed by the plugin in
the pytest child (``--fd-shard``), which stamps it into conformance.json for ``merge``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fd_conformance.cases.shard import parse_shard, read_durations
from fd_conformance.errors import EXIT_OK, UsageError

SHARD_HELP = (
    "certify only shard K of N (e.g. --shard 2/3, one per CI runner): whole cases, the same partition on every "
    "machine, balanced by --durations when given, by case count otherwise; `fd-conformance merge` rebuilds the run's "
    "report from the N shards' --out directories. A shard with no case (N above the cases) exits 0 and says so"
)
DURATIONS_HELP = (
    "balance --shard by the per-case seconds an earlier run recorded: its OUT/results.jsonl or OUT/conformance.json "
    "(a merged one too), or a JSON object {case: seconds}; give every shard the same file"
)

RUN_ID_HELP = (
    "with --shard: the id of the run this shard belongs to, the same for every shard (e.g. the CI run's number); "
    "`merge` refuses shards whose ids differ. Default: the CI's run id (GITHUB_RUN_ID, CI_PIPELINE_ID, "
    "BUILDKITE_BUILD_ID, CIRCLE_WORKFLOW_ID or BUILD_BUILDID), else a hash of the run's settings and environment"
)


def add_shard_arguments(parser: argparse.ArgumentParser) -> None:
    """``--shard``, ``--durations`` and ``--run-id`` on ``run``'s parser (checked in
    :func:`validate_shard_args`, so a bad value is one line, as every other usage error)."""
    parser.add_argument("--shard", default=None, metavar="K/N", help=SHARD_HELP)
    parser.add_argument("--durations", default=None, metavar="FILE", help=DURATIONS_HELP)
    parser.add_argument("--run-id", default=None, metavar="ID", help=RUN_ID_HELP)


def validate_shard_args(args: argparse.Namespace) -> None:
    """Fail in milliseconds, under run's option names, on a bad ``K/N`` or an unreadable durations file."""
    if args.shard is not None:
        parse_shard(args.shard, "--shard")
    if args.durations is not None:
        read_durations(args.durations, "--durations")
        if args.shard is None:
            raise UsageError("--durations balances shards, and no --shard was given", "pass --shard K/N too, or drop --durations")
    run_id = getattr(args, "run_id", None)
    if run_id is not None and (args.shard is None or not run_id.strip()):
        problem = "--run-id names a sharded run, and no --shard was given" if args.shard is None else "--run-id is empty"
        raise UsageError(problem, "pass --shard K/N and the same non-empty --run-id to every shard, or drop --run-id")


def shard_pytest_args(args: argparse.Namespace) -> list[str]:
    """The plugin options that carry ``--shard``/``--durations``/``--run-id`` into the pytest child."""
    cmd = []
    if getattr(args, "shard", None) is not None:
        cmd.append(f"--fd-shard={args.shard.strip()}")
    if getattr(args, "durations", None) is not None:
        cmd.append(f"--fd-durations={Path(args.durations).resolve()}")
    if getattr(args, "run_id", None) is not None:
        cmd.append(f"--fd-run-id={args.run_id.strip()}")
    return cmd


def is_empty_shard(document: Mapping[str, Any]) -> bool:
    shard = document.get("shard")
    return isinstance(shard, Mapping) and not shard.get("cases")


def report_empty_shard(document: Mapping[str, Any], out: Path, quiet: bool = False) -> int:
    """An empty shard (N above the cases) certified nothing, on purpose: exit 0 with the reason,
    never "certified nothing" (4), which would fail a CI matrix that is simply wider than the cases.
    Its reports are written (stamped with the shard), so the merge can check it belongs."""
    from fd_conformance.cli.outdir import REPORT_FILES

    shard = document["shard"]
    print(
        f"fd-conformance run: empty shard: shard {shard['index']}/{shard['count']} holds no case "
        f"({shard['count']} shards for {len(shard['all_cases'])} case(s)); nothing to certify here, "
        "`fd-conformance merge` over every shard judges the run",
        file=sys.stderr,
    )
    print(f"fd-conformance: PASS (empty shard {shard['index']}/{shard['count']})")
    if not quiet:
        for name in REPORT_FILES:
            print(f"  {out / name}")
    return EXIT_OK
