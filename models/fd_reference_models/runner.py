"""The reference models' runner, now public as :class:`fd_conformance.engine.WeightCycleRunner`.

``ReferenceModelRunner`` is the same class under its old name, so the factories, the runner
mutants (:mod:`fd_reference_models.runner_mutants`) and tests keep importing it from here.
"""

from __future__ import annotations

from fd_conformance.engine.runner import DRAFT_PREFIX, WeightCycleRunner, clear_graphs_of

ReferenceModelRunner = WeightCycleRunner

__all__ = ["DRAFT_PREFIX", "ReferenceModelRunner", "WeightCycleRunner", "clear_graphs_of"]
