"""The clear method's two spellings and what counts as a typo of them: one module for every check.

Why one module: the protocol check (FDC004 on live classes) and the static linter (FDC004 on
source) must agree on what a near-miss is; two copies of the rule drifted apart before. A name
refused from any other fixed vocabulary (a ModelCase's capabilities and checks) is matched by the
same rule (:func:`closest`), so every "did you mean" of the kit means the same distance.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from rapidfuzz.distance import Levenshtein

CANONICAL = "clear_graph_opt_backend"
LEGACY = "clear_grpah_opt_backend"
SPELLINGS = (CANONICAL, LEGACY)
#: Edit distance (insertions, deletions, substitutions) up to which a name is a typo of a spelling.
NEAR_MISS_MAX_DISTANCE = 2


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (what a message reports: "2 edit(s) from clear_graph_opt_backend")."""
    return Levenshtein.distance(a, b)


@functools.lru_cache(maxsize=65536)
def near_miss(name: str) -> str | None:
    """The spelling ``name`` is a typo of (edit distance 1..2, canonical first), or None. Cached:
    the linter asks for every call name, and names repeat.

    Leading/trailing underscores are ignored for the exact-match test: ``_clear_graph_opt_backend``
    is a deliberate private helper spelled right, not a typo.
    """
    if abs(len(name) - len(CANONICAL)) > NEAR_MISS_MAX_DISTANCE or name.strip("_") in SPELLINGS:
        return None
    for target in SPELLINGS:
        # score_cutoff stops the computation once the distance must exceed it (C speed).
        if Levenshtein.distance(name, target, score_cutoff=NEAR_MISS_MAX_DISTANCE) <= NEAR_MISS_MAX_DISTANCE:
            return target
    return None


def closest(name: str, choices: Iterable[str], max_distance: int = NEAR_MISS_MAX_DISTANCE) -> str | None:
    """The choice ``name`` is a typo of: the fewest edits, case ignored (``Draft`` -> ``draft``), at
    most ``max_distance``; the first such choice on a tie; None when no choice is that near."""
    folded = name.casefold()
    best: tuple[int, str] | None = None
    for choice in choices:
        distance = Levenshtein.distance(folded, choice.casefold(), score_cutoff=max_distance)
        if distance <= max_distance and (best is None or distance < best[0]):
            best = (distance, choice)
    return None if best is None else best[1]
