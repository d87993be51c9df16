"""The lint rules, one named function per finding code (the registry's ``where`` names it).

Why one function per code: a reader who sees FDC101 in a report finds its check by name
(``check_fdc101_release_before_clear``) instead of grepping a walker. The walker (:mod:`.scan`)
calls the per-file rules as it meets definitions, calls and functions; the one cross-file rule
(FDC001) runs over every file's classes after the walk (:mod:`.run`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Sequence

from fd_conformance.findings import Finding, Location, make_finding
from fd_conformance.lint.config import LintConfig
from fd_conformance.lint.doors import DoorAnalysis
from fd_conformance.lint.facts import Branches, Call, ClassInfo, FileScan
from fd_conformance.lint.files import matches
from fd_conformance.lint.guard import SAT_BUDGET, main_flag_dependence
from fd_conformance.spelling import CANONICAL, LEGACY, near_miss

#: (line, ast column offset, object) -> the reported location; columns are converted lazily,
#: only for the rare call that fires.
Locate = Callable[[int, int, "str | None"], Location]
#: Framework roots every module derives from: a base so named says nothing about being a block.
_FRAMEWORK_ROOTS = frozenset({"Layer", "Module", "Cell", "object"})


# --------------------------------------------------------------------------- FDC100
def check_fdc100_cannot_read(shown: str, err: Exception) -> Finding:
    """A file that cannot be read (or decoded) is reported, never skipped silently."""
    return make_finding("FDC100", f"cannot read: {err}", Location(path=shown, line=1, col=1))


def check_fdc100_cannot_parse(path: str, err: SyntaxError | ValueError) -> Finding:
    """A syntax error means no other rule ran on the file: say so instead of passing it."""
    line = getattr(err, "lineno", None) or 1
    return make_finding(
        "FDC100",
        f"cannot parse: {getattr(err, 'msg', None) or err}",
        Location(path=path, line=line, col=max(getattr(err, "offset", None) or 1, 1)),
    )


# --------------------------------------------------------------------------- FDC002 / FDC004
def check_fdc002_legacy_spelling(name: str, what: str, line: int, col: int, obj: str | None, locate: Locate) -> Finding | None:
    """The legacy spelling in a definition or call: works through the alias, but is deprecated."""
    if name != LEGACY:
        return None
    return make_finding("FDC002", f"legacy spelling {LEGACY} in {what}", locate(line, col, obj))


def check_fdc004_near_miss(name: str, what: str, line: int, col: int, obj: str | None, locate: Locate) -> Finding | None:
    """A typo of either spelling (:func:`fd_conformance.spelling.near_miss`): the engine never finds it."""
    target = near_miss(name)
    if target is None:
        return None
    return make_finding(
        "FDC004",
        f"{name} in {what} is a near-miss of {target}; the engine will not find it",
        locate(line, col, obj),
        name=name,
    )


# --------------------------------------------------------------------------- FDC101
def _exclusive(a: Branches, b: Branches) -> bool:
    """Do two calls sit in different branches of one ``if`` (so never both run)?"""
    branch_of = dict(a)
    return any(node in branch_of and branch_of[node] != side for node, side in b)


def check_fdc101_release_before_clear(calls: list[Call], owner: str, locate: Locate) -> list[Finding]:
    """Graphs cleared after weights were released in one function (sorts ``calls`` in place).

    Source order within one function approximates execution order (see README). Calls in
    different branches of the same ``if`` never both run, so they are not ordered.
    """
    calls.sort(key=lambda c: (c.line, c.col))
    found: list[Finding] = []
    releases: list[Call] = []
    for call in calls:
        if call.kind == "release":
            releases.append(call)
            continue
        for rel in releases:
            if not _exclusive(rel.branches, call.branches):
                found.append(
                    make_finding(
                        "FDC101",
                        f"{owner}: graphs cleared by {call.name}() after {rel.name}() at line {rel.line} "
                        "released weights or shut down communication (a live graph can hang the teardown)",
                        locate(call.line, call.col, owner),
                        clear=call.name,
                        release=rel.name,
                    )
                )
                break
    return found


# --------------------------------------------------------------------------- FDC102
def _receiver_names(node: ast.expr) -> Iterator[str]:
    """Every name along a receiver chain: ``self.proposer.model`` -> model, proposer, self."""
    while True:
        if isinstance(node, ast.Attribute):
            yield node.attr
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Name):
            yield node.id
            return
        else:
            return


def _is_draft(receiver: ast.expr, cls: ClassInfo | None, config: LintConfig) -> bool:
    """Does this receiver hold a draft model? A draft-named attribute anywhere along it
    (``self.proposer.model``), or, inside a draft owner (``MTPProposer``), an attribute of
    ``self`` that is not named as the main model's (``self.model`` there is the draft)."""
    chain = list(_receiver_names(receiver))
    if any(matches(n, config.draft_receivers) for n in chain):
        return True
    return (
        cls is not None
        and len(chain) > 1
        and chain[-1] == "self"
        and matches(cls.name, config.draft_owner_classes)
        and not any("main" in n for n in chain)
    )


