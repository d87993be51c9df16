"""The frameworks the kit runs models on: the one list every other module reads.

A framework's name is its import name, a ``ModelCase.runtime`` value and a ``--fd-runtime``
choice; the runtime package builds its adapter, case selection validates cases against it, the
isolation worker's probe and the report header look for it. Framework-free and import-free, so any
of them can read it without importing the runtime package (or paying seconds for torch or paddle).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Framework:
    """One framework and where the kit meets it."""

    name: str  # import name = ModelCase.runtime = --fd-runtime value
    adapter: str  # the runtime adapter module; its create(device) builds the Runtime
    distributions: tuple[str, ...]  # what pip installs it as, in the order a version is looked for
    # Whether it may be imported on a thread other than the one that runs the checks (an isolation
    # worker starts it early: runtime.import_in_background). Not paddle: the importing thread
    # keeps dynamic-graph mode, every other thread of the process is left in static mode.
    imports_off_main_thread: bool = False


#: In the order ``--fd-runtime auto`` tries them.
SUPPORTED: Final = (
    Framework("torch", "fd_conformance.runtime.torch", ("torch",), imports_off_main_thread=True),
    Framework("paddle", "fd_conformance.runtime.paddle", ("paddlepaddle-gpu", "paddlepaddle")),
)
FRAMEWORKS: Final = tuple(framework.name for framework in SUPPORTED)
BY_NAME: Final = {framework.name: framework for framework in SUPPORTED}
