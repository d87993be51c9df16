"""Issue 24 item 3: every declared capture size has a graph of its own, main and draft (FDC306).

The judgement (``suite._support.capture_size_findings``) on hand-made replay records: which graphs
each step replayed, and which model holds each graph. The suites feed it real replays
(tests/test_outside_sizes_descriptors_arena.py runs them on an outside model).
"""

from __future__ import annotations

from typing import Any

import pytest

from fd_conformance.cases import ModelCase
from fd_conformance.errors import MAX_CAPTURE_SIZE, UsageError
from fd_conformance.suite._support import capture_size_findings, declared_sizes, step_sizes

WRAPPERS = {"main": "TrunkLM", "draft": "SpecHead"}


def judge(
    declared: dict[str, tuple[int, ...]], steps: dict[int, list[str]], roles: dict[str, str], ids: dict[str, int] | None = None
) -> list[str]:
    """Messages for ``steps`` (size -> replayed graph labels); a label's identity is its hash
    unless ``ids`` gives one (two graphs at one address, one after the other)."""
    identity = {**{label: hash(label) for label in roles}, **(ids or {})}
    replayed = {size: [(identity[label], label) for label in labels] for size, labels in steps.items()}
    graphs = {(identity[label], label): role for label, role in roles.items()}
    return [f.message for f in capture_size_findings(declared, replayed, graphs, WRAPPERS) if f.code == "FDC306"]


def test_every_size_with_its_own_graph_passes() -> None:
    steps = {4: ["m4", "d4"], 2: ["m2", "d2"], 1: ["m1", "d1"]}
    roles = {label: "main" if label[0] == "m" else "draft" for labels in steps.values() for label in labels}
    assert judge({"main": (4, 2, 1), "draft": (4, 2, 1)}, steps, roles) == []


def test_a_size_padded_into_a_larger_graph_is_named() -> None:
    steps = {4: ["m4"], 2: ["m2"], 1: ["m2"]}
    (message,) = judge({"main": (4, 2, 1)}, steps, {"m4": "main", "m2": "main"})
    assert "capture size 1 has no main graph of its own" in message
    assert "main wrapper TrunkLM replayed 'm2' (the graph of size 2)" in message


def test_a_graph_at_an_evicted_graphs_address_is_its_own_size() -> None:
    """A lazy LRU evicts its size-4 graph mid-steps and captures size 1 at the freed address (the
    same id(), one after the other): size 1 has its own graph, it was not padded into size 4. This
    was a false FDC306 on Kiln's certified LRU, about 1 run in 36 under load."""
    steps = {4: ["K@4#1"], 3: ["K@3#2"], 2: ["K@2#3"], 1: ["K@1#4"]}
    roles = {"K@4#1": "main", "K@3#2": "main", "K@2#3": "main", "K@1#4": "main"}
    assert judge({"main": (4, 2, 1)}, steps, roles, ids={"K@4#1": 7, "K@1#4": 7}) == []
    # The same address replayed at 4 and at 1 by ONE graph is still padding.
    (padded,) = judge({"main": (4, 2, 1)}, {4: ["K@4#1"], 2: ["K@2#3"], 1: ["K@4#1"]}, roles)
    assert "replayed 'K@4#1' (the graph of size 4)" in padded


def test_a_size_above_every_graph_is_named_with_the_largest() -> None:
    steps: dict[int, list[str]] = {8: [], 4: ["m4"], 2: ["m2"]}
    (message,) = judge({"main": (8, 4, 2)}, steps, {"m4": "main", "m2": "main"})
    assert "capture size 8 has no main graph (larger than every size that has one: 4)" in message


def test_the_draft_is_judged_on_its_own_sizes() -> None:
    steps = {4: ["m4"], 2: ["m2", "d2"], 1: ["m1", "d2"]}
    roles = {"m4": "main", "m2": "main", "m1": "main", "d2": "draft"}
    (message,) = judge({"main": (4, 2, 1), "draft": (2, 1)}, steps, roles)
    assert "capture size 1 has no draft graph of its own" in message and "draft wrapper SpecHead" in message
    # The draft ran eagerly at 4: not a defect when it declares (2, 1) only, one when it owes 4.
    assert judge({"main": (4, 2, 1), "draft": (2,)}, {4: ["m4"], 2: ["m2", "d2"]}, roles) == []
    (owed,) = judge({"main": (4, 2), "draft": (4, 2)}, {4: ["m4"], 2: ["m2", "d2"]}, roles)
    assert "capture size 4 has no draft graph" in owed


def test_a_piecewise_step_with_one_own_graph_passes() -> None:
    """A step replaying a shared graph AND one of its own has its own graph."""
    steps = {4: ["shared", "m4"], 2: ["shared", "m2"]}
    assert judge({"main": (4, 2)}, steps, {"shared": "main", "m4": "main", "m2": "main"}) == []