def _call_as_written(call: ast.Call, helper: bool) -> str:
    """The clear call as the source spells it, for messages: ``self.draft.clear()`` for a method,
    ``clear_graphs_of(self.draft)`` for a helper (its first argument is the receiver); other
    arguments are elided, since only the receiver matters to the rule."""
    if helper:
        more = ", ..." if len(call.args) + len(call.keywords) > 1 else ""
        return f"{ast.unparse(call.func)}({ast.unparse(call.args[0])}{more})"
    return f"{ast.unparse(call.func)}()"


def check_fdc102_draft_clear_under_main_flag(
    func: ast.FunctionDef | ast.AsyncFunctionDef,
    calls: Sequence[Call],
    cls: ClassInfo | None,
    owner: str,
    config: LintConfig,
    locate: Locate,
) -> Iterator[Finding]:
    """Draft clears that run only with the main flag on (or only with it off), when no other
    draft clear of the function covers the other value (see :mod:`.guard`); a guard the solver
    cannot decide within its budget is reported as such, never silently passed."""
    drafts = [c for c in calls if c.receiver is not None and _is_draft(c.receiver, cls, config)]
    if not drafts:
        return
    by_node = {id(c.node): c for c in drafts}
    nodes = [c.node for c in drafts if c.node is not None]
    dependent, flag = main_flag_dependence(func.body, nodes, config.main_flags, config.draft_flags)
    for node, needs_on in dependent:
        call = by_node[id(node)]
        shown = _call_as_written(node, call.helper)
        if needs_on is None:
            message = (
                f"could not decide whether draft graphs ({shown}) are cleared with the main model's flag "
                f"{flag or '(none tested)'} both on and off: the guard is too complex for the solver "
                f"(over {SAT_BUDGET} steps); simplify the condition or check it by hand"
            )
        elif needs_on:
            message = (
                f"draft graphs ({shown}) are cleared only when the main model's flag {flag} is on; "
                "with it off and the draft's graphs on they leak"
            )
        else:
            message = (
                f"draft graphs ({shown}) are cleared only when the main model's flag {flag} is off "
                "(with it on, the path exits or branches away first); with both on they leak"
            )
        draft_flag = config.draft_flags[0] if config.draft_flags else "its own flag"
        yield make_finding(
            "FDC102",
            message,
            locate(call.line, call.col, owner),
            draft_flag=draft_flag,
        )


# --------------------------------------------------------------------------- FDC001 (cross-file)
def _named_wrapper(info: ClassInfo, config: LintConfig) -> bool:
    """The name route: a wrapper pattern matches and the class is no building block (its name
    matches ``block_patterns``, or a direct base other than the framework roots ``block_bases``)."""
    if not matches(info.name, config.wrapper_patterns) or matches(info.name, config.block_patterns):
        return False
    return not any(b not in _FRAMEWORK_ROOTS and matches(b, config.block_bases) for b in info.bases)


