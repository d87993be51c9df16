"""Capture sizes (FDC306): which sizes each model declares, and whether each got a graph of its own.

Kept apart from :mod:`._support` (which re-exports these names: the code registry and older
imports name them there) so each helper module stays one subject.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fd_conformance.findings import Finding, Location, make_finding

SIZE_FIELDS = {"main": "capture_sizes", "draft": "draft_capture_sizes"}


def declared_sizes(case: Any, subject: Any) -> dict[str, tuple[int, ...]]:
    """Per model role, the sizes the case says it captures, largest first (the draft's default to
    the main model's: ``ModelCase.draft_sizes``)."""
    sizes = {"main": tuple(sorted(set(case.capture_sizes), reverse=True))}
    if subject.draft is not None:
        sizes["draft"] = tuple(sorted(set(case.draft_sizes), reverse=True))
    return sizes


def step_sizes(case: Any, subject: Any) -> list[int]:
    """Every declared size of main and draft, largest first: one step at each makes every graph
    exist, captured eagerly or lazily on first use."""
    return sorted({size for sizes in declared_sizes(case, subject).values() for size in sizes}, reverse=True)


GraphKey = tuple[int, str]  # (identity, label): a graph, for as long as it lives


def capture_size_findings(
    declared: Mapping[str, Sequence[int]],
    replayed: Mapping[int, Sequence[GraphKey]],
    roles: Mapping[GraphKey, str],
    wrappers: Mapping[str, str],
) -> list[Finding]:
    """FDC306 for every declared size whose step replayed no graph of its own, per model.

    ``replayed`` maps a step's token count to the graphs its forward replayed (a size missing from
    it is not judged: its step did not complete); ``roles`` maps a graph to "main", "draft" or
    "unattributed" (held by neither wrapper alone, e.g. in a runner's bank: it counts for either
    model, and is judged only at the sizes both declare); ``wrappers`` names each role's class. A
    graph that the step of a LARGER declared size replays too is that size's graph: the smaller
    step was padded into it.

    A graph is its identity AND its label: an identity is an address, which a graph made after
    another died may take (a cache evicting its least recently used graph mid-steps), and a
    native graph's label is numbered, so the size-1 graph that took the evicted size-4 graph's
    address is not "the size-4 graph replayed at 1".
    """
    findings: list[Finding] = []
    common = set.intersection(*(set(sizes) for sizes in declared.values())) if declared else set()
    judged: dict[str, Sequence[int]] = {**declared, "unattributed": sorted(common, reverse=True)}
    for role, all_sizes in judged.items():
        sizes = [size for size in all_sizes if size in replayed]
        steps = {size: _graphs_of(replayed[size], roles, role) for size in sizes}
        # A graph belongs to the largest declared size whose step replayed it.
        owner: dict[GraphKey, int] = {}
        for size in sorted(sizes):
            owner.update(dict.fromkeys(steps[size], size))
        own = [size for size in sizes if any(owner[graph] == size for graph in steps[size])]
        for size in sizes:
            graphs = steps[size]
            if not graphs:
                if role != "unattributed" and not _graphs_of(replayed[size], roles, "unattributed"):
                    findings.append(_no_graph(role, size, own, wrappers))
            elif all(owner[graph] > size for graph in graphs):
                findings.append(_padded_into(role, size, graphs, owner, wrappers))
    return findings


def _graphs_of(step: Sequence[GraphKey], roles: Mapping[GraphKey, str], role: str) -> list[GraphKey]:
    """The graphs of ``role`` among those one step replayed, once each, in replay order."""
    return list(dict.fromkeys(graph for graph in step if roles.get(graph, "unattributed") == role))


def _whose(role: str, wrappers: Mapping[str, str]) -> str:
    if role == "unattributed":
        return "the runner (a graph held by neither wrapper alone)"
    return f"{role} wrapper {wrappers[role]}"


def _no_graph(role: str, size: int, own: Sequence[int], wrappers: Mapping[str, str]) -> Finding:
    above = f" (larger than every size that has one: {max(own)})" if own and size > max(own) else ""
    field = f"{SIZE_FIELDS[role]}={tuple(own)!r}" if own else SIZE_FIELDS[role]  # the sizes it does capture
    return make_finding(
        "FDC306",
        f"capture size {size} has no {role} graph{above}: the {size}-token step of {_whose(role, wrappers)} replayed no graph",
        Location(obj=f"{_whose(role, wrappers)}: capture size {size}"),
        size=size,
        field=field,
    )


def _padded_into(
    role: str, size: int, graphs: Sequence[GraphKey], owner: Mapping[GraphKey, int], wrappers: Mapping[str, str]
) -> Finding:
    shown = ", ".join(f"{label!r} (the graph of size {owner[(gid, label)]})" for gid, label in graphs)
    field = SIZE_FIELDS.get(role, "capture_sizes and draft_capture_sizes")
    kind = "" if role == "unattributed" else f"{role} "
    return make_finding(
        "FDC306",
        f"capture size {size} has no {kind}graph of its own: the {size}-token step of {_whose(role, wrappers)} "
        f"replayed {shown}, padded up instead of a graph captured at {size}",
        Location(obj=f"{_whose(role, wrappers)}: capture size {size}"),
        size=size,
        field=field,
    )


def no_graph_findings(case: Any, subject: Any, roles: Sequence[str], after: str) -> list[Finding]:
    """FDC306 for each model of ``roles`` ("main", "draft") that owns no graph at all ``after``
    capture_model() and a step per size: none of its declared sizes has a graph, and a check
    judging its graphs (teardown order, clear) would judge nothing -- a vacuous pass otherwise."""
    declared = declared_sizes(case, subject)
    found = []
    for role in roles:
        model = subject.draft if role == "draft" else subject.wrapper
        whose = f"{role} wrapper {type(model).__qualname__}"
        sizes = declared.get(role, ())
        found.append(
            make_finding(
                "FDC306",
                f"{role} graph flag on, but no {role} graph exists after {after}: {whose} has a graph for none of "
                f"its capture sizes {sizes!r}",
                Location(obj=f"{whose}: capture sizes {sizes!r}"),
                size=", ".join(map(str, sizes)),
                field=SIZE_FIELDS[role],
            )
        )
    return found
