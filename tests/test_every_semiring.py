"""Every executor on every registered semiring, against float64 references (issue 20).

The semirings come from the registry (``_plan/_semiring.SEMIRINGS``), so a new
one is tested here without editing this file. The executors are those that
are registered (``_exec/_executors.EXECUTORS``, so a new one is tested here
too), each run through ``Plan.__call__`` with ``Plan.executor`` naming it: the
chunked chain ("einslice", sliced or not), the plain ``jnp.einsum`` lowering
("xla", for the semirings ``jnp.einsum`` computes), the numpy host walk
("host"); and the loop-nest ``naive_einsum``, and the chain split over two
simulated devices (one subprocess). References materialize the table over
every index in float64 (``strategies.materialized_reduce``). Min-plus, the
semiring added through the registry alone, is also checked against shortest
paths by Floyd–Warshall.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import einslice
from einslice._exec._executors import EXECUTORS as REGISTERED
from einslice._exec._host import HOST_RULES, run_on_host
from einslice._exec._semiring import RULES
from einslice._plan._planner import with_other_executors
from einslice._plan._semiring import SEMIRINGS, Semiring
from einslice._plan._types import Plan
from strategies import Equation, feasible_plan, materialized_reduce, request_of

# (formula, shapes): a product, the seed formula, diagonals and private
# indices (pre-reduced), and an elementwise step that contracts nothing.
FORMULAS = [
    ("ij,jk->ik", ((5, 7), (7, 4))),
    ("ij,ik,il,jk,jl,kl->ij", ((6, 6),) * 6),
    ("iijb,jkc,k->ik", ((4, 4, 5, 3), (5, 6, 2), (6,))),
    ("i,j,ij->ij", ((3,), (4,), (3, 4))),
]
# A sliced plan's limit, as a share of the unsliced plan's peak bytes.
SLICED_SHARE = 0.3


@dataclass(frozen=True)
class Executor:
    """One way of running a plan, as this test drives it."""

    name: str
    supports: Callable[[Plan], bool]
    run: Callable[[Plan, list], object]  # operands: numpy arrays or JAX arrays
    differentiable: bool


def _registered(name: str) -> Executor:
    """A registered executor, run through ``Plan.__call__`` with its name set."""
    executor = REGISTERED[name]
    return Executor(
        name,
        executor.runs,
        lambda plan, ops: replace(plan, executor=name)(*ops),
        executor.compiles,
    )


def _naive(plan: Plan, ops):
    subscripts = plan.equation.text()
    return einslice.naive_einsum(subscripts, *ops, semiring=plan.semiring)


# every registered executor, and the loop-nest naive_einsum
EXECUTORS = [
    *map(_registered, REGISTERED),
    Executor("naive", lambda plan: True, _naive, True),
]


def _equation(formula: str, shapes) -> Equation:
    lhs, output = formula.split("->")
    return Equation(tuple(lhs.split(",")), output, tuple(shapes))


def _operands(ring: Semiring, shapes, seed: int, zeros: float = 0.15):
    """Uniform in [-3, 3], with a share of entries the semiring's zero."""
    rng = np.random.default_rng(seed)
    ops = []
    for shape in shapes:
        x = rng.uniform(-3, 3, shape)
        x[rng.random(shape) < zeros] = ring.zero
        ops.append(x)
    return ops


def _plans(
    formula: str, shapes, ring: Semiring, gradient: bool = False
) -> dict[str, Plan]:
    """The unsliced plan, and one at a fraction of its peak (sliced if it can be)."""
    kwargs = {"dtype": np.float64, "semiring": ring.name, "gradient": gradient}
    whole = einslice.plan(formula, *shapes, **kwargs)
    limit = max(1, int(whole.peak_bytes * SLICED_SHARE))
    sliced, _ = feasible_plan(formula, shapes, limit, **kwargs)
    return {"whole": whole, "sliced": sliced}


# On a TPU, float64 is emulated: a sliced float64 "log" plan there (its
# slices combined by jnp.logaddexp) was 6.0e-9 off in relative terms (TPU
# v5e, JAX 0.10.2, 2026-12-07), where jnp.exp and jnp.log measured 3e-14
# and 9e-12 and a float64 dot 4e-15; docs/precision.md has the figures.
TOLERANCE = 1e-9 if jax.default_backend() == "cpu" else 1e-7


def _assert_matches(out, ref, what: str):
    out = np.asarray(out)
    assert out.shape == ref.shape, what
    assert out.dtype == np.float64, (what, out.dtype)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref), err_msg=what)
    np.testing.assert_allclose(out, ref, rtol=TOLERANCE, atol=TOLERANCE, err_msg=what)


def test_every_executor_has_rules_for_every_semiring():
    assert set(RULES) == set(SEMIRINGS) == set(HOST_RULES)


