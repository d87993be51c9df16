"""The GraphOptModel protocol, the legacy ``clear_grpah_opt_backend`` alias, and protocol findings.

A package, lowest module first: :mod:`.base` (the protocol class, its errors, one definition of
the method), :mod:`.shims` (is a body only a forward?), :mod:`.resolution` (which definition a call
reaches; no side effects), :mod:`.alias` (the descriptor installed under both names),
:mod:`.checks` (one ``check_fdc00N_*`` per code, in :data:`~.checks.CHECKS` order), :mod:`.support`
(the pure ``supports_graph_opt``, ``ensure_graph_opt``, ``@graph_opt_model``). Import from here.

FastDeploy's wrappers spell the clear method two ways across branches and no shim accepts both,
so an engine calling one spelling on a model that defines the other crashes (or silently skips
clearing). This package makes both spellings reach the same method, says so once, and turns every
way a wrapper can get the contract wrong into a :class:`~fd_conformance.findings.Finding`.

Inheritance rule (FastDeploy wrappers subclass each other): **the most-derived definition under
either spelling is the method, under both names.** A subclass that overrides only
``clear_grpah_opt_backend`` of a base that defined both therefore wins for callers of
``clear_graph_opt_backend`` too -- once the alias is installed on the base (or the subclass).
Without the alias, plain Python would run the base's stale canonical method; :func:`check_protocol`
reports that split as FDC003. A method whose body only forwards to a spelling on ``self``
(``return self.clear_graph_opt_backend()``) is a shim, not a definition: it never wins, and a
class defining a real body plus such a shim is consistent. A class whose clear methods are ALL
shims (a legacy name forwarding to a canonical name nothing defines, the reverse, or two names
forwarding to each other) defines nothing: FDC001, exactly like a class without the method. One
whose real body exists but is out of reach of the engine's call (a shim in the way that forwards
to a missing name or back to itself) is FDC001 too, naming the shim.
"""

from __future__ import annotations

from fd_conformance.protocol.alias import install_legacy_alias, legacy_alias
from fd_conformance.protocol.base import GraphOptModel, GraphOptProtocolWarning, ProtocolError
from fd_conformance.protocol.checks import CHECKS, check_protocol, severity_of
from fd_conformance.protocol.resolution import resolve_clear_method, same_clear_target
from fd_conformance.protocol.support import ensure_graph_opt, graph_opt_model, supports_graph_opt
from fd_conformance.spelling import CANONICAL, LEGACY, NEAR_MISS_MAX_DISTANCE, SPELLINGS

__all__ = [
    "CANONICAL",
    "CHECKS",
    "LEGACY",
    "NEAR_MISS_MAX_DISTANCE",
    "SPELLINGS",
    "GraphOptModel",
    "GraphOptProtocolWarning",
    "ProtocolError",
    "check_protocol",
    "ensure_graph_opt",
    "graph_opt_model",
    "install_legacy_alias",
    "legacy_alias",
    "resolve_clear_method",
    "same_clear_target",
    "severity_of",
    "supports_graph_opt",
]
