"""gradient=True: a plan whose derivative fits the limit too, under both profiles."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import einslice
from einslice import profiles
from strategies import sliceable_equations

PROFILES = [profiles.CPU, profiles.GPU]
SHARED = Path("/work/shared/data/uai")


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.device_kind)
def test_plain_planning_fails_backward_where_gradient_planning_fits(profile):
    sub = "df,cb,ed,bd,cb,df->"
    shapes = [(8, 8), (6, 12), (6, 8), (12, 8), (6, 12), (8, 8)]
    limit = 12612
    plain = einslice.plan(sub, *shapes, memory_limit=limit, profile=profile)
    assert plain.peak_bytes <= limit < plain.tangent_cost.peak_bytes
    p = einslice.plan(sub, *shapes, memory_limit=limit, profile=profile, gradient=True)
    assert p.peak_bytes <= limit and p.tangent_cost.peak_bytes <= limit
    ops = [np.random.default_rng(k).standard_normal(s) for k, s in enumerate(shapes)]
    grads = jax.grad(lambda *x: p(*x), argnums=(0, 1))(*ops)
    want = jax.grad(lambda *x: jax.numpy.einsum(sub, *x), argnums=(0, 1))(*ops)
    for g, w in zip(grads, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(
    eq=sliceable_equations(ellipsis=False, repeats=False, implicit=False),
    fraction=st.sampled_from([0.5, 0.2, 0.05]),
    profile=st.sampled_from(PROFILES),
)
def test_never_fits_forward_fails_backward_when_some_plan_fits_both(
    eq, fraction, profile
):
    sub, shapes = eq.subscripts, eq.shapes
    whole = einslice.plan(sub, *shapes, profile=profile)
    limit = max(1, int(whole.peak_bytes * fraction))
    witness = None  # any plan found by plain planning under this or a lower limit
    for optimize in ("auto", "greedy"):
        for share in (1, 0.5, 0.25, 0.1):
            try:
                q = einslice.plan(sub, *shapes, memory_limit=int(limit * share),
                                  optimize=optimize, profile=profile)  # fmt: skip
            except einslice.MemoryLimitError:
                continue
            if q.tangent_cost.peak_bytes <= limit:
                witness = q
    for attempt in range(3):  # the forward's smallest limit, then the derivative's
        try:
            p = einslice.plan(sub, *shapes, memory_limit=limit, profile=profile,
                              gradient=True)  # fmt: skip
            break
        except einslice.MemoryLimitError as e:
            assert witness is None or attempt, (str(witness), e)
            assert e.smallest_limit > limit and len(str(e)) < 600
            limit = e.smallest_limit
    else:
        raise AssertionError("retrying at smallest_limit did not succeed")
    assert p.peak_bytes <= limit and p.tangent_cost.peak_bytes <= limit


def test_error_messages_cut_long_equations():
    n = 120  # a chain of 120 matrices: a 700-character equation
    args: list = []
    for k in range(n):
        args += [(4, 4), [k, k + 1]]
    args.append([0, n])
    plain = einslice.plan(*args, memory_limit=10**9)
    assert len(plain.equation.text()) > 500
    with pytest.raises(einslice.MemoryLimitError) as caught:
        einslice.plan(*args, memory_limit=plain.peak_bytes, gradient=True)
    text = str(caught.value)
    assert f"({n} operands" in text and len(text) < 600


@pytest.mark.slow
@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.device_kind)
def test_grids_15_marginals_plan_within_256mb(profile):
    from einslice.pgm import _infer, read_uai

    path = SHARED / "Grids_15.uai"
    if not path.exists():
        pytest.skip("shared UAI data not here")
    limit = 256 * 10**6
    prepared = _infer._prepare(read_uai(path), None, "log", limit, "auto",
                               np.dtype(np.float32), profile)  # fmt: skip
    plan = prepared.plan
    assert plan is not None
    assert plan.peak_bytes <= limit and plan.tangent_cost.peak_bytes <= limit
