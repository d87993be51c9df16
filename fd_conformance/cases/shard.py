"""Sharding a certification over machines: which whole cases shard K of N certifies.

A CI matrix of N runners is the distributed engine (Playwright's ``--shard=K/N``, pytest-split's
duration-balanced groups): each runner computes the same partition from the same inputs and keeps
its own part. The unit is the CASE, never a single check: a case's checks share a built model, and
a row split over two machines would be owed by neither.

The partition is greedy longest-first: cases sorted by their recorded seconds (longest first, ties
by name), each placed on the shard with the least total so far (ties: the lowest index). With no
durations every case weighs 1, which deals the cases out round-robin in name order. Every machine
sorts the same names the same way, so the partition depends only on the case names, N and the
durations file: never on the order cases were loaded in, the host, or the Python version.

Nothing here imports a framework or pytest: ``run`` validates ``--shard`` and the plugin partitions
with the same functions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from fd_conformance.errors import UsageError

T = TypeVar("T")

SHARD_FORM = "K/N, two integers with 1 <= K <= N (e.g. 2/3)"


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (1-based, as CI matrices count)."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str, source: str = "--shard") -> Shard:
    """``K/N`` as a :class:`Shard`; anything else (0, K > N, not integers) is a usage error."""
    index_text, sep, count_text = str(text).strip().partition("/")
    try:
        index, count = int(index_text), int(count_text)
    except ValueError:
        index = count = -1
    if not sep or index < 1 or count < 1 or index > count:
        raise UsageError(f"{source} {text!r} is not {SHARD_FORM}", f"pass e.g. {source} 1/2 (shard 1 of 2)")
    return Shard(index, count)


def read_durations(path: str | Path, source: str = "--durations") -> dict[str, float]:
    """Per-case seconds from a file a run writes: a results.jsonl (``run --out``'s, or pytest
    ``--fd-results``), a conformance.json (a run's, or a merged one), or a JSON object
    ``{"case name": seconds}``. A case's seconds are the sum over its checks and devices."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as err:
        raise UsageError(
            f"cannot read {source} file {str(file)!r}: {err.strerror}",
            "pass OUT/results.jsonl or OUT/conformance.json of an earlier run",
        ) from None
    records: list[Mapping[str, Any]] = []
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
        try:
            records = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError:
            records = []
    if isinstance(whole, dict) and isinstance(whole.get("results"), list):
        records = whole["results"]  # a conformance.json
    elif isinstance(whole, dict) and all(_seconds(v) is not None for v in whole.values()):
        return {str(name): float(seconds) for name, seconds in whole.items()}
    elif isinstance(whole, dict):
        records = [whole]  # a one-line results.jsonl
    durations: dict[str, float] = {}
    for record in records:
        if isinstance(record, Mapping) and record.get("case") and _seconds(record.get("duration")) is not None:
            durations[str(record["case"])] = durations.get(str(record["case"]), 0.0) + float(record["duration"])
    if not durations:
        raise UsageError(
            f"{source} file {str(file)!r} records no case durations",
            "pass OUT/results.jsonl or OUT/conformance.json of an earlier run, or a JSON object {case: seconds}",
        )
    return durations


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def partition(names: Iterable[str], count: int, durations: Mapping[str, float] | None = None) -> list[list[str]]:
    """``count`` shards of ``names`` (duplicates counted once), each a sorted list; every name lands
    in exactly one shard. Greedy longest-first onto the lightest shard, ties by name and by shard
    index, so it is the same on every machine; with ``durations`` None every name weighs 1. A name the
    durations do not record weighs the mean of the recorded ones (a new case is assumed typical)."""
    unique = sorted(set(names))
    weights = dict.fromkeys(unique, 1.0)
    if durations:
        known = [durations[n] for n in unique if n in durations]
        default = sum(known) / len(known) if known else 1.0
        weights = {n: float(durations.get(n, default)) for n in unique}
    loads = [0.0] * count
    shards: list[list[str]] = [[] for _ in range(count)]
    for name in sorted(unique, key=lambda n: (-weights[n], n)):
        lightest = min(range(count), key=lambda i: (loads[i], i))
        loads[lightest] += weights[name]
        shards[lightest].append(name)
    return [sorted(shard) for shard in shards]


def shard_of(items: Sequence[T], names: Sequence[str], shard: Shard, durations: Mapping[str, float] | None = None) -> list[T]:
    """The ``items`` (each named by ``names`` at the same position) of ``shard``, in their given order."""
    mine = set(partition(names, shard.count, durations)[shard.index - 1])
    return [item for item, name in zip(items, names, strict=True) if name in mine]
