"""Hypothesis strategies for einsum equations, shapes and memory limits.

Also the numpy references the properties compare against: ``numpy.einsum`` for
the sum semiring, and a brute-force "materialize every index, then reduce" for
every semiring (``materialized_reduce``), independent of any path search.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from numpy.typing import DTypeLike

import einslice
from einslice._plan._request import PlanRequest


def at_most(examples: int, **kwargs) -> settings:
    """``settings(max_examples=examples, **kwargs)``, fewer where the profile says so.

    For properties that set their own count because each example compiles: the
    ``accelerator`` profile's 3 examples (tests/conftest.py) then hold for them
    too, where ``settings(max_examples=examples)`` would override the profile.

    >>> at_most(10**6).max_examples == settings().max_examples  # the profile's
    True
    """
    fewest = min(examples, settings().max_examples)  # (settings(): the profile)
    return settings(max_examples=fewest, **kwargs)


LETTERS = "abcdefghij"
"""Index names the random equations draw from (up to 10 distinct indices)."""

_ELLIPSIS_LETTERS = "ZYXW"
"""Names the ellipsis dimensions get when an equation is made explicit."""


@dataclass(frozen=True)
class Equation:
    """A random einsum: terms (possibly with ``...``), output and operand shapes.

    ``output`` is ``None`` for the implicit form (no ``->``).
    """

    terms: tuple[str, ...]
    output: str | None
    shapes: tuple[tuple[int, ...], ...]

    @property
    def subscripts(self) -> str:
        lhs = ",".join(self.terms)
        return lhs if self.output is None else f"{lhs}->{self.output}"

    @property
    def has_ellipsis(self) -> bool:
        return any("..." in t for t in self.terms)

    def ellipsis_rank(self) -> int:
        ranks = [
            len(shape) - (len(term) - 3)
            for term, shape in zip(self.terms, self.shapes, strict=True)
            if "..." in term
        ]
        return max(ranks, default=0)

    def explicit(self) -> tuple[tuple[str, ...], str]:
        """The same einsum without ``...`` and with an explicit output.

        Ellipsis dimensions become upper-case indices, right-aligned as numpy
        broadcasts them; the implicit output is numpy's (ellipsis first, then
        the indices that occur exactly once, sorted).
        """
        rank = self.ellipsis_rank()
        ell = _ELLIPSIS_LETTERS[:rank]
        terms = []
        for term, shape in zip(self.terms, self.shapes, strict=True):
            if "..." in term:
                before, after = term.split("...")
                r = len(shape) - len(before) - len(after)
                term = before + ell[rank - r :] + after
            terms.append(term)
        if self.output is None:
            counts = Counter("".join(t.replace("...", "") for t in self.terms))
            output = ell + "".join(sorted(c for c, n in counts.items() if n == 1))
        else:
            output = self.output.replace("...", ell)
        return tuple(terms), output

    def sizes(self) -> dict[str, int]:
        """Index -> size in the explicit form (size-1 occurrences broadcast)."""
        terms, _ = self.explicit()
        sizes: dict[str, int] = {}
        for term, shape in zip(terms, self.shapes, strict=True):
            for c, n in zip(term, shape, strict=True):
                if sizes.get(c, 1) == 1:
                    sizes[c] = n
        return sizes

    def output_shape(self) -> tuple[int, ...]:
        _, output = self.explicit()
        sizes = self.sizes()
        return tuple(sizes[c] for c in output)

    def interleaved(self, operands, label=ord) -> list:
        """``(op0, sublist0, op1, sublist1, ..., [out])`` with ``label(c)`` ints."""

        def sublist(term: str) -> list:
            if "..." in term:
                before, after = term.split("...")
                return [*map(label, before), Ellipsis, *map(label, after)]
            return [label(c) for c in term]

        args: list = []
        for op, term in zip(operands, self.terms, strict=True):
            args += [op, sublist(term)]
        if self.output is not None:
            args.append(sublist(self.output))
        return args


@st.composite
def equations(
    draw,
    *,
    min_operands: int = 1,
    max_operands: int = 8,
    max_indices: int = 10,
    max_term: int = 4,
    min_size: int = 2,
    max_size: int = 3,
    max_elements: int = 1024,
    ellipsis: bool = True,
    repeats: bool = True,
    broadcast: bool = True,
    zero_size: bool = False,
    implicit: bool = True,
    scalars: bool = True,
) -> Equation:
    """Random einsums accepted by both ``numpy.einsum`` and ``jnp.einsum``.

    Args:
        min_size: smallest size of an index (size 1 comes from broadcasting),
            unless the ``max_elements`` budget is spent.
        max_elements: bound on the product of all index sizes (the naive joint
            table), so that brute-force references stay cheap.
        repeats: allow an index repeated within one term (diagonals, traces).
        broadcast: allow size-1 dimensions against larger ones (named indices
            and ellipsis dimensions).
        zero_size: allow indices of size 0.
        implicit: allow the implicit output form (no ``->``).
        scalars: allow operands with no indices.
    """
    n_ops = draw(st.integers(min_operands, max_operands))
    n_idx = draw(st.integers(min(2, max_indices), max_indices))
    letters = LETTERS[:n_idx]
    bare_terms = []
    for _ in range(n_ops):
        scalar = scalars and draw(st.integers(0, 7)) == 0
        term = draw(
            st.lists(
                st.sampled_from(letters),
                min_size=0 if scalar else 1,
                max_size=0 if scalar else max_term,
                unique=not repeats,
            )
        )
        bare_terms.append("".join(term))
    used = sorted(set("".join(bare_terms)))

    budget = max_elements
    sizes: dict[str, int] = {}
    for c in used:
        hi = max(1, min(max_size, budget))
        lo = 0 if zero_size and draw(st.integers(0, 7)) == 0 else min(min_size, hi)
        sizes[c] = draw(st.integers(lo, hi))
        budget //= max(sizes[c], 1)

    ell_sizes: list[int] = []
    with_ellipsis = [False] * n_ops
    if ellipsis and draw(st.booleans()):
        ell_rank = draw(st.integers(0, 2))
        for _ in range(ell_rank):
            ell_sizes.append(draw(st.integers(1, max(1, min(max_size, budget)))))
            budget //= ell_sizes[-1]
        with_ellipsis = draw(st.lists(st.booleans(), min_size=n_ops, max_size=n_ops))
    any_ellipsis = any(with_ellipsis)

    terms: list[str] = []
    shapes: list[tuple[int, ...]] = []
    for term, has_ell in zip(bare_terms, with_ellipsis, strict=True):
        own = {c: sizes[c] for c in term}
        if broadcast:
            for c in sorted(own):
                if draw(st.integers(0, 7)) == 0:
                    own[c] = 1
        dims = [own[c] for c in term]
        if has_ell:
            pos = draw(st.integers(0, len(term)))
            r = draw(st.integers(0, len(ell_sizes)))
            ell = list(ell_sizes[len(ell_sizes) - r :])
            if broadcast:
                ell = [1 if draw(st.integers(0, 5)) == 0 else n for n in ell]
            term = term[:pos] + "..." + term[pos:]
            dims = dims[:pos] + ell + dims[pos:]
        terms.append(term)
        shapes.append(tuple(dims))

    output: str | None = None
    if not implicit or draw(st.integers(0, 2)) > 0:
        perm = draw(st.permutations(used))
        output = "".join(perm[: draw(st.integers(0, len(used)))])
        if any_ellipsis:
            pos = draw(st.integers(0, len(output)))
            output = output[:pos] + "..." + output[pos:]
    return Equation(tuple(terms), output, tuple(shapes))


def sliceable_equations(**kwargs) -> st.SearchStrategy[Equation]:
    """Equations with intermediates big enough (kilobytes) that slicing pays.

    With a few-byte formula the smallest sliced plan (a ``lax.scan`` has fixed
    costs) needs more memory than the unsliced one, so tight limits would just
    fall back to it; these have sizes 4..8 and no size-1 broadcasting.
    """
    options = {
        "min_operands": 2,
        "max_operands": 6,
        "min_size": 4,
        "max_size": 8,
        "max_elements": 2**15,
        "broadcast": False,
        "scalars": False,
    }
    return equations(**{**options, **kwargs})


# --- operands ---------------------------------------------------------------


def random_operands(
    eq: Equation,
    seed: int,
    dtype: DTypeLike = np.float64,
    low: float | None = None,
    high: float = 1.0,
) -> list[np.ndarray]:
    """Gaussian operands (or uniform in ``[low, high]``) of ``eq``'s shapes."""
    rng = np.random.default_rng(seed)
    ops = []
    for shape in eq.shapes:
        if low is None:
            x = rng.standard_normal(shape)
        else:
            x = rng.uniform(low, high, shape)
        ops.append(np.asarray(x, dtype=dtype))
    return ops


