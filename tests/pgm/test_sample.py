"""Exact samples: statistically against exact marginals, evidence, limits, keys.

The statistical checks (`frequencies.py`) G-test every variable's and every
factor pair's frequencies against `marginals`, Bonferroni-corrected at a
fixed level, seeded; each is shown to have power on a perturbed model and on
a sampler that ignores the dependencies.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import jax
import numpy as np
import pytest
from frequencies import frequency_p_values, passes

from einslice import EinsliceError, MemoryLimitError
from einslice.pgm import (
    FactorGraph,
    _sample,
    marginals,
    read_evidence,
    read_uai,
    sample,
)

_ROOT = Path(__file__).resolve().parents[2]
SHARED = next(
    (
        p / "shared" / "data" / "uai"
        for p in (_ROOT / "..", _ROOT.parents[1])
        if (p / "shared" / "data" / "uai").is_dir()
    ),
    _ROOT / ".." / "shared" / "data" / "uai",
)
needs_shared = pytest.mark.skipif(
    not SHARED.is_dir(), reason=f"the shared UAI instances are not at {SHARED}"
)


def loop_model(seed: int = 0, sharp: float = 2.0) -> FactorGraph:
    """Six variables of 2-4 states in a loop with a triple, and some zeros."""
    rng = np.random.default_rng(seed)
    cards = [3, 4, 2, 3, 2, 4]
    scopes = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0), (1, 3, 5), (2,)]
    tables = [rng.random([cards[v] for v in s]) ** sharp for s in scopes]
    tables[0][0, 1] = 0.0  # a hard constraint
    tables[6][1, 0, 2] = 0.0
    return FactorGraph.from_factors(scopes, tables, cards)


@pytest.mark.slow
def test_samples_match_the_exact_marginals():
    model = loop_model()
    x = sample(model, 40_000, key=jax.random.key(0), memory_limit="64MB")
    assert x.shape == (40_000, 6) and x.dtype == np.int32
    p = frequency_p_values(model, x)
    assert len(p) == 6 + 7
    assert passes(p), p


def test_the_check_rejects_a_perturbed_model():
    model = loop_model()
    tables = [f.log_table.copy() for f in model.factors]
    tables[1][:, 0] += 0.2  # one factor: x2 = 0 is e^0.2 = 1.22x likelier
    wrong = FactorGraph.from_factors(
        [f.scope for f in model.factors], tables, model.cardinalities, log=True
    )
    x = sample(wrong, 40_000, key=jax.random.key(0), memory_limit="64MB")
    assert not passes(frequency_p_values(model, x))


def test_the_check_rejects_a_sampler_that_ignores_dependencies():
    model = loop_model()
    exact = marginals(model, dtype="float64").variables
    rng = np.random.default_rng(0)
    independent = np.stack(
        [rng.choice(len(p), size=40_000, p=p) for p in exact.values()], axis=1
    )
    p = frequency_p_values(model, independent)
    assert all(p[(v,)] > 1e-6 for v in range(6))  # the singles are right...
    assert not passes(p)  # ...the pairs are not


def test_evidence_is_in_every_sample_and_zeros_never_are():
    model = loop_model(1)
    evidence = {2: 1, 4: 0}
    x = sample(model, 20_000, evidence, key=jax.random.key(1))
    assert (x[:, 2] == 1).all() and (x[:, 4] == 0).all()
    scores = {tuple(r): model.log_score(r) for r in np.unique(x, axis=0).tolist()}
    assert all(math.isfinite(s) for s in scores.values())
    assert passes(frequency_p_values(model, x, evidence))


def test_the_same_key_gives_the_same_samples():
    model = loop_model()
    # (40 000, as above: the compiled sampler is reused, not compiled again)
    a = sample(model, 40_000, key=jax.random.key(7), memory_limit="64MB")
    b = sample(model, 40_000, key=jax.random.key(7), memory_limit="64MB")
    c = sample(model, 40_000, key=jax.random.key(8), memory_limit="64MB")
    np.testing.assert_array_equal(a, b)
    assert (a != c).any()
    old_style = sample(model, 40_000, key=jax.random.PRNGKey(7), memory_limit="64MB")
    np.testing.assert_array_equal(old_style, a)


def test_names_zero_samples_and_a_model_with_one_table():
    potentials = {("A", "B"): np.log([[1.0, 2.0], [3.0, 4.0]])}
    model = FactorGraph.from_cliques(potentials, log=True)
    assert sample(model, 0, key=jax.random.key(0)).shape == (0, 2)
    x = sample(model, 20_000, key=jax.random.key(0))
    freq = np.bincount(x[:, 0] * 2 + x[:, 1], minlength=4) / len(x)
    assert passes(frequency_p_values(model, x))
    np.testing.assert_allclose(freq, [0.1, 0.2, 0.3, 0.4], atol=0.02)
    fixed = sample(model, 5, {"A": 1, "B": 0}, key=jax.random.key(0))
    assert fixed.tolist() == [[1, 0]] * 5


def heavy_model() -> FactorGraph:
    """A ring of 6-state variables whose nodes, kept, outweigh a few samples."""
    rng = np.random.default_rng(2)
    n = 7
    scopes = [(i, (i + 1) % n, (i + 2) % n) for i in range(n)]
    tables = [rng.random((6, 6, 6)) ** 2 for _ in scopes]
    return FactorGraph.from_factors(scopes, tables)


def test_a_limit_below_the_walk_conditions_on_variables():
    model = heavy_model()
    n = 30_000
    tree_bytes = _bytes_needed(model, n)
    limit = int(tree_bytes * 0.6)  # (the walk needs 96 864 B here)
    x = sample(model, n, key=jax.random.key(3), memory_limit=limit)
    layout = _layout(model, n, limit)
    assert layout.walk is None, "the walk should not fit this limit"
    assert layout.conditioned, "the limit should have forced conditioning"
    assert layout.peak_bytes <= limit
    assert passes(frequency_p_values(model, x))


def test_a_limit_below_the_kept_nodes_walks_down_recomputing_them():
    model = heavy_model()
    n = 20_000
    limit = 100_000  # under every node kept (142 600 B), over the walk's least
    assert _bytes_needed(model, n) > limit
    layout = _layout(model, n, limit)
    assert layout.walk is not None and not layout.conditioned
    assert layout.walk.made > layout.walk.steps, "the limit should force remaking"
    assert layout.peak_bytes <= limit
    x = sample(model, n, key=jax.random.key(4), memory_limit=limit)
    assert passes(frequency_p_values(model, x))
    again = sample(model, n, key=jax.random.key(4), memory_limit=limit)
    np.testing.assert_array_equal(again, x)


@needs_shared
def test_the_walk_holds_its_peak_to_the_limit_on_grids_12():
    import tracemalloc

    from einslice._internal import host_profile
    from einslice.pgm import _infer, _walk
    from einslice.pgm._network import build_network

    model = read_uai(SHARED / "Grids_12.uai")
    evidence = read_evidence(SHARED / "Grids_12.uai.evid")
    limit, n = 600_000, 4_000  # every node kept needs 1.0 MB
    network, order = _infer._resolve(
        build_network(model.condition(evidence)),
        "auto",
        "log",
        limit,
        np.dtype("float32"),
        True,
        host_profile(),
    )
    tree = _sample._tree(network, order)
    layout = _sample._fit(tree, n, 4, limit)
    assert layout.walk is not None and layout.peak_bytes <= limit
    assert layout.walk.made > layout.walk.steps
    [np.asarray(t) for t in network.tables]  # (the tables are not counted)
    tracemalloc.start()
    try:
        x = _walk._run_walk(network, tree, layout.walk, n, jax.random.key(0))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    samples = 2 * x.nbytes  # the output, and its transpose's copy
    assert peak - samples <= limit, (peak, samples, layout.peak_bytes)
    assert x.shape == (n, network.model.num_variables)


def test_a_limit_below_every_layout_states_the_smallest():
    model = heavy_model()
    with pytest.raises(MemoryLimitError, match="raise memory_limit") as e:
        sample(model, 100, key=jax.random.key(0), memory_limit="200B")
    smallest = e.value.smallest_limit
    assert smallest > 200
    assert sample(model, 100, key=jax.random.key(0), memory_limit=smallest).shape == (
        100,
        7,
    )


def test_evidence_of_probability_zero_is_an_error():
    model = FactorGraph.from_factors([(0, 1)], [np.array([[1.0, 0.0], [0.0, 1.0]])])
    with pytest.raises(EinsliceError, match=re.escape("Z = 0")):
        sample(model, 10, {0: 0, 1: 1}, key=jax.random.key(0))
    with pytest.raises(EinsliceError, match=re.escape("Z = 0")):
        sample(
            FactorGraph.from_factors([(0, 1), (0,)], [np.eye(2), [0.0, 0.0]]),
            10,
            key=jax.random.key(0),
        )


def test_bad_arguments_are_refused():
    model = loop_model()
    with pytest.raises(EinsliceError, match="non-negative int"):
        sample(model, -1, key=jax.random.key(0))
    with pytest.raises(EinsliceError, match=re.escape("jax.random key")):
        sample(model, 1, key=0)  # type: ignore[arg-type]
    with pytest.raises(EinsliceError, match="one key"):
        sample(model, 1, key=jax.random.split(jax.random.key(0), 2))


def test_a_step_whose_children_peak_apart_is_summed_exactly():
    # Two tables whose products underflow float64 after shifting each by its max.
    a = np.array([[0.0, -800.0], [-800.0, 0.0]])
    b = np.array([[-800.0, 0.0], [0.0, -800.0]])
    out = _sample._log_product([a, b], [(0, 1), (1, 2)], (0, 2), (1,))
    # x0 = x2: both x1 give e^-800; x0 != x2: one x1 gives e^0
    diagonal = -800.0 + math.log(2.0)
    np.testing.assert_allclose(out, [[diagonal, 0.0], [0.0, diagonal]])
    assert np.isfinite(out).all()


def _layout(model: FactorGraph, n: int, limit: int):
    from einslice._internal import host_profile
    from einslice.pgm import _infer
    from einslice.pgm._network import build_network

    network, order = _infer._resolve(
        build_network(model),
        "auto",
        "log",
        limit,
        np.dtype("float32"),
        True,
        host_profile(),
    )
    return _sample._fit(_sample._tree(network, order), n, 4, limit)


def _bytes_needed(model: FactorGraph, n: int) -> int:
    """The sampler's bytes, every node kept, drawing one sample at a time."""
    from einslice._internal import host_profile
    from einslice.pgm import _infer
    from einslice.pgm._network import build_network

    network, order = _infer._resolve(
        build_network(model),
        "auto",
        "log",
        1 << 40,
        np.dtype("float32"),
        True,
        host_profile(),
    )
    return _sample._peak(_sample._tree(network, order), frozenset(), 1, 4)


# -- the shared competition instances, 10^5-10^6 samples ------------------------------


@needs_shared
@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "n", "limit"),
    [
        ("Promedus_24", 1_000_000, "256MB"),
        ("Grids_12", 300_000, "256MB"),
        ("Segmentation_11", 200_000, "256MB"),
        ("Grids_15", 100_000, "256MB"),  # the walk: every node kept is 3.2 GB
        ("CSP_11", 100_000, "256MB"),  # the walk: 1.2 GB
    ],
)
def test_shared_instances_samples_match_their_marginals(name, n, limit):
    model = read_uai(SHARED / f"{name}.uai")
    evidence = read_evidence(SHARED / f"{name}.uai.evid")
    x = sample(model, n, evidence, key=jax.random.key(11), memory_limit=limit)
    for v, s in evidence.items():
        assert (x[:, v] == s).all()
    p = frequency_p_values(model, x, evidence)
    assert passes(p), sorted(p.items(), key=lambda kv: kv[1])[:5]
