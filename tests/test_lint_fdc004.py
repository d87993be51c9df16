"""FDC004 (near-miss names): the distance rule, and private helpers spelled right are no typo."""

from __future__ import annotations

from pathlib import Path

from _lint_helpers import codes_at

from fd_conformance.lint import CANONICAL, LEGACY, near_miss


def test_near_miss_distance() -> None:
    assert near_miss("clear_graph_opt_backed") == CANONICAL
    assert near_miss("clear_grpah_opt_backnd") == LEGACY
    assert near_miss("clear_gph_opt_backend") == CANONICAL  # two deletions
    assert near_miss("clear_g_opt_backend") is None  # four deletions
    assert near_miss(CANONICAL) is None and near_miss(LEGACY) is None
    assert near_miss("clear_cudagraph_piecewise_backend") is None
    assert near_miss("clr_grph_opt_backnd") is None  # distance 4


def test_private_helpers_spelled_right_are_not_near_misses(tmp_path: Path) -> None:
    """Item 8: _clear_graph_opt_backend (a helper) was an error-level FDC004."""
    for name in (f"_{CANONICAL}", f"__{CANONICAL}", f"_{LEGACY}", f"{CANONICAL}_"):
        assert near_miss(name) is None, name
    assert near_miss("clear_graph_opt_backendd") == CANONICAL  # a real typo still is one
    src = tmp_path / "m.py"
    src.write_text(f"class R:\n    def _{CANONICAL}(self):\n        self.x._{CANONICAL}()\n")
    assert codes_at(src) == []
