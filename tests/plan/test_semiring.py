"""The `Semiring` class on its own: lookup, errors, equality, facts. No JAX."""

from __future__ import annotations

import dataclasses
import math
import pickle

import pytest

from einslice._errors import EinsliceError
from einslice._plan._semiring import (
    LOG,
    MAX,
    SEMIRINGS,
    SMALL_CONTRACTION,
    SUM,
    Semiring,
    semiring_named,
)


def test_every_public_spelling_names_its_instance():
    assert semiring_named("sum") is SUM
    assert semiring_named("log") is LOG
    assert semiring_named("max") is MAX
    assert list(SEMIRINGS) == ["sum", "log", "max"]
    assert all(SEMIRINGS[name].name == name for name in SEMIRINGS)


@pytest.mark.parametrize(
    "bad", ["tropical", "Sum", "logsumexp", "", None, 3, ["sum"], SUM]
)
def test_an_unknown_name_is_refused_with_the_valid_ones(bad):
    with pytest.raises(EinsliceError) as caught:
        semiring_named(bad)
    message = str(caught.value)
    assert repr(bad) in message
    assert "['sum', 'log', 'max']" in message


def test_equal_semirings_are_equal_and_hash_alike():
    copy = dataclasses.replace(LOG)
    assert copy is not LOG
    assert copy == LOG and hash(copy) == hash(LOG)
    assert pickle.loads(pickle.dumps(MAX)) == MAX
    assert len({SUM, LOG, MAX, copy}) == 3
    assert SUM != LOG != MAX != SUM
    # usable in cache keys, as plans and lru_caches use them
    assert {(SUM, 1): "a"}[(semiring_named("sum"), 1)] == "a"


def test_semirings_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        SUM.name = "log"  # type: ignore[misc]


def test_identities_and_products():
    assert SUM.zero == 0 and not SUM.needs_inexact
    assert LOG.zero == MAX.zero == -math.inf
    assert LOG.needs_inexact and MAX.needs_inexact
    assert SUM.multiplies and not LOG.multiplies and not MAX.multiplies


def test_only_sum_is_what_jnp_einsum_computes():
    assert [s.name for s in SEMIRINGS.values() if s.jnp_einsum] == ["sum"]
    assert [s.name for s in SEMIRINGS.values() if s.widens] == ["sum"]


def test_how_each_contracts_a_step():
    assert not any(SUM.contracts_by_union(n) for n in (0, 1, 16, 10**9))
    assert LOG.contracts_by_union(SMALL_CONTRACTION)
    assert not LOG.contracts_by_union(SMALL_CONTRACTION + 1)
    assert MAX.contracts_by_union(0) and MAX.contracts_by_union(10**12)
    assert [s.name for s in SEMIRINGS.values() if s.shifted_exp_dot] == ["log"]
    assert [s.name for s in SEMIRINGS.values() if s.scaled_form] == ["log"]


def test_derivative_rules():
    assert [s.name for s in SEMIRINGS.values() if s.weights_tangents] == ["log"]
    assert [s.name for s in SEMIRINGS.values() if s.selective] == ["max"]


def test_collectives():
    assert (SUM.all_reduce, SUM.all_reduce_passes) == ("psum", 1)
    assert LOG.all_reduce_passes == 2 and "pmax" in LOG.all_reduce
    assert (MAX.all_reduce, MAX.all_reduce_passes) == ("pmax", 1)


def test_a_semiring_is_plain_data():
    fields = {f.name for f in dataclasses.fields(Semiring)}
    assert "name" in fields and len(fields) == len(dataclasses.astuple(SUM))
