"""Paddle model-level mutants: the tiny Paddle GLM4-MoE with one defective inner model each,
the same defects (:mod:`fd_reference_models.model_defects`) as the PyTorch mutants, so the
suites prove they catch them through the Paddle adapter too (``_clear_data`` releases, Paddle
groups, Paddle tensors in the host ledger)."""

from __future__ import annotations

from fd_reference_models.model_defects import BakedTokenIds, ForgetfulClear, LeakyClear
from fd_reference_models.paddle_models.glm4_moe import Glm4MoeForCausalLM, Glm4MoeModel


def _with_inner(defect: type, name: str) -> type:
    """The good Paddle GLM4-MoE wrapper whose inner model carries ``defect``."""
    inner = type(f"{name}Model", (defect, Glm4MoeModel), {"__doc__": defect.__doc__, "__module__": __name__})
    return type(name, (Glm4MoeForCausalLM,), {"inner_cls": inner, "__doc__": defect.__doc__, "__module__": __name__})


LeakyClearGlm4Moe = _with_inner(LeakyClear, "LeakyClearGlm4Moe")
ForgetfulClearGlm4Moe = _with_inner(ForgetfulClear, "ForgetfulClearGlm4Moe")
BakedTokenIdsGlm4Moe = _with_inner(BakedTokenIds, "BakedTokenIdsGlm4Moe")
