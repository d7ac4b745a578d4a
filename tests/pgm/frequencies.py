"""A statistical check of samples: G-tests of single and pairwise frequencies.

Every variable's frequencies, and those of every pair of variables that
share a factor, are G-tested (likelihood ratio) against the exact marginals
(`marginals(..., factors=True)`); cells expected fewer than 5 times are
pooled into one. The family of tests is rejected when its smallest p-value is
below ``alpha / tests`` (Bonferroni), so a correct sampler fails with
probability at most ``alpha``.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from einslice.pgm import FactorGraph, marginals

ALPHA = 1e-3


def g_test(counts: np.ndarray, probabilities: np.ndarray) -> float:
    """The p-value of observed ``counts`` under ``probabilities`` (pooled cells)."""
    counts = counts.ravel().astype(np.float64)
    expected = probabilities.ravel() * counts.sum()
    if np.any((expected == 0) & (counts > 0)):
        return 0.0  # a state of probability zero was drawn
    small = expected < 5
    if small.any():
        counts = np.append(counts[~small], counts[small].sum())
        expected = np.append(expected[~small], expected[small].sum())
    keep = expected > 0
    counts, expected = counts[keep], expected[keep]
    if len(counts) < 2:
        return 1.0
    ratio = np.where(counts > 0, counts / expected, 1.0)  # 0 log 0 = 0
    g = 2 * np.sum(counts * np.log(ratio))
    return float(stats.chi2.sf(g, len(counts) - 1))


def frequency_p_values(
    model: FactorGraph, samples: np.ndarray, evidence=None, max_pairs: int = 400
) -> dict[tuple, float]:
    """Every variable's and factor pair's G-test p-value against exact marginals."""
    exact = marginals(model, evidence, factors=True, dtype="float64")
    observed = set((evidence or {}).keys())
    position = {name: i for i, name in enumerate(model.variables)}
    out: dict[tuple, float] = {}
    for name, p in exact.variables.items():
        if name in observed:
            continue
        i = position[name]
        counts = np.bincount(samples[:, i], minlength=len(p))
        out[(i,)] = g_test(counts, p)
    pairs = 0
    for factor, table in zip(model.factors, exact.factors or (), strict=True):
        free = [
            a for a, v in enumerate(factor.scope) if model.variables[v] not in observed
        ]
        if len(free) < 2 or pairs >= max_pairs:
            continue
        a, b = free[:2]
        i, j = factor.scope[a], factor.scope[b]
        if (i, j) in out:
            continue
        others = tuple(k for k in range(table.ndim) if k not in (a, b))
        p = table.sum(axis=others)
        if a > b:
            p = p.T
        shape = (model.cardinalities[i], model.cardinalities[j])
        counts = np.zeros(shape)
        np.add.at(counts, (samples[:, i], samples[:, j]), 1)
        out[(i, j)] = g_test(counts, p)
        pairs += 1
    return out


def passes(p_values: dict[tuple, float], alpha: float = ALPHA) -> bool:
    """Whether no test rejects at ``alpha``, Bonferroni-corrected."""
    return min(p_values.values(), default=1.0) >= alpha / max(1, len(p_values))
