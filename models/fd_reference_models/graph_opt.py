"""The graph-opt backend the reference models use, now public as :mod:`fd_conformance.engine`.

Kept so existing imports (``from fd_reference_models.graph_opt import ...``: the models, the
mutants, tests) keep working with the very same objects; new code imports from
:mod:`fd_conformance.engine`. Unlike FastDeploy, clearing is a safe no-op when graphs are off or
nothing was captured yet (FastDeploy raises AttributeError there; :mod:`fd_reference_models.mutants`
reproduces that).
"""

from __future__ import annotations

from fd_conformance.engine import *  # noqa: F403  (re-export: this module's names ARE the engine's)
from fd_conformance.engine import __all__ as __all__
