"""C6 config: the graph-opt invariants (FDC401-FDC405; FDC406 a warning) hold on every config the case's engine
post-processor produces, property-tested over a Hypothesis strategy of raw graph-opt configs;
the failure names Hypothesis's minimal counter-example."""

from __future__ import annotations

from typing import Any

import pytest

from fd_conformance.cases import ModelCase
from fd_conformance.verdict import CheckVerdict

pytestmark = pytest.mark.conformance("config")

# Enough to find every reference mutant (each needs one field combination) in well under a
# second per case; deterministic (derandomized), so a CI failure reproduces locally.
MAX_EXAMPLES = 200


def test_config_postprocessor(
    request: pytest.FixtureRequest, fd_case: ModelCase, fd_device: str, fd_verdict: CheckVerdict
) -> None:
    from fd_conformance.plugin import DEVICES_KEY

    # Device-independent, so checked once -- on the FIRST selected row, not a fixed "cpu": a GPU
    # host's default run selects only cuda rows, and C6 must run there too.
    first_row = request.config.stash[DEVICES_KEY][0]
    if fd_device != first_row:
        pytest.skip(f"config rules are device-independent: checked once, on the {first_row} row")
    if fd_case.config_postprocessor is None:
        pytest.skip(f"{fd_case.name} declares no config_postprocessor (ModelCase.config_postprocessor)")
    from fd_conformance.config_rules import (
        InvariantViolation,
        assert_postprocessor_preserves_invariants,
        find_config_warnings,
    )

    try:
        assert_postprocessor_preserves_invariants(fd_case.config_postprocessor, fd_case.config_builder, max_examples=MAX_EXAMPLES)
    except InvariantViolation as violation:
        add_violation(fd_case, fd_verdict, violation)
        if violation.error is not None:
            pytest.fail(
                f"{fd_case.name}: config post-processor crashed on {violation.raw.describe()}: {violation.error!r}", pytrace=False
            )
    # Warnings (FDC406) never fail the check; they are reported with their own minimal config.
    warned = find_config_warnings(fd_case.config_postprocessor, fd_case.config_builder, max_examples=MAX_EXAMPLES)
    if warned is not None:
        add_violation(fd_case, fd_verdict, warned)
    fd_verdict.conclude()


def add_violation(case: ModelCase, verdict: CheckVerdict, violation: Any) -> None:
    """Each finding of a violation, located at the case and naming the minimal raw config."""
    import dataclasses

    from fd_conformance.findings import Location

    where = Location(obj=f"{case.name}: {violation.raw.describe()}")
    for finding in violation.findings:
        message = f"{finding.message} (minimal config: {violation.raw.describe()})"
        verdict.add(dataclasses.replace(finding, message=message, location=where))  # the rule's own hint kept
