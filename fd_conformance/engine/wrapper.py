"""What :class:`~fd_conformance.engine.runner.WeightCycleRunner` needs from an engine-facing wrapper.

Written down as a Protocol because the runner only ever calls these members: a wrapper is any
object (usually a ``torch.nn.Module``/``paddle.nn.Layer``) holding a decorated inner model as
``.model``. The wrapper is what the engine instantiates; its graphs live in the inner model.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from fd_conformance.engine.config import GraphOptConfig

__all__ = ["EngineWrapper"]


@runtime_checkable
class EngineWrapper(Protocol):
    """An engine-facing wrapper the runner can capture, clear, release and reload.

    * ``model``: the inner model decorated with ``@support_graph_optimization`` that also mixes
      in :class:`~fd_conformance.engine.comm_group.CommGroupMixin` (``set_comm_group``, ``graphs()``);
    * ``graph_opt_config``: the inner model's config (the runner's flags read and switch it);
    * ``forward(inputs)``: one step through the graphs; ``eager_forward(inputs)``: the same step
      through ``model.eager_forward``, never a graph;
    * ``dummy_inputs(num_tokens)``: inputs the runner's ``capture_model()`` warms up and captures with;
    * ``named_parameters()``: every weight, the names ``update_parameters`` expects;
    * ``clear_graph_opt_backend()``: destroy every graph it owns (the protocol; the legacy
      spelling ``clear_grpah_opt_backend`` works too).
    """

    model: Any

    @property
    def graph_opt_config(self) -> GraphOptConfig: ...

    def forward(self, inputs: Any) -> Any: ...

    def eager_forward(self, inputs: Any) -> Any: ...

    def dummy_inputs(self, num_tokens: int) -> Any: ...

    def named_parameters(self) -> Iterable[tuple[str, Any]]: ...

    def clear_graph_opt_backend(self) -> None: ...
