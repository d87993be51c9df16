"""Which cases a session certifies: explicit specs or installed cases, a selection file, a runtime.

Why here and not with ``changed``: ``run --cases-file`` and the plugin read a selection file
without any git; ``fd-conformance changed`` only writes one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fd_conformance.cases.contract import ModelCase
from fd_conformance.cases.loading import installed_cases_with_origin, load_spec_with_origin
from fd_conformance.errors import UsageError
from fd_conformance.frameworks import FRAMEWORKS

KNOWN_RUNTIMES = FRAMEWORKS  # the name cases/ has always exported


def read_selection(path: str | Path) -> list[str]:
    """Case names from a selection file: one per line, ``#`` starts a comment, blanks ignored.

    Duplicates are dropped (first kept) because a hand-edited file often repeats a name, and
    running a case twice would only double the CI time.
    """
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as err:
        raise UsageError(
            f"cannot read cases file {source}: {err.strerror}",
            "pass the file `fd-conformance changed --output FILE` wrote",
        ) from None
    names: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        name = raw.split("#", 1)[0].strip()
        if not name:
            continue
        if len(name.split()) != 1:
            raise UsageError(
                f"cases file {source} line {number}: {name!r} is not one case name",
                "write one case name per line (comments start with #)",
            )
        if name not in names:
            names.append(name)
    return names


def apply_selection(cases: Sequence[ModelCase], names: Sequence[str], source: str) -> list[ModelCase]:
    """The cases ``names`` selects, in the given case order; an unknown name is a usage error.

    Unknown names are errors, not skips: a typo or a renamed case would otherwise certify
    nothing and still pass CI.
    """
    by_name = {case.name: case for case in cases}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        known = ", ".join(sorted(by_name)) or "none"
        raise UsageError(
            f"{source} names unknown case(s) {', '.join(map(repr, unknown))}",
            f"regenerate it with `fd-conformance changed` or use one of: {known}",
        )
    wanted = set(names)
    return [case for case in cases if case.name in wanted]


def select_cases(
    specs: Sequence[str],
    *,
    runtime: str = "auto",
    include_mutants: bool = False,
    installed_runtimes: Sequence[str] = FRAMEWORKS,
    selection: Sequence[str] | None = None,
    selection_source: str = "--fd-cases-file",
) -> list[ModelCase]:
    """The cases a session certifies.

    Explicit specs are taken as given (a mutant named explicitly is tested like any model);
    without specs, the installed good cases, plus the mutants when ``include_mutants``.
    ``selection`` (case names from a cases file) keeps only those; it is matched before the
    runtime filter, so a name whose framework is not installed here is skipped, not "unknown".
    ``runtime`` keeps only that framework's cases; "auto" keeps every installed framework's.
    """
    if specs:
        found = [pair for spec in specs for pair in load_spec_with_origin(spec)]
        if include_mutants:
            found.extend(pair for pair in installed_cases_with_origin() if pair[0].is_mutant)
    else:
        found = [pair for pair in installed_cases_with_origin() if include_mutants or not pair[0].is_mutant]
    # Before any filter: a duplicate or a misspelt runtime must be reported whichever rows run here,
    # not dropped silently (a 'pytorch' case would otherwise vanish as "not installed").
    origins: dict[str, tuple[ModelCase, str]] = {}
    for case, origin in found:
        if case.runtime not in KNOWN_RUNTIMES:
            raise UsageError(
                f"case {case.name!r} from {origin} names runtime {case.runtime!r}, which is not one of {', '.join(KNOWN_RUNTIMES)}",
                f"set ModelCase(runtime=...) to one of {', '.join(KNOWN_RUNTIMES)}",
            )
        first = origins.get(case.name)
        if first is not None and first[0] != case and first[1] != origin:  # one spec given twice is one source
            raise UsageError(
                f"two different cases are named {case.name!r}: one from {first[1]}, one from {origin}",
                "give every ModelCase a unique name",
            )
        origins.setdefault(case.name, (case, origin))
    cases = [case for case, _ in origins.values()]
    if selection is not None:
        cases = apply_selection(cases, selection, selection_source)
    if runtime == "auto":
        return [c for c in cases if c.runtime in installed_runtimes]
    kept = [c for c in cases if c.runtime == runtime]
    if specs and cases and not kept:
        # The user named models and a framework none of them is written for: a mismatch to name,
        # not a session of "no cases" pseudo-rows.
        names = ", ".join(f"{c.name} ({c.runtime})" for c in cases[:5]) + (" ..." if len(cases) > 5 else "")
        raise UsageError(
            f"runtime {runtime!r} matches none of the {len(cases)} case(s) given: {names}",
            f"drop the runtime option or set it to {' or '.join(sorted({c.runtime for c in cases}))}",
        )
    return kept
