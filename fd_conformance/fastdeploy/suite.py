"""The bridge's five tables as pytest tests, for CI jobs that gate on pytest:

    FD_CONFORMANCE_FASTDEPLOY=PATH pytest --pyargs fd_conformance.fastdeploy.suite

One test for the config search, one for the model classes, one per runner combination (ids like
``main=off draft=on spec=mtp``), one for the real wrappers' clear (a shared raise before capture
once, with its wrappers) and one for the runner over the real wrappers. A wrapper or run the bridge
could not check fails its test too: the gate never passes on what it did not see. Without the variable every test skips saying how to set it. The
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


def test_real_wrappers_clear(checkout: Checkout) -> None:
    from fd_conformance.fastdeploy.wrappers_bridge import check_wrappers

    report = check_wrappers(checkout)
    assert report.error is None, report.error
    problems = [f"{r.name}: {f.format()}" for r in report.rows for f in r.findings if f.is_error]
    problems += [f"{', '.join(g.wrappers)}: {g.finding().format()}" for g in report.shared_raises]
    problems += [f"{r.name}: {r.verdict}: {r.reason}" for r in report.rows if r.verdict in ("not built", "ERROR")]
    assert not problems, "\n".join(problems)


def test_runner_teardown_over_real_wrappers(checkout: Checkout) -> None:
    from fd_conformance.fastdeploy.real_runner import check_real_runner

    report = check_real_runner(checkout)
    assert report.error is None, report.error
    problems = [f"{main}: not built: {why}" for main, why in sorted(report.not_built.items())]
    for pair in report.pairs:
        for r in pair.rows:
            where = f"{pair.pairing.main} [{r.combo.label()} {r.method}]"
            problems += [f"{where} ERROR {r.error}"] if r.error else []
            problems += [f"{where} {f.format()}" for f in r.findings if f.is_error]
    assert not problems, "\n".join(problems)
