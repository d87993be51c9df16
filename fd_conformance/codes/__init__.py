"""Every finding code's registry entry, one module per family (the hundreds digit names the package
that raises it): :mod:`.fdc0xx` protocol, :mod:`.fdc1xx` lint, :mod:`.fdc2xx` lifecycle,
:mod:`.fdc3xx` suite, :mod:`.fdc4xx` config, :mod:`.fdc5xx` isolation, :mod:`.fdc6xx` tensor parallel.

To add a code, copy one entry of its family: the detecting function (dotted name), the fix hint
(the only text a finding of that code carries as its fix), a fixture or mutant that trips it and
its clean twin, and the doc. ``tests/test_codes.py`` refuses an entry missing any of them. The
entries drive dispatch (:mod:`.index`: the lint codes, the config checks); a module besides the
detectors' that names the code goes in ``emitted_by`` (``tests/test_code_emitters.py``).
"""

from __future__ import annotations

from fd_conformance.codes import fdc0xx, fdc1xx, fdc2xx, fdc3xx, fdc4xx, fdc5xx, fdc6xx
from fd_conformance.codes.entry import Doc, Rule, Severity

ENTRIES: tuple[Rule, ...] = (
    *fdc0xx.ENTRIES,
    *fdc1xx.ENTRIES,
    *fdc2xx.ENTRIES,
    *fdc3xx.ENTRIES,
    *fdc4xx.ENTRIES,
    *fdc5xx.ENTRIES,
    *fdc6xx.ENTRIES,
)

__all__ = ["ENTRIES", "Doc", "Rule", "Severity"]