@pytest.mark.parametrize("ring", list(SEMIRINGS.values()), ids=list(SEMIRINGS))
@pytest.mark.parametrize("formula,shapes", FORMULAS, ids=[f for f, _ in FORMULAS])
def test_every_executor_matches_float64(ring, formula, shapes):
    eq = _equation(formula, shapes)
    ops = _operands(ring, shapes, seed=len(formula))
    ref = materialized_reduce(eq, ops, ring.name)
    ran = []
    for kind, plan in _plans(formula, shapes, ring).items():
        for executor in EXECUTORS:
            if not executor.supports(plan):
                continue
            what = f"{executor.name} on {ring.name}, {kind} plan {plan.chunks}"
            _assert_matches(executor.run(plan, ops), ref, what)
            ran.append((executor.name, kind))
    # every executor ran every semiring it supports; the plain lowering only
    # those jnp.einsum computes
    assert {name for name, _ in ran} >= {"einslice", "host", "naive"}
    assert ("xla", "whole") in ran if ring.jnp_einsum else "xla" not in ran


def test_the_seed_formula_is_sliced_at_the_tight_limit():
    # (else the sliced plans above would test nothing new)
    for ring in SEMIRINGS.values():
        formula, shapes = FORMULAS[1]
        assert _plans(formula, shapes, ring)["sliced"].chunks, ring.name


@pytest.mark.parametrize("ring", list(SEMIRINGS.values()), ids=list(SEMIRINGS))
def test_only_semirings_jnp_einsum_computes_get_the_plain_lowering(ring):
    plan = einslice.plan("ij,jk->ik", (4, 4), (4, 4), semiring=ring.name)
    executors = [p.executor for p in with_other_executors(request_of(plan), count=1)]
    assert ("xla" in executors) == ring.jnp_einsum


def _weighted(y, weights):
    return jnp.sum(jnp.where(jnp.isfinite(y), y, 0.0) * weights)


@pytest.mark.parametrize("ring", list(SEMIRINGS.values()), ids=list(SEMIRINGS))
def test_every_differentiable_executor_matches_float64_gradients(ring):
    formula, shapes = FORMULAS[1]
    eq = _equation(formula, shapes)
    # no ties: max and min are differentiable at distinct values only
    ops = [jnp.asarray(x) for x in _operands(ring, shapes, seed=5, zeros=0.1)]
    weights = np.random.default_rng(9).standard_normal((6, 6))
    argnums = tuple(range(len(ops)))

    def reference(*o):
        return _weighted(materialized_reduce(eq, o, ring.name, xp=jnp), weights)

    want = jax.grad(reference, argnums)(*ops)
    for kind, plan in _plans(formula, shapes, ring, gradient=True).items():
        if kind == "sliced":
            assert plan.tangent_chunks, "the derivative pass is sliced too"
        for executor in EXECUTORS:
            if not (executor.differentiable and executor.supports(plan)):
                continue

            def loss(*o, executor=executor, plan=plan):
                return _weighted(executor.run(plan, list(o)), weights)

            got = jax.grad(loss, argnums)(*ops)
            for k, (g, w) in enumerate(zip(got, want, strict=True)):
                what = f"d/d operand {k}: {executor.name} on {ring.name}, {kind}"
                assert not np.isnan(np.asarray(g)).any(), what
                np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9, err_msg=what)


@pytest.mark.parametrize("ring", list(SEMIRINGS.values()), ids=list(SEMIRINGS))
def test_a_hoisted_plan_on_every_executor_matches_float64(ring):
    # The seed's ij holds output indices only: at this limit the plan multiplies
    # it in once after the chunk loop (Plan.hoisted), by the semiring's product.
    formula, shapes = FORMULAS[1][0], ((16, 16),) * 6
    eq = _equation(formula, shapes)
    ops = [jnp.asarray(x) for x in _operands(ring, shapes, seed=2, zeros=0.05)]
    plan = einslice.plan(
        formula, *ops, memory_limit="120kB", semiring=ring.name, gradient=True
    )
    assert plan.hoisted == 1 and (plan.chunks or plan.tangent_chunks), str(plan)
    ref = materialized_reduce(eq, [np.asarray(x) for x in ops], ring.name)
    weights = np.random.default_rng(9).standard_normal((16, 16))
    argnums = tuple(range(len(ops)))

    def reference(*o):
        return _weighted(materialized_reduce(eq, o, ring.name, xp=jnp), weights)

    want = jax.grad(reference, argnums)(*ops)
    for executor in EXECUTORS:
        if not executor.supports(plan):
            continue
        what = f"{executor.name} on {ring.name}, hoisted"
        _assert_matches(executor.run(plan, ops), ref, what)
        if not executor.differentiable:
            continue

        def loss(*o, executor=executor):
            return _weighted(executor.run(plan, list(o)), weights)

        got = jax.grad(loss, argnums)(*ops)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9, err_msg=what)