def test_graphs_held_by_neither_wrapper_count_for_either_model() -> None:
    """A runner-owned bank: no "missing" finding while some graph replayed at the size; padding
    is judged at the sizes both models declare."""
    bank = {4: ["bank4m", "bank4d"], 2: ["bank2m", "bank2d"], 1: ["bank2m", "bank2d"]}
    roles = {label: "unattributed" for labels in bank.values() for label in labels}
    (message,) = judge({"main": (4, 2, 1), "draft": (4, 2, 1)}, bank, roles)
    assert "capture size 1 has no graph of its own" in message and "runner" in message
    # Size 1 declared by the draft only: the bank's padded graph may be the main model's (no verdict).
    assert judge({"main": (4, 2), "draft": (4, 2, 1)}, bank, roles) == []


def test_a_step_that_did_not_complete_is_not_judged() -> None:
    assert judge({"main": (4, 2)}, {4: ["m4"]}, {"m4": "main"}) == []


class _Subject:
    def __init__(self, draft: Any) -> None:
        self.draft = draft


def test_draft_sizes_default_to_the_main_ones_and_are_validated() -> None:
    case = ModelCase("m", "torch", lambda rt: None, (1, 4, 2))
    assert declared_sizes(case, _Subject(draft=object())) == {"main": (4, 2, 1), "draft": (4, 2, 1)}
    assert declared_sizes(case, _Subject(draft=None)) == {"main": (4, 2, 1)}
    own = ModelCase("m", "torch", lambda rt: None, (8, 4), draft_capture_sizes=(2, 1))
    assert own.draft_sizes == (2, 1) and step_sizes(own, _Subject(draft=object())) == [8, 4, 2, 1]
    for bad in ((), (2, 2), (0, 1)):
        with pytest.raises(UsageError, match="draft_capture_sizes"):
            ModelCase("m", "torch", lambda rt: None, (4,), draft_capture_sizes=bad)


# --- issue 36.7 a: capture sizes are refused when the case is built ---------------------------------


@pytest.mark.parametrize(
    ("sizes", "says"),
    [
        ((4, 2, 0), "capture_sizes (4, 2, 0) has 0: a token count is positive"),
        ((4, -2), "has -2: a token count is positive"),
        ((), "capture_sizes is empty"),
        ((4, 2.5), "has 2.5, which is not an integer token count"),
        ((4, True), "has True, which is not an integer token count"),
        (("4",), "has '4', which is not an integer token count"),
        ((4, 2, 2, 1), "capture_sizes (4, 2, 2, 1) lists 2 more than once"),
        (
            (10**9,),
            f"has 1000000000, above the largest capture size the kit runs (fd_conformance.errors.MAX_CAPTURE_SIZE = {MAX_CAPTURE_SIZE})",
        ),
        (4, "capture_sizes 4 is not a tuple of token counts"),
        ("421", "capture_sizes '421' is not a tuple of token counts"),
    ],
)
def test_bad_capture_sizes_are_refused_in_one_line_naming_the_case(sizes: Any, says: str) -> None:
    with pytest.raises(UsageError) as refused:
        ModelCase("my-glm4", "torch", lambda rt: None, sizes)
    message = str(refused.value)
    assert message.startswith("case 'my-glm4': capture_sizes") and says in message, message
    assert "\n" not in message and "; fix: " in message


def test_duplicate_sizes_get_the_deduplicated_tuple_as_the_fix() -> None:
    with pytest.raises(UsageError, match=r"fix: list each size once: \(4, 2, 1\)$"):
        ModelCase("m", "torch", lambda rt: None, (4, 2, 2, 1, 4))


def test_good_capture_sizes_are_kept_as_a_tuple_of_ints() -> None:
    numpy = pytest.importorskip("numpy")
    assert ModelCase("m", "torch", lambda rt: None, [numpy.int64(4), 2, 1]).capture_sizes == (4, 2, 1)
    assert ModelCase("m", "torch", lambda rt: None, (MAX_CAPTURE_SIZE, 1)).capture_sizes == (MAX_CAPTURE_SIZE, 1)
    with pytest.raises(UsageError, match="MAX_CAPTURE_SIZE"):
        ModelCase("m", "torch", lambda rt: None, (MAX_CAPTURE_SIZE + 1,))


@pytest.mark.parametrize("bad", [(2, True), (10**9,), (2.0, 1), ["x"]])
def test_draft_capture_sizes_share_the_validator(bad: Any) -> None:
    """The draft's sizes are judged by the same rules (bool, too large and non-integers once passed)."""
    with pytest.raises(UsageError, match="^case 'm': draft_capture_sizes [^;]*(integer|MAX_CAPTURE_SIZE)"):
        ModelCase("m", "torch", lambda rt: None, (4,), draft_capture_sizes=bad)
    assert ModelCase("m", "torch", lambda rt: None, (4,), draft_capture_sizes=[2, 1]).draft_capture_sizes == (2, 1)