seeds = st.integers(0, 2**32 - 1)

# --- memory limits ------------------------------------------------------------

LIMIT_FRACTIONS = (None, 1.0, 0.5, 0.2, 0.05, 0.0)
"""Fractions of the unsliced plan's peak bytes; ``None`` means no limit, 0.0
means a 1-byte limit (always infeasible, so the retry at ``smallest_limit`` is
exercised)."""

limit_fractions = st.sampled_from(LIMIT_FRACTIONS)
tight_limit_fractions = st.sampled_from((0.2, 0.05, 0.0))


def limit_from_fraction(
    subscripts: str,
    shapes,
    fraction: float | None,
    dtype: DTypeLike = np.float64,
    **plan_kwargs,
) -> int | None:
    """A byte limit that is ``fraction`` of the unsliced plan's ``peak_bytes``."""
    if fraction is None:
        return None
    unsliced = einslice.plan(subscripts, *shapes, dtype=dtype, **plan_kwargs)
    return max(1, int(unsliced.peak_bytes * fraction))


def feasible_plan(subscripts: str, shapes, limit: int | None, **plan_kwargs):
    """``plan`` at ``limit``, or at the error's ``smallest_limit`` if it is too low.

    Checks the ``MemoryLimitError`` contract on the way: the smallest feasible
    limit exceeds the requested one, and retrying at it succeeds within it.

    Returns:
        ``(plan, limit)`` with the limit actually used.
    """
    try:
        p = einslice.plan(subscripts, *shapes, memory_limit=limit, **plan_kwargs)
    except einslice.MemoryLimitError as e:
        assert limit is not None, "MemoryLimitError without a memory_limit"
        assert isinstance(e.smallest_limit, int), e.smallest_limit
        assert e.smallest_limit > limit, (e.smallest_limit, limit)
        limit = e.smallest_limit
        p = einslice.plan(subscripts, *shapes, memory_limit=limit, **plan_kwargs)
    if limit is not None:
        assert p.peak_bytes <= limit, (p.peak_bytes, limit, str(p))
    return p, limit


