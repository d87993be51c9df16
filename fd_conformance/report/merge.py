"""One report from N shards: each shard's conformance.json checked against the others, its results
(and the checks it owed without a result) folded into one document, judged once.

A shard's conformance.json carries a ``shard`` stamp (:func:`stamp_shard`, written by the plugin
under ``--fd-shard``): its index and count, the cases it certified and the case set it was cut
from, its environment (Python, frameworks), the run settings that change verdicts and the run's id
(fd_conformance.plugin.shard.shard_stamp). The merge refuses, with
:data:`~fd_conformance.errors.EXIT_SHARDS`, outputs that cannot be one run: other kit, Python or
framework versions, run settings (cycles, timeouts, ...), run ids, case sets, devices, mutant
settings or shard counts, a shard given twice, a missing shard, a case in two shards or none
(different durations files). Then the rows are judged from the shards' results and the checks they
owed (``run.owed``: keyed as the plan keyed them) exactly as the unsharded session judges its own
(:func:`~fd_conformance.report.document.build_document`), so verdicts, findings and per-check
outcomes are the same; only timings and the order of rows can differ.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fd_conformance.errors import EXIT_SHARDS, UsageError
from fd_conformance.report.document import CERTIFICATE_NAME, JSON_NAME, build_document, owed_result
from fd_conformance.report.results import SKIPPED, CheckResult, results_from_records
from fd_conformance.report.verdicts import nothing_ran_reason

SHARD_FIELD = "shard"
STAMP_KEYS = ("environment", "settings", "run_id")  # stamped since the merge checks them (issue 51)
SAME_RUN = "merge the shards of one run (same kit, cases, devices and --shard N), rerunning any that differ"
SAME_ENVIRONMENT = "run every shard on the same Python and framework versions, rerunning any that differ"
SAME_SETTINGS = (
    "run every shard with the same options (--cycles, --runtime, --fd-timeout, --fd-isolate, -k, -m), rerunning any that differ"
)
SAME_RUN_ID = (
    "merge the shards of one run: give every shard the same `run --run-id` (by default a CI run's id, e.g. "
    "GITHUB_RUN_ID), rerunning any from another run"
)


class ShardsRefused(UsageError):
    """The shard outputs given to ``merge`` do not make one run: its own exit code (EXIT_SHARDS)."""

    exit_code = EXIT_SHARDS


def stamp_shard(out: Path, shard: Mapping[str, Any]) -> None:
    """Add the session's shard to the conformance.json (and a line to the certificate) in ``out``."""
    path = out / JSON_NAME
    document = json.loads(path.read_text(encoding="utf-8"))
    document[SHARD_FIELD] = dict(shard)
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    with (out / CERTIFICATE_NAME).open("a", encoding="utf-8") as certificate:
        certificate.write(f"\n{shard_line(shard)}\n")


def shard_line(shard: Mapping[str, Any]) -> str:
    """One line saying which shard a report is and that the merge judges the run."""
    held = f"{len(shard['cases'])} of {len(shard['all_cases'])} case(s)" if shard["cases"] else "no case (an empty shard)"
    return (
        f"Shard {shard['index']}/{shard['count']} of a sharded run: {held}, balanced by {shard['balanced_by']}; "
        "`fd-conformance merge` over every shard's directory writes the run's report."
    )


@dataclass(frozen=True)
class ShardOutput:
    """One shard's conformance.json, read from the directory (or file) given to ``merge``."""

    source: Path  # as given: the shard's report directory, or its conformance.json
    document: dict[str, Any]

    @property
    def shard(self) -> dict[str, Any]:
        stamp: dict[str, Any] = self.document[SHARD_FIELD]
        return stamp

    @property
    def label(self) -> str:
        return f"{self.source} (shard {self.shard['index']}/{self.shard['count']})"


def load_shard(source: str | Path) -> ShardOutput:
    """A shard's output: a directory holding conformance.json (``run --shard``'s --out, pytest's
    --fd-report) or the file itself. Unreadable: a usage error; not a shard's: refused."""
    given = Path(source)
    path = given / JSON_NAME if given.is_dir() else given
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise UsageError(
            f"cannot read {str(path)!r} ({err.strerror})",
            "pass each shard's report directory (the --out of `fd-conformance run --shard K/N`)",
        ) from None
    except ValueError:
        raise UsageError(f"{str(path)!r} is not a conformance.json", "pass each shard's report directory") from None
    if not isinstance(document, dict) or "results" not in document or "environment" not in document:
        raise UsageError(f"{str(path)!r} is not a conformance.json", "pass each shard's report directory")
    if not isinstance(document.get(SHARD_FIELD), dict):
        raise ShardsRefused(
            f"{str(given)!r} is not a shard's report (its conformance.json has no shard stamp: an unsharded, merged "
            "or interrupted run wrote it)",
            "pass the report directories of `fd-conformance run --shard K/N` (rerun a shard that was interrupted)",
        )
    if any(key not in document[SHARD_FIELD] for key in STAMP_KEYS) or "owed" not in document.get("run", {}):
        from fd_conformance import __version__

        raise ShardsRefused(
            f"{str(given)!r} was written by an older fd-conformance (its shard stamp has no environment, run settings "
            "or run id, or its run no owed checks), so the merge cannot check it belongs to the run",
            f"rerun every shard with fd-conformance {__version__}",
        )
    return ShardOutput(given, document)


