"""The bridge's three tables as pytest tests, for CI jobs that gate on pytest:

    FD_CONFORMANCE_FASTDEPLOY=PATH pytest --pyargs fd_conformance.fastdeploy.suite

One test for the config search, one for the model classes, one per runner combination (ids like
``main=off draft=on spec=mtp``). Without the variable every test skips saying how to set it. The
checkout is imported once per module (FastDeploy's import is the slow part).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from fd_conformance.errors import UsageError
from fd_conformance.fastdeploy.checkout import Checkout, import_environment, locate
from fd_conformance.fastdeploy.runner_bridge import Combo, combos

ENV = "FD_CONFORMANCE_FASTDEPLOY"
EXAMPLES_ENV = "FD_CONFORMANCE_FASTDEPLOY_EXAMPLES"


@pytest.fixture(scope="module")
def checkout() -> Iterator[Checkout]:
    path = os.environ.get(ENV)
    if not path:
        pytest.skip(f"no FastDeploy checkout: set {ENV}=PATH (the directory holding fastdeploy/)")
    try:
        found = locate(path)
        with import_environment(found):
            yield found
    except UsageError as err:  # bad path, missing package: one line, as the CLI prints it
        pytest.fail(f"{ENV}={path}: {err}", pytrace=False)


def test_config_invariants(checkout: Checkout) -> None:
    from fd_conformance.fastdeploy.config_bridge import check_checkout_config

    report = check_checkout_config(checkout, max_examples=int(os.environ.get(EXAMPLES_ENV, "100")))
    assert report.error is None, report.error
    broken = [f"{r.code} minimal {r.minimal}: {r.message}" for r in report.rows if r.minimal and r.severity == "error"]
    assert not broken, "\n".join(broken)


def test_model_classes_protocol(checkout: Checkout) -> None:
    from fd_conformance.fastdeploy.models_bridge import check_models

    report = check_models(checkout)
    assert report.error is None, report.error
    bad = [f"{r.name}: {f.format()}" for r in report.rows for f in r.findings if f.is_error]
    bad += [f"{module}: import failed: {why}" for module, why in sorted(report.import_failures.items())]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("combo", list(combos()), ids=Combo.label)
def test_runner_teardown(checkout: Checkout, combo: Combo) -> None:
    from fd_conformance.fastdeploy.runner_bridge import draft_graphs_exist, run_combo, runner_class

    rows = run_combo(runner_class(checkout), combo, draft_graphs_exist(checkout))
    if all(r.skipped for r in rows):
        pytest.skip(rows[0].skipped or "n/a")
    problems = [f"{r.method}: {r.error}" for r in rows if r.error]
    problems += [f"{r.method}: {f.format()}" for r in rows for f in r.findings]
    assert not problems, "\n".join(problems)
