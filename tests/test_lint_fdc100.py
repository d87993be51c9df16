"""FDC100 (a file that cannot be read or parsed) and reading source as Python does: BOMs, coding
cookies, and line breaks that only str.splitlines() knows."""

from __future__ import annotations

from pathlib import Path

import pytest
from _lint_helpers import DEFAULTS, codes_at

from fd_conformance.lint import CANONICAL, fix_paths, lint_paths

# \x0c (form feed, PEP 8's page break), \x1c and \u2028 are line breaks to str.splitlines, not to ast.
ODD_BREAKS = (
    "x = 1\n\x0c\ns = 'a\x1cb\u2028c'\nobj.clear_grpah_opt_backend()  # noqa: FDC002\n\u00e9 = obj.clear_grpah_opt_backend()\n"
)


def test_noqa_and_columns_survive_splitlines_only_breaks(tmp_path: Path) -> None:
    """Item 6: every line after a form feed was off by one: noqa missed, columns from other text."""
    src = tmp_path / "m.py"
    src.write_text(ODD_BREAKS, encoding="utf-8")
    found = [(f.code, f.location.line, f.location.col) for f in lint_paths([src], DEFAULTS, root=tmp_path).findings]
    assert found == [("FDC002", 5, 9)]


@pytest.mark.parametrize(
    ("data", "encoding"),
    [
        (b"\xef\xbb\xbfclass A:\n    def clear_grpah_opt_backend(self): ...\n", "utf-8-sig"),
        (b"# -*- coding: latin-1 -*-\nS = '\xe9'\nclass A:\n    def clear_grpah_opt_backend(self): ...\n", "latin-1"),
    ],
)
def test_bom_and_coding_cookie_are_read_as_python_reads_them(tmp_path: Path, data: bytes, encoding: str) -> None:
    """Item 7: both were reported FDC100 (cannot parse / cannot read); --fix keeps the encoding."""
    src = tmp_path / "m.py"
    src.write_bytes(data)
    line = data.decode(encoding).count("\n")
    assert codes_at(src) == [("FDC002", line)]
    assert fix_paths([src], DEFAULTS, root=tmp_path) == [src]
    fixed = src.read_bytes()
    assert fixed.startswith(data[:3]) and fixed.decode(encoding).count(CANONICAL) == 2
    assert codes_at(src) == []


def test_unknown_coding_cookie_is_fdc100(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_bytes(b"# -*- coding: no-such-codec -*-\nx = 1\n")
    assert codes_at(src) == [("FDC100", 1)]