def _one(shards: Sequence[ShardOutput], what: str, value: Any, fix: str = SAME_RUN) -> None:
    """Refuse when ``value(shard)`` differs between the shards, naming two that differ."""
    first = shards[0]
    for other in shards[1:]:
        if value(other) != value(first):
            raise ShardsRefused(
                f"the shards come from different {what}: {first.label} has {_show(value(first))}, "
                f"{other.label} has {_show(value(other))}",
                fix,
            )


def _show(value: Any) -> str:
    if isinstance(value, list) and len(value) > 4:
        return f"{len(value)} ({', '.join(map(str, value[:3]))}, ...)"
    return str(value)


def _frameworks(output: ShardOutput) -> dict[str, str | None]:
    """The shard's installed framework versions (None: not installed)."""
    found: dict[str, str | None] = output.shard["environment"].get("frameworks", {})
    return found


def check_shards(shards: Sequence[ShardOutput]) -> None:
    """Refuse (:class:`ShardsRefused`) shard outputs that do not make one whole run."""
    _one(shards, "kit versions", lambda s: s.document["environment"].get("kit_version"))
    _one(shards, "Python versions", lambda s: s.shard["environment"].get("python"), SAME_ENVIRONMENT)
    for name in sorted({name for s in shards for name in _frameworks(s)}):
        _one(shards, f"{name} versions", lambda s, name=name: _frameworks(s).get(name) or "not installed", SAME_ENVIRONMENT)
    for key in sorted({key for s in shards for key in s.shard["settings"]}):
        _one(shards, f"run settings ({key})", lambda s, key=key: s.shard["settings"].get(key), SAME_SETTINGS)
    _one(shards, "runs (run ids)", lambda s: s.shard["run_id"], SAME_RUN_ID)
    _one(shards, "shard counts", lambda s: s.shard["count"])
    _one(shards, "case sets", lambda s: sorted(s.shard["all_cases"]))
    _one(shards, "device rows", lambda s: s.shard["devices"])
    _one(shards, "mutant settings (--include-mutants)", lambda s: bool(s.document.get("expect_mutants")))
    count = shards[0].shard["count"]
    by_index: dict[int, ShardOutput] = {}
    for output in shards:
        index = output.shard["index"]
        if index in by_index:
            raise ShardsRefused(
                f"shard {index}/{count} is given twice: {by_index[index].source} and {output.source}",
                "pass each shard's directory once",
            )
        by_index[index] = output
    missing = [i for i in range(1, count + 1) if i not in by_index]
    if missing:
        names = ", ".join(f"{i}/{count}" for i in missing)
        raise ShardsRefused(
            f"shard {names} {'is' if len(missing) == 1 else 'are'} missing (given: {', '.join(f'{i}/{count}' for i in sorted(by_index))})",
            "pass the report directory of every shard of the run (download every shard's artifact)",
        )
    holder: dict[str, int] = {}
    for output in sorted(shards, key=lambda s: s.shard["index"]):
        for case in output.shard["cases"]:
            if case in holder:
                raise ShardsRefused(
                    f"case {case!r} is in shard {holder[case]}/{count} and shard {output.shard['index']}/{count}",
                    "give every shard the same --durations file (or none), so all compute one partition",
                )
            holder[case] = output.shard["index"]
    orphans = [case for case in shards[0].shard["all_cases"] if case not in holder]
    if orphans:
        raise ShardsRefused(
            f"case {orphans[0]!r} is in no shard" + (f" (and {len(orphans) - 1} more)" if len(orphans) > 1 else ""),
            "give every shard the same --durations file (or none), so all compute one partition",
        )


def merged_results(shards: Sequence[ShardOutput]) -> list[CheckResult]:
    """Every shard's results and the checks it owed without one (as its plan keyed them), in case
    order then test id."""
    results: list[CheckResult] = []
    for output in shards:
        document = output.document
        results += results_from_records(document["results"])
        results += [owed_result(entry) for entry in document["run"]["owed"]]
    order = {case: i for i, case in enumerate(shards[0].shard["all_cases"])}
    return sorted(results, key=lambda r: (order.get(r.case, len(order)), r.device, r.nodeid))


def merge_documents(shards: Sequence[ShardOutput], allow_empty: bool = False) -> dict[str, Any]:
    """The conformance.json of the whole run, from its checked shards (:func:`check_shards` first)."""
    results = merged_results(shards)
    expect_mutants = bool(shards[0].document.get("expect_mutants"))
    interrupted = next(
        (f"shard {s.shard['index']}/{s.shard['count']}: {s.document['run'].get('reason') or 'interrupted'}" for s in shards
         if s.document.get("run", {}).get("status") == "interrupted"),
        None,
    )  # fmt: skip
    nothing = None
    if not any(r.outcome != SKIPPED for r in results):
        nothing = nothing_ran_reason(results) if results else "no shard certified a case (the run selected none)"
    outside = [nodeid for s in shards for nodeid in s.document.get("run", {}).get("outside_failures", [])]
    document = build_document(results, expect_mutants, interrupted, nothing, allow_empty, outside)
    document["environment"] = merged_environment(shards, document["environment"]["runtimes"])
    return document


def merged_environment(shards: Sequence[ShardOutput], runtimes: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's environment as its shards recorded it (checked equal), never the merging machine's:
    the kit and Python of the shards, the hosts they ran on, the runtimes their results name."""
    platforms = dict.fromkeys(str(s.document["environment"].get("platform", "")) for s in shards)
    return {
        "kit_version": shards[0].document["environment"]["kit_version"],
        "python": shards[0].shard["environment"]["python"],
        "platform": " | ".join(platforms),
        "runtimes": runtimes,
    }
