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
    MIN,
    SEMIRINGS,
    SMALL_CONTRACTION,
    SMALL_UNION,
    SUM,
    Semiring,
    negation,
    rules_for_every_semiring,
    semiring_named,
)


def test_every_public_spelling_names_its_instance():
    assert semiring_named("sum") is SUM
    assert semiring_named("log") is LOG
    assert semiring_named("max") is MAX
    assert semiring_named("min") is MIN
    assert list(SEMIRINGS) == ["sum", "log", "max", "min"]
    assert all(SEMIRINGS[name].name == name for name in SEMIRINGS)


@pytest.mark.parametrize(
    "bad", ["tropical", "Sum", "logsumexp", "", None, 3, ["sum"], SUM]
)
def test_an_unknown_name_is_refused_with_the_valid_ones(bad):
    with pytest.raises(EinsliceError) as caught:
        semiring_named(bad)
    message = str(caught.value)
    assert repr(bad) in message
    assert "['sum', 'log', 'max', 'min']" in message


def test_equal_semirings_are_equal_and_hash_alike():
    copy = dataclasses.replace(LOG)
    assert copy is not LOG
    assert copy == LOG and hash(copy) == hash(LOG)
    assert pickle.loads(pickle.dumps(MAX)) == MAX
    assert len({SUM, LOG, MAX, MIN, copy}) == 4
    assert SUM != LOG != MAX != SUM
    assert MIN != MAX
    # usable in cache keys, as plans and lru_caches use them
    assert {(SUM, 1): "a"}[(semiring_named("sum"), 1)] == "a"


def test_semirings_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        SUM.name = "log"  # type: ignore[misc]


def test_identities_and_products():
    assert SUM.zero == 0 and not SUM.needs_inexact
    assert LOG.zero == MAX.zero == -math.inf
    assert MIN.zero == math.inf
    assert LOG.needs_inexact and MAX.needs_inexact and MIN.needs_inexact
    assert SUM.multiplies and not LOG.multiplies and not MAX.multiplies
    assert not MIN.multiplies


def test_only_sum_is_what_jnp_einsum_computes():
    assert [s.name for s in SEMIRINGS.values() if s.jnp_einsum] == ["sum"]
    assert [s.name for s in SEMIRINGS.values() if s.widens] == ["sum"]


def test_how_each_contracts_a_step():
    assert not any(SUM.contracts_by_union(n) for n in (0, 1, 16, 10**9))
    assert LOG.contracts_by_union(SMALL_CONTRACTION)
    assert not LOG.contracts_by_union(SMALL_CONTRACTION + 1)
    # or a union small enough (a scalar over 64 entries), whatever it contracts
    assert LOG.contracts_by_union(64, union=SMALL_UNION)
    assert not LOG.contracts_by_union(64, union=SMALL_UNION + 1)
    assert not SUM.contracts_by_union(64, union=64)
    assert MAX.contracts_by_union(0) and MAX.contracts_by_union(10**12)
    assert MIN.contracts_by_union(0) and MIN.contracts_by_union(10**12)
    assert [s.name for s in SEMIRINGS.values() if s.shifted_exp_dot] == ["log"]
    assert [s.name for s in SEMIRINGS.values() if s.scaled_form] == ["log"]


def test_derivative_rules():
    assert [s.name for s in SEMIRINGS.values() if s.weights_tangents] == ["log"]
    assert [s.name for s in SEMIRINGS.values() if s.selective] == ["max", "min"]


def test_collectives():
    assert (SUM.all_reduce, SUM.all_reduce_passes) == ("psum", 1)
    assert LOG.all_reduce_passes == 2 and "pmax" in LOG.all_reduce
    assert (MAX.all_reduce, MAX.all_reduce_passes) == ("pmax", 1)
    assert (MIN.all_reduce, MIN.all_reduce_passes) == ("pmin", 1)


def test_a_semiring_is_plain_data():
    fields = {f.name for f in dataclasses.fields(Semiring)}
    assert "name" in fields and len(fields) == len(dataclasses.astuple(SUM))


def test_a_negation_copies_how_its_base_runs():
    # min-plus runs max-plus's rules on negated operands: every fact about
    # contracting, costing and differentiating is max's; the zero is negated.
    assert MIN.negation_of == "max"
    assert [s.name for s in SEMIRINGS.values() if s.negation_of] == ["min"]
    same = dataclasses.replace(
        MIN, name=MAX.name, description=MAX.description, zero=MAX.zero
    )
    assert dataclasses.replace(same, all_reduce="pmax", negation_of=None) == MAX


def test_a_negation_of_a_negation_is_refused():
    with pytest.raises(EinsliceError, match="negate 'max' instead"):
        negation(MIN, "max again", "max-plus", "pmax")


def test_a_negation_of_a_product_semiring_is_refused():
    with pytest.raises(EinsliceError, match=r"-\(a \* b\)"):
        negation(SUM, "negsum", "negated sums", "psum")


def test_every_semiring_needs_rules_in_every_executor(monkeypatch):
    written = {"sum": "+", "log": "lse", "max": "max"}
    table = rules_for_every_semiring("demo executor", written, "-{}".format, "here")
    assert table == {"sum": "+", "log": "lse", "max": "max", "min": "-max"}
    # A registered semiring with no rules (and no base to derive them from)
    # is an error naming it and the executor.
    odd = dataclasses.replace(SUM, name="or", description="boolean or-and")
    monkeypatch.setitem(SEMIRINGS, "or", odd)
    with pytest.raises(EinsliceError) as caught:
        rules_for_every_semiring("demo executor", written, "-{}".format, "T in m.py")
    message = str(caught.value)
    assert "'or'" in message and "demo executor" in message and "T in m.py" in message
    # Rules for a name the registry lacks are refused too.
    monkeypatch.delitem(SEMIRINGS, "or")
    with pytest.raises(EinsliceError, match="not registered"):
        rules_for_every_semiring("demo", {**written, "xor": "^"}, str, "here")