# --- references ---------------------------------------------------------------


def _diagonal(term: str, x: np.ndarray) -> tuple[str, np.ndarray]:
    """Collapse repeated indices of one operand to its diagonal (no summing)."""
    unique = "".join(dict.fromkeys(term))
    return unique, np.einsum(f"{term}->{unique}", x)


def materialized_reduce(
    eq: Equation, operands, semiring: str = "sum", *, xp=np
) -> np.ndarray:
    """Brute-force einsum: build the table over all indices, then reduce it.

    ``"sum"``: Σ Π operands; ``"log"``: log Σ exp Σ operands (via logsumexp);
    ``"max"``: max Σ operands; ``"min"``: min Σ operands. Size-1 broadcasting
    comes from numpy's own broadcasting of the joint table. ``xp`` may be
    ``jax.numpy`` (then the result is differentiable; ``"log"`` uses a
    NaN-free double-``where`` logsumexp).
    """
    terms, output = eq.explicit()
    sizes = eq.sizes()
    axes = "".join(sorted(sizes))
    joint = None
    for term, x in zip(terms, operands, strict=True):
        if xp is np:
            unique, d = _diagonal(term, np.asarray(x))
        else:
            unique = "".join(dict.fromkeys(term))
            d = xp.einsum(f"{term}->{unique}", x)
        # Move to the global axis order, with size-1 axes for missing indices.
        perm = sorted(range(len(unique)), key=lambda k: axes.index(unique[k]))
        d = xp.transpose(d, perm)
        present = "".join(unique[k] for k in perm)
        shape = [d.shape[present.index(c)] if c in present else 1 for c in axes]
        d = xp.reshape(d, shape)
        if joint is None:
            joint = d
        elif semiring == "sum":
            joint = joint * d
        else:
            joint = joint + d
    full = tuple(sizes[c] for c in axes)
    if joint is None:  # no operands cannot happen; keeps type checkers quiet
        raise AssertionError
    joint = xp.broadcast_to(joint, full)
    summed = tuple(k for k, c in enumerate(axes) if c not in output)
    if semiring == "sum":
        r = xp.sum(joint, axis=summed)
    elif semiring == "max":
        r = xp.max(joint, axis=summed, initial=-np.inf)
    elif semiring == "min":
        r = xp.min(joint, axis=summed, initial=np.inf)
    elif semiring == "log":
        r = _logsumexp(joint, summed, xp)
    else:
        raise ValueError(semiring)
    kept = [c for c in axes if c in output]
    return xp.transpose(r, [kept.index(c) for c in output])


