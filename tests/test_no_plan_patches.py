"""No plan is patched after it is made (issue 20 point 3).

The planner makes every `Plan` in one place (``_planner._plan_of``) from its
request; nothing outside may copy a plan with fields changed. This scans
``src/einslice`` for ``replace(<a plan>, ...)`` calls (``dataclasses.replace``
whose first argument is named like a plan) outside the allowlist below,
each entry with its reason. A new patch fails here: make the planner build
the plan from its request instead, or add an entry with its reason.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src" / "einslice"

# Names a Plan goes by in this code base (a Found or a Profile is named otherwise).
PLAN_NAME = re.compile(
    r"^(p|q|plan|plans|best|chosen|candidate|winner|tuned|\w+_plan)$"
)

# (module, function) -> why a plan is copied there with fields changed.
ALLOWED = {
    ("_plan/_types.py", "stem"): "derived for execution: the chunk loop's "
    "plan without its hoisted steps, not a patch of a made plan",
    ("_plan/_probe.py", "probe"): "derived for execution: a probe of a few "
    "chunks for tuning to time, not a plan that is returned",
    ("_plan/_slice.py", "shard_plan"): "derived for execution: the plan one "
    "device runs on its shard, made inside the sharded executor",
    ("_exec/_tune.py", "with_choice"): "the one annotation: tuning's "
    "measurements (compare=False), which exist only after the plans are made",
}


def plan_patches(source: str, module: str) -> list[tuple[str, str, int]]:
    """``(module, function, line)`` of each ``replace(<plan>, ...)`` in ``source``."""
    found = []

    def visit(node: ast.AST, function: str, in_plan: bool) -> None:
        for child in ast.iter_child_nodes(node):
            name, plan_class = function, in_plan
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = child.name
            if isinstance(child, ast.ClassDef):
                plan_class = child.name == "Plan"
            if isinstance(child, ast.Call) and _is_replace(child) and child.args:
                if _names_a_plan(child.args[0], plan_class):
                    found.append((module, function, child.lineno))
            visit(child, name, plan_class)

    visit(ast.parse(source), "<module>", False)
    return found


def _is_replace(call: ast.Call) -> bool:
    f = call.func
    if isinstance(f, ast.Name):
        return f.id == "replace"
    return (
        isinstance(f, ast.Attribute)
        and f.attr == "replace"
        and isinstance(f.value, ast.Name)
        and f.value.id == "dataclasses"
    )


def _names_a_plan(arg: ast.expr, in_plan_class: bool) -> bool:
    if isinstance(arg, ast.Subscript):  # plans[k]
        arg = arg.value
    if not isinstance(arg, ast.Name):
        return False  # plan.equation, forward.cost: not a plan
    return bool(PLAN_NAME.match(arg.id)) or (in_plan_class and arg.id == "self")


def test_no_plan_is_patched_outside_the_allowed_places():
    patches = []
    for path in sorted(SOURCE.rglob("*.py")):
        module = path.relative_to(SOURCE).as_posix()
        patches += plan_patches(path.read_text(), module)
    unexpected = [p for p in patches if p[:2] not in ALLOWED]
    assert not unexpected, (
        f"plans patched after they are made: {unexpected}; have the planner "
        "build the plan from its PlanRequest (_planner._plan_of) instead"
    )
    # every allowance is still used (a stale entry would hide a new patch)
    assert {p[:2] for p in patches} == set(ALLOWED)


def test_the_scan_finds_planted_patches():
    planted = """
from dataclasses import replace
import dataclasses

def tune(plan, plans, best, request, found):
    a = replace(plan, executor="xla")
    b = dataclasses.replace(best, choice=None)
    c = replace(plans[0], precision="highest")
    d = replace(request, memory_limit=1)       # a request: allowed
    e = replace(plan.equation, sizes=(1,))     # an equation: allowed
    f = "x".replace("a", "b")                  # a string: allowed
    return a, b, c, d, e, f

class Plan:
    def variant(self):
        return replace(self, hoisted=0)
"""
    lines = [line for _, _, line in plan_patches(planted, "planted.py")]
    assert lines == [6, 7, 8, 16]
    functions = {f for _, f, _ in plan_patches(planted, "planted.py")}
    assert functions == {"tune", "variant"}
