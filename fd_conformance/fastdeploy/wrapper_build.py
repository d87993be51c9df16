"""Building a registered wrapper on CPU: the checkout's own ``FDConfig`` with graphs on and a
tiny model (of the wrapper's family), every ``fastdeploy`` module's ``current_platform`` reporting
CUDA while the wrapper is built (layers refuse other platforms, and the
``@support_graph_optimization`` decorator builds a backend only on CUDA), and a one-rank Paddle
hybrid group when FastDeploy uses ``fleet`` (its parallel layers ask for one).

Apart from the wrappers table: the runner over real wrappers builds its mains and drafts the same
way, and this is the one module of the bridge that sets up Paddle itself.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fd_conformance.config_rules import RawGraphOptConfig
from fd_conformance.fastdeploy.checkout import Checkout, import_module
from fd_conformance.fastdeploy.config_bridge import CONFIG_MODULE, CudaPlatform, make_builder
from fd_conformance.fastdeploy.models_bridge import registered_wrappers
from fd_conformance.fastdeploy.tiny_config import families_of, tiny_model_config


@contextmanager
def cuda_everywhere() -> Iterator[None]:
    """Every loaded ``fastdeploy`` module's ``current_platform`` reports CUDA, then is restored."""
    platforms = sys.modules.get("fastdeploy.platforms")
    real = getattr(platforms, "current_platform", None)
    patched = [
        m
        for n, m in list(sys.modules.items())
        if n.startswith("fastdeploy") and real is not None and vars(m).get("current_platform") is real
    ]
    cuda = CudaPlatform()
    for module in patched:
        module.current_platform = cuda  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for module in patched:
            module.current_platform = real  # type: ignore[attr-defined]


def _one_rank_group() -> Any:
    """Paddle's hybrid group of one rank, when FastDeploy's layers use fleet (None otherwise)."""
    if "paddle.distributed.fleet" not in sys.modules:
        return None
    from paddle.distributed import fleet

    try:
        return fleet.get_hybrid_communicate_group().get_model_parallel_group()
    except AttributeError:  # not initialised yet in this process
        strategy = fleet.DistributedStrategy()
        strategy.hybrid_configs = {"dp_degree": 1, "mp_degree": 1, "pp_degree": 1}
        fleet.init(is_collective=True, strategy=strategy)
        return fleet.get_hybrid_communicate_group().get_model_parallel_group()


#: Sub-configs of FDConfig that MoE layers and the piecewise backend read, left None by the config
#: table's builder (no speculative method) or absent from older trees: attribute -> class name.
DEFAULT_SUB_CONFIGS = (
    ("eplb_config", "EPLBConfig"),
    ("speculative_config", "SpeculativeConfig"),
    ("routing_replay_config", "RoutingReplayConfig"),
)


def make_fd_config(config: types.ModuleType, families: tuple[str, ...] = ()) -> Any:
    """The checkout's FDConfig with graphs on, a tiny model (of ``families``' shape) and one rank."""
    pretrained = getattr(config, "PretrainedConfig", None)
    wrap = pretrained.from_dict if pretrained is not None and hasattr(pretrained, "from_dict") else None
    fd_config = make_builder(config, lambda: tiny_model_config(families, wrap))(
        RawGraphOptConfig(use_cudagraph=True, max_num_seqs=2)
    )
    group = _one_rank_group()
    if group is not None:
        fd_config.parallel_config.tp_group = group
        fd_config.parallel_config.tensor_parallel_rank = 0
    for attr, cls_name in DEFAULT_SUB_CONFIGS:
        if getattr(fd_config, attr, None) is None and hasattr(config, cls_name):
            setattr(fd_config, attr, getattr(config, cls_name)({}))
    return fd_config


def fd_config_of(config: types.ModuleType, families: tuple[str, ...]) -> Any:
    """:func:`make_fd_config` with every module reporting CUDA (FDConfig switches graphs off elsewhere)."""
    with cuda_everywhere():
        return make_fd_config(config, families)


class WrapperBuilder:
    """Builds registered wrappers on CPU: the checkout's registry, one tiny FDConfig per family
    (made when first needed), every module reporting CUDA while a wrapper is built."""

    def __init__(self, checkout: Checkout) -> None:
        """Raises what FastDeploy raises when its config module, registry or tiny FDConfig fails."""
        self.config = import_module(CONFIG_MODULE, checkout)
        self.wrappers = registered_wrappers(checkout)
        self.configs: dict[tuple[str, ...], Any] = {(): fd_config_of(self.config, ())}

    def fd_config(self, cls: type) -> Any:
        families = families_of(cls)
        if families not in self.configs:
            self.configs[families] = fd_config_of(self.config, families)
        return self.configs[families]

    def build(self, cls: type, sharing_model: Any = None) -> Any:
        """``cls`` built; an MTP draft with ``sharing_model``, the main wrapper whose embedding and
        head it shares (FastDeploy's proposer sets it on the speculative config before loading)."""
        fd_config = self.fd_config(cls)
        speculative = getattr(fd_config, "speculative_config", None)
        before = getattr(speculative, "sharing_model", None)
        if speculative is not None and sharing_model is not None:
            speculative.sharing_model = sharing_model
        try:
            with cuda_everywhere():
                return cls(fd_config)
        finally:
            if speculative is not None and sharing_model is not None:
                speculative.sharing_model = before