SHARDED = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
import einslice
from einslice._plan._semiring import SEMIRINGS
from strategies import Equation, materialized_reduce

formula = "ij,ik,il,jk,jl,kl->ij"
eq = Equation(tuple(formula.split("->")[0].split(",")), "ij", ((8, 8),) * 6)
errors = {}
for ring in SEMIRINGS.values():
    rng = np.random.default_rng(1)
    ops = [rng.uniform(-3, 3, (8, 8)) for _ in range(6)]
    ops[0][rng.random((8, 8)) < 0.15] = ring.zero
    ref = materialized_reduce(eq, ops, ring.name)
    plan = einslice.plan(formula, *ops, semiring=ring.name, memory_limit="20kB",
                         devices=2)
    out = np.asarray(plan(*ops))
    same_inf = bool(np.array_equal(np.isinf(out), np.isinf(ref)))
    finite = np.isfinite(ref)
    error = float(np.max(np.abs(out - ref)[finite], initial=0.0))
    errors[ring.name] = [plan.n_chunks, same_inf, error]
print(json.dumps(errors))
"""


def test_sharded_chain_on_two_devices_matches_float64():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    tests = str(Path(__file__).parent)
    done = subprocess.run(
        [sys.executable, "-c", SHARDED, tests],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    errors = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(errors) == set(SEMIRINGS)
    for name, (chunks, same_inf, error) in errors.items():
        assert chunks > 1, name  # sliced, so the devices share the chunks
        assert same_inf, name
        assert error <= 1e-9, (name, error)


# --- min-plus: shortest paths -------------------------------------------------


def _graph(n: int, seed: int, density: float = 0.2) -> np.ndarray:
    """Edge lengths in [1, 10], inf where there is no edge, 0 on the diagonal.

    No edge enters node 0, so no other node reaches it.
    """
    rng = np.random.default_rng(seed)
    d = np.where(rng.random((n, n)) < density, rng.uniform(1, 10, (n, n)), np.inf)
    d[:, 0] = np.inf
    np.fill_diagonal(d, 0.0)
    return d


def _floyd_warshall(d: np.ndarray) -> np.ndarray:
    dist = d.copy()
    for k in range(len(d)):
        dist = np.minimum(dist, dist[:, k, None] + dist[None, k, :])
    return dist


@pytest.mark.parametrize("limit", [None, "8kB"])
def test_min_plus_squaring_gives_floyd_warshall(limit):
    # All-pairs shortest paths: squaring the distance matrix in min-plus
    # doubles the hops a path may take; ceil(log2(n - 1)) squarings suffice.
    d = _graph(24, seed=3)
    dist = jnp.asarray(d)
    # the limit slices the product; planned for a TPU, a loop's scratch
    # (1 MiB) is over 8 kB: the CPU's figures plan it on every device
    profile = einslice.profiles.CPU if limit else None
    for _ in range(5):  # 2**5 = 32 >= 23 hops
        dist = einslice.min_einsum(
            "ik,kj->ij", dist, dist, memory_limit=limit, profile=profile
        )
    want = _floyd_warshall(d)
    assert np.isinf(want).any() and np.isfinite(want).sum() > 24  # both kinds
    np.testing.assert_array_equal(np.isinf(dist), np.isinf(want))
    np.testing.assert_allclose(dist, want, rtol=1e-12)


def test_min_plus_paths_of_three_hops_on_every_executor():
    d = [_graph(10, seed) for seed in (4, 5, 6)]
    want = np.min(
        d[0][:, :, None, None] + d[1][None, :, :, None] + d[2][None, None, :, :],
        axis=(1, 2),
    )
    formula = "ij,jk,kl->il"
    plan = einslice.plan(formula, *d, semiring="min", memory_limit="2kB")
    assert plan.chunks  # sliced
    for out in (plan(*d), run_on_host(plan, d), einslice.min_einsum(formula, *d)):
        np.testing.assert_array_equal(np.asarray(out), want)


def test_min_plus_gradient_is_the_argmin_indicator():
    # d/d a of min_k a[i, k] + b[k, j] is 1 at the minimizing k, else 0; with
    # ties, the first minimizing k (as max's gradient takes the first maximum).
    a = np.array([[3.0, 1.0, 1.0], [0.0, 5.0, 2.0]])
    b = np.zeros((3, 1))
    grad = jax.grad(lambda x: einslice.min_einsum("ik,kj->ij", x, b).sum())(a)
    np.testing.assert_array_equal(grad, [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])


def test_min_plus_no_path_is_inf_and_annihilates():
    # +inf (no path) times -inf stays the semiring's zero, +inf, not NaN.
    a = np.array([[np.inf, 0.0]])
    b = np.array([[-np.inf], [np.inf]])
    out = einslice.min_einsum("ik,kj->ij", a, b)
    np.testing.assert_array_equal(out, [[np.inf]])