def _logsumexp(x, axis: tuple[int, ...], xp):
    if xp is np:
        from scipy.special import logsumexp

        if not axis:
            return x
        if x.size == 0:  # scipy mishandles empty arrays over several axes
            return np.full(np.sum(x, axis=axis).shape, -np.inf)
        with np.errstate(divide="ignore", invalid="ignore"):
            return logsumexp(x, axis=axis)
    import jax

    if not axis:
        return x
    m = xp.max(x, axis=axis, keepdims=True, initial=-xp.inf)
    m = jax.lax.stop_gradient(xp.where(xp.isfinite(m), m, 0.0))
    s = xp.sum(xp.exp(x - m), axis=axis)
    positive = s > 0
    safe = xp.where(positive, s, 1.0)
    return xp.where(positive, xp.log(safe) + xp.squeeze(m, axis), -xp.inf)


def abs_bound(eq: Equation, operands) -> np.ndarray:
    """Σ Π |operands|: the scale that rounding error in the einsum is relative to."""
    return np.einsum(eq.subscripts, *(np.abs(np.asarray(x)) for x in operands))


def assert_close_to_einsum(actual, eq: Equation, operands, rtol: float = 1e-10):
    """``actual`` equals ``numpy.einsum`` up to ``rtol`` of Σ Π |operands|."""
    expected = np.einsum(eq.subscripts, *operands)
    actual = np.asarray(actual)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    bound = rtol * abs_bound(eq, operands) + 1e-300
    err = np.abs(actual - expected)
    assert np.all(err <= bound), (
        f"{eq.subscripts} {eq.shapes}: max error {err.max()} "
        f"(bound {bound.max() if bound.size else 0})"
    )


def request_of(plan: einslice.Plan, **changes) -> PlanRequest:
    """A request that makes ``plan`` again (``changes``: fields to differ)."""
    fields = {
        "semiring": plan.semiring,
        "placement": plan.placement,
        "profile": plan.profile,
        "precision": plan.precision,
        **changes,
    }
    limit = plan.memory_limit
    return PlanRequest(plan.equation, plan.itemsize, plan.dtype, limit, **fields)
