"""Shim detection: is a clear method's whole body ``[return] self.<a spelling>(...)``?

A body that only forwards to a spelling on its receiver defines nothing (the inheritance rule
skips it); one that does anything else is a real body. The AST decides when the source can be
read; otherwise the bytecode, against per-CPython tables of what a forwarding body compiles to.
"""

from __future__ import annotations

import ast
import dis
import inspect
import textwrap
import types
from typing import Any

from fd_conformance.protocol.base import Definition
from fd_conformance.spelling import SPELLINGS

# Opcodes a pure forwarding body may contain besides its one attribute load and call: bookkeeping
# (RESUME, NOP, PUSH_NULL, ...), argument loads, the call itself under every CPython 3.9-3.14 name,
# and the return. LOAD_FAST_BORROW is CPython 3.14's LOAD_FAST.
_SHIM_RECEIVER_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_BORROW", "LOAD_FAST_CHECK"})
_SHIM_ATTR_LOADS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_SHIM_FILLER = frozenset(
    {"RESUME", "NOP", "CACHE", "PUSH_NULL", "PRECALL", "KW_NAMES", "EXTENDED_ARG", "COPY_FREE_VARS", "NOT_TAKEN"}
)
_SHIM_ARG_OPS = frozenset(
    {
        "LOAD_FAST",
        "LOAD_FAST_BORROW",
        "LOAD_FAST_CHECK",
        "LOAD_FAST_LOAD_FAST",
        "LOAD_FAST_BORROW_LOAD_FAST_BORROW",
        "LOAD_CONST",
        "LOAD_SMALL_INT",
        "BUILD_TUPLE",
        "BUILD_LIST",
        "BUILD_MAP",
        "LIST_EXTEND",
        "LIST_TO_TUPLE",
        "DICT_MERGE",
        "CALL_INTRINSIC_1",
    }
)
_SHIM_CALLS = frozenset({"CALL", "CALL_KW", "CALL_FUNCTION", "CALL_FUNCTION_KW", "CALL_FUNCTION_EX", "CALL_METHOD"})
_SHIM_RETURNS = (("RETURN_VALUE",), ("POP_TOP", "RETURN_CONST"), ("POP_TOP", "LOAD_CONST", "RETURN_VALUE"))


def is_self_shim(defn: Definition) -> bool:
    """True when the whole body is ``[return] self.<a spelling>(...)``: it forwards, it does not define.

    Only the exact one-call shape counts: a body that clears the draft and THEN calls the other
    spelling is a real definition (treating it as a shim would route calls past its own work and
    leak the draft's graphs). ``self.model.clear_grpah_opt_backend(...)`` (FastDeploy's wrapper
    delegating to its inner model) is a real body too. The AST decides when source is available;
    bytecode of exactly load-self/load-attr/call/return decides otherwise.
    """
    return shim_target(defn) is not None


def shim_target(defn: Definition) -> str | None:
    """The spelling a shim forwards to on its receiver, or None for a real body.

    The other spelling is the usual target; the shim's own spelling counts too: forwarding to
    itself (``clear_grpah_opt_backend = clear_graph_opt_backend`` over a body that calls
    ``self.clear_grpah_opt_backend()``) is a recursion, not a definition.
    """
    func = defn.function
    code = getattr(func, "__code__", None)
    if code is None or code.co_argcount == 0 or isinstance(defn.entry, staticmethod):
        return None
    receiver = code.co_varnames[0]
    forward = _ast_forward(func, receiver)
    if forward is _NO_SOURCE:
        forward = bytecode_forward(code, receiver)
    return forward if forward in SPELLINGS else None


_NO_SOURCE = object()


def _ast_forward(func: Any, receiver: str) -> Any:
    """The attribute an exact one-call forwarding body calls on ``receiver`` (None: a real body);
    ``_NO_SOURCE`` when the source cannot be read or parsed (exec'd, lambdas, .pyc only)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return _NO_SOURCE
    node = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if node is None or node.name != func.__name__:
        return _NO_SOURCE
    body = list(node.body)
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]  # the docstring
    if len(body) != 1 or not isinstance(body[0], (ast.Return, ast.Expr)):
        return None
    call = body[0].value
    if not isinstance(call, ast.Call):
        return None
    callee = call.func
    if not (isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name) and callee.value.id == receiver):
        return None
    # Arguments are forwarded as they came: names and constants only, nothing that runs code.
    args = [a.value if isinstance(a, ast.Starred) else a for a in call.args]
    args += [k.value for k in call.keywords]
    return callee.attr if all(isinstance(a, (ast.Name, ast.Constant)) for a in args) else None


def bytecode_forward(code: types.CodeType, receiver: str) -> str | None:
    """Exactly: load receiver, load an attribute, argument loads, one call, return -> that attribute."""
    ops = [i for i in dis.get_instructions(code) if i.opname not in _SHIM_FILLER]
    if len(ops) < 3:
        return None
    load_self, load_attr = ops[0], ops[1]
    if load_self.opname not in _SHIM_RECEIVER_LOADS or load_self.argval != receiver:
        return None
    if load_attr.opname not in _SHIM_ATTR_LOADS or not isinstance(load_attr.argval, str):
        return None
    rest = [i.opname for i in ops[2:]]
    for tail in _SHIM_RETURNS:
        if tuple(rest[-len(tail) :]) != tail:
            continue
        middle = rest[: -len(tail)]
        if not middle or middle[-1] not in _SHIM_CALLS:
            continue
        if all(op in _SHIM_ARG_OPS for op in middle[:-1]):
            return load_attr.argval
    return None