def check_fdc001_wrapper_without_clear(
    scans: Sequence[FileScan], config: LintConfig, context: Sequence[FileScan] = ()
) -> Iterator[tuple[FileScan, Finding]]:
    """Wrappers with no clear method, own or inherited. Needs every class of the tree: bases and
    inherited clears resolve across files.

    ``context`` scans only lend their classes (as bases); only classes of ``scans`` are reported.
    """
    by_name: dict[str, list[ClassInfo]] = {}
    owner: dict[int, FileScan] = {}
    for scan in scans:
        for info in scan.classes:
            by_name.setdefault(info.name, []).append(info)
            owner[id(info)] = scan
    for scan in context:
        for info in scan.classes:
            by_name.setdefault(info.name, []).append(info)
    wrapper_bases = frozenset(config.wrapper_bases)
    # Keyed by class identity, not name: ``class XForCausalLM(a.XForCausalLM)`` names its own
    # name as a base, and the base is the *other* definition, which must still be searched.
    memo: dict[int, tuple[bool, bool]] = {}

    def lineage(info: ClassInfo, visiting: frozenset[int]) -> tuple[bool, bool, bool]:
        """(provides clear, descends from a wrapper base, complete), own or through scanned
        ancestors. ``complete`` is False when a cycle cut the search short: such a partial
        answer is not memoized, so it cannot stand in for the full one later."""
        if id(info) in memo:
            return (*memo[id(info)], True)
        provides, descends, complete = info.provides_clear, False, True
        inside = visiting | {id(info)}
        for base in info.bases:
            descends |= base in wrapper_bases
            # Same-named classes in several files: any of them may be the one imported, so union
            # them; only a class already on the path (a cycle, or the class itself) is skipped.
            for candidate in by_name.get(base, ()):
                if candidate is info:
                    continue  # a class is never its own base: skipping it loses nothing
                if id(candidate) in visiting:
                    complete = False  # a real cycle through other classes: cut it here
                    continue
                p, d, c = lineage(candidate, inside)
                provides, descends, complete = provides | p, descends | d, complete and c
        if complete:
            memo[id(info)] = (provides, descends)
        return provides, descends, complete

    for name, infos in by_name.items():
        for info in infos:
            if id(info) not in owner:
                continue  # a context class: lends inheritance, is not being linted
            if info.abstract or name in wrapper_bases or matches(name, config.exclude_classes):
                continue
            provides, descends, _ = lineage(info, frozenset())
            if provides:
                continue
            if info.registered or descends or _named_wrapper(info, config):
                yield (
                    owner[id(info)],
                    make_finding(
                        "FDC001",
                        f"model wrapper {name} has no {CANONICAL}() (nor legacy {LEGACY}), own or inherited; "
                        "the engine cannot destroy its graphs",
                        Location(path=info.path, line=info.line, col=info.col, obj=name),
                        cls=name,
                    ),
                )


# --------------------------------------------------------------------------- FDC103 (cross-file)
def _whose(roles: Sequence[str]) -> str:
    return " and ".join("the draft's" if r == "draft" else "the main model's" for r in roles)


def check_fdc103_release_under_live_graphs(
    scans: Sequence[FileScan], config: LintConfig, context: Sequence[FileScan] = ()
) -> Iterator[tuple[FileScan, Finding]]:
    """At every door of a graph-owning class (see :mod:`.doors`), a release of weights whose
    model's graphs are alive, or a group shutdown under any live graph, on some path of the facts
    that decide which graphs exist. Needs every class of the tree: the weight manager and the
    proposer usually live in other files. A door whose own body already carries FDC101 or FDC102
    is left to them (the same defect, named at the clear that is late or wrongly guarded)."""
    every = (*scans, *context)
    analysis = DoorAnalysis(
        [d for scan in every for d in scan.doors],
        config.release_calls,
        config.group_release_calls,
        draft_graphs=any(scan.names_draft_flag for scan in every),
    )
    for scan in scans:
        explained = {f.location.obj for f in scan.findings if f.code in ("FDC101", "FDC102")}
        for cls in scan.doors:
            if not analysis.owns_graphs(cls):
                continue
            for verdict in analysis.check_class(cls):
                alive = verdict.first
                owner = f"{cls.name}.{verdict.door}"
                if owner in explained:
                    continue
                what = [f"releases {_whose(sorted(verdict.models, reverse=True))} weights"] if verdict.models else []
                if "groups" in verdict.kinds:
                    what.append("shuts down communication groups")
                later = sorted({f"{x.text} at line {x.line}" for x in verdict.sites if x != alive.door_site})
                also = f"; also at {', '.join(later)}" if later else ""
                built = f"; {alive.built.attr} = {alive.built.text} at line {alive.built.line}" if alive.built else ""
                yield (
                    scan,
                    make_finding(
                        "FDC103",
                        f"{owner}: {_whose([alive.role])} graphs are alive at {alive.door_site.text}, which "
                        f"{' and '.join(what)}{also}{built}; on the path with {alive.facts.describe()}, "
                        "no clear of them comes before it",
                        Location(path=cls.path, line=alive.door_site.line, col=alive.door_site.col, obj=owner),
                        model="the draft model" if alive.role == "draft" else "the main model",
                        release=alive.door_site.text,
                    ),
                )
