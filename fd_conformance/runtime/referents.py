"""What a Python function holds of its own: the state a walk over "who keeps this alive" enters.

Shared by host emulation (which buffers a captured callable can reach) and the suites' ownership
walk (which graphs a model holds): a wrapper may keep graphs or buffers in a closure, as
``torch.cuda.make_graphed_callables`` does.
"""

from __future__ import annotations

import types
from typing import Any


def function_state(fn: types.FunctionType) -> list[Any]:
    """``fn``'s defaults, keyword defaults, attributes and filled closure cells (never its
    globals: everything is reachable from a module)."""
    held: list[Any] = [fn.__defaults__, fn.__kwdefaults__, fn.__dict__]
    for cell in fn.__closure__ or ():
        try:
            held.append(cell.cell_contents)
        except ValueError:  # a cell not filled yet
            continue
    return held
