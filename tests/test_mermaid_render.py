"""Every lifecycle picture the kit draws renders: Mermaid's own parser and renderer, in headless
Chromium, over each bundled mutant's failing checks, the docs' pictures and a certificate. Skipped
locally without chromium or the mermaid package (saying how to install them); under CI a missing
renderer fails, so the proof cannot go missing silently."""

from __future__ import annotations

import os
import re
from typing import Any

import pytest
from _mermaid import missing, render, version
from _pictures import ROOT, pictures_session

from fd_conformance.report import build_document, format_certificate, results_from_records
from fd_conformance.report.lifecycle_picture import mermaid

pytestmark = pytest.mark.xdist_group("lifecycle_pictures")  # shares one session with test_lifecycle_pictures

BLOCK = re.compile(r"```mermaid\n(.*?)```", re.S)
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def pictures_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return pictures_session(tmp_path_factory)


@pytest.fixture(scope="module")
def renderer() -> None:
    why = missing()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and the Mermaid renderer is missing: {why}")
        pytest.skip(why)


def test_a_broken_diagram_is_refused(renderer: None) -> None:
    """The harness itself: a diagram Mermaid cannot parse is reported, with Mermaid's message."""
    [good, bad] = render(["sequenceDiagram\n    L0->>L1: capture #59; replay\n", "sequenceDiagram\n    L0->>L1: a; b\n"])
    assert good["ok"] and not bad["ok"] and "Parse error" in bad["error"]


def test_every_picture_renders(renderer: None, pictures_run: dict[str, Any]) -> None:
    document = pictures_run["document"]
    traced = [r for r in document["results"] if r["codes"] and r.get("trace")]
    diagrams = {f"{r['nodeid']}": mermaid(r["trace"]) for r in traced}
    for path in sorted(DOCS.rglob("*.md")):  # the docs' pictures (each code's pair), and any other diagram there
        for index, block in enumerate(BLOCK.findall(path.read_text(encoding="utf-8"))):
            diagrams[f"{path.relative_to(DOCS)} #{index}"] = block
    # The certificate of the mutants' failures as a user's run writes it (not caught: plain failures).
    failures = results_from_records([{**r, "outcome": "failed"} for r in traced])
    for index, block in enumerate(BLOCK.findall(format_certificate(build_document(failures)))):
        diagrams[f"certificate #{index}"] = block
    results = render(list(diagrams.values()))
    broken = [f"{name}: {r['error']}" for name, r in zip(diagrams, results, strict=True) if not r["ok"]]
    assert not broken, "\n".join(broken)
    print(f"mermaid {version()} in chromium: {len(results)} diagrams rendered, 0 refused")
    assert len(traced) >= 10 and sum(name.startswith("reference/pictures/FDC") for name in diagrams) >= 20
