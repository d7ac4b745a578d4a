"""The UAI reader, the evidence reader and the FactorGraph model (no JAX needed)."""

from __future__ import annotations

import ast
import gzip
import re
from pathlib import Path

import numpy as np
import pytest

from einslice import EinsliceError
from einslice.pgm import (
    FactorGraph,
    parse_evidence,
    parse_uai,
    read_evidence,
    read_uai,
)

DATA = Path(__file__).resolve().parents[1] / "data"
PGM = Path(__file__).resolve().parents[2] / "src" / "einslice" / "pgm"


# -- well-formed files -------------------------------------------------------------


def test_reads_markov_file():
    g = read_uai(DATA / "chain3.uai")
    assert g.cardinalities == (2, 3, 2)
    assert [f.scope for f in g.factors] == [(0,), (0, 1), (1, 2)]
    np.testing.assert_allclose(np.exp(g.factors[0].log_table), [0.4, 1.6])
    np.testing.assert_allclose(
        np.exp(g.factors[1].log_table), [[1.0, 2.0, 0.5], [0.0, 3.0, 1.5]]
    )
    # The last scope variable varies fastest: entry (x1=2, x2=1) is the 6th.
    assert np.exp(g.factors[2].log_table[2, 1]) == pytest.approx(4.0)


def test_zero_potentials_are_minus_infinity():
    g = read_uai(DATA / "chain3.uai")
    assert g.factors[1].log_table[1, 0] == -np.inf
    assert g.factors[2].log_table[1, 1] == -np.inf


def test_reads_bayes_file():
    g = read_uai(DATA / "sprinkler.uai")
    assert g.cardinalities == (2, 2, 2, 2)
    assert g.factors[3].scope == (1, 2, 3)
    cpt = np.exp(g.factors[3].log_table)  # P(wet | sprinkler, rain)
    np.testing.assert_allclose(cpt.sum(axis=-1), np.ones((2, 2)))


def test_gzip_is_accepted(tmp_path):
    zipped = tmp_path / "chain3.uai.gz"
    zipped.write_bytes(gzip.compress((DATA / "chain3.uai").read_bytes()))
    plain, packed = read_uai(DATA / "chain3.uai"), read_uai(zipped)
    assert packed.cardinalities == plain.cardinalities
    for a, b in zip(plain.factors, packed.factors, strict=True):
        assert a.scope == b.scope
        np.testing.assert_array_equal(a.log_table, b.log_table)


def test_variable_in_no_factor_is_kept():
    g = read_uai(DATA / "loop4.uai")
    assert g.num_variables == 5
    assert all(4 not in f.scope for f in g.factors)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1 1 2\n", {1: 2}),
        ("2 0 1 3 0", {0: 1, 3: 0}),
        ("0\n", {}),
        ("", {}),
        ("1\n2 0 1 3 0\n", {0: 1, 3: 0}),  # the older form: sample count first
    ],
)
def test_evidence_forms(text, expected):
    assert parse_evidence(text) == expected


def test_reads_evidence_file():
    assert read_evidence(DATA / "chain3.uai.evid") == {1: 2}


# -- malformed files: the error names the line and what was expected -----------------


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "bad_truncated.uai",
            "bad_truncated.uai, line 13: the file ends inside factor 1's table "
            "(begun on line 11): found 3 of its 4 entries; expected 1 more.",
        ),
        (
            "bad_count.uai",
            "bad_count.uai, line 11: factor 1's table declares 3 entries but its "
            "scope (0, 1) with cardinalities (2, 2) needs 4.",
        ),
        (
            "bad_card.uai",
            "bad_card.uai, line 3: variable 1 has cardinality '0'; expected a "
            "positive integer (line 2 declares N=3 variables).",
        ),
        (
            "bad_ncards.uai",
            "bad_ncards.uai, line 3: the line lists 2 cardinalities but line 2 "
            "declares N=3; expected 3 cardinalities, then the number of factors "
            "alone on the next line.",
        ),
    ],
)
def test_malformed_files_name_the_line(name, message):
    with pytest.raises(EinsliceError, match=re.escape(message)):
        read_uai(DATA / name)


_GOOD = "MARKOV\n2\n2 2\n2\n1 0\n2 0 1\n\n2\n0.5 0.5\n\n4\n1 2 3 4\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "line 1: the file is empty; expected a network type"),
        (
            _GOOD.replace("MARKOV", "CAUSAL"),
            "line 1: unknown network type 'CAUSAL'; expected one of MARKOV, BAYES.",
        ),
        (
            _GOOD.replace("2 2\n2\n", "2 2 2\n2\n"),
            "line 3: the line holds more than the 2 cardinalities declared on line 2",
        ),
        (
            _GOOD.replace("2 2\n2\n", "2 x\n2\n"),
            "line 3: variable 1 has cardinality 'x'; expected a positive integer",
        ),
        (
            _GOOD.replace("2 0 1\n", "2 0\n"),
            "line 6: factor 1's scope declares 2 variables but the line lists 1 "
            "('0'); expected '2' followed by 2 variable indices on one line",
        ),
        (
            _GOOD.replace("2 0 1\n", "2 0 5\n"),
            "line 6: factor 1's scope names variable '5'; expected an index in 0..1.",
        ),
        (
            _GOOD.replace("2 0 1\n", "2 1 1\n"),
            "line 6: factor 1's scope lists variable 1 twice; list it once.",
        ),
        (
            _GOOD.replace("1 2 3 4", "1 2 -3 4"),
            "line 12: factor 1's table entry 2 is '-3'; expected a finite, "
            "non-negative potential.",
        ),
        (
            _GOOD.replace("1 2 3 4", "1 2 three 4"),
            "line 12: factor 1's table entry 2 is 'three'; expected a number.",
        ),
        (
            _GOOD + "7\n",
            "line 13: unexpected '7' after the last table; the header (line 4) "
            "declares 2 factors, so expected the end of the file.",
        ),
        (
            _GOOD.replace("\n4\n1 2 3 4\n", "\n"),
            "line 9: the file ends before factor 1's table; expected 2 tables "
            "(line 4 declares 2 factors) but found 1.",
        ),
    ],
)
def test_malformed_text_names_the_line(text, message):
    with pytest.raises(EinsliceError, match=re.escape(message)):
        parse_uai(text, source="m.uai")


def test_well_formed_text_parses():
    g = parse_uai(_GOOD)
    assert g.cardinalities == (2, 2)
    np.testing.assert_allclose(np.exp(g.factors[1].log_table), [[1, 2], [3, 4]])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "2 0 1 3",
            "e.evid, line 1: the evidence declares 2 observed variables, so "
            "expected 5 numbers in all ('N var state var state …') but the file "
            "holds 4.",
        ),
        ("1 0 x", "e.evid, line 1: expected the state of variable 0 (an integer)"),
        (
            "2 0 1\n0 0",
            "e.evid, line 2: variable 0 is observed twice, as 1 and 0; observe it "
            "once.",
        ),
    ],
)
def test_malformed_evidence_names_the_line(text, message):
    with pytest.raises(EinsliceError, match=re.escape(message)):
        parse_evidence(text, source="e.evid")


def test_missing_file_is_an_einslice_error(tmp_path):
    with pytest.raises(EinsliceError, match=re.escape("cannot read")):
        read_uai(tmp_path / "nope.uai")


# -- the model -----------------------------------------------------------------------


def test_condition_slices_tables_and_drops_observed_variables():
    g = read_uai(DATA / "chain3.uai")
    c = g.condition({1: 2})
    assert c.variables == (0, 2)
    assert c.cardinalities == (2, 2)
    assert [f.scope for f in c.factors] == [(0,), (0,), (1,)]
    np.testing.assert_allclose(np.exp(c.factors[1].log_table), [0.5, 1.5])
    np.testing.assert_allclose(np.exp(c.factors[2].log_table), [1.0, 4.0])


def test_condition_on_a_whole_scope_leaves_a_constant():
    g = read_uai(DATA / "chain3.uai")
    c = g.condition({0: 1, 1: 1})
    assert c.factors[1].scope == ()
    assert float(np.exp(c.factors[1].log_table)) == pytest.approx(3.0)


@pytest.mark.parametrize(
    ("evidence", "message"),
    [
        ({7: 0}, "evidence names variable 7, which is not in the model"),
        ({1: 3}, "evidence sets variable 1 to state 3 but it has 3 states (0..2)."),
    ],
)
def test_bad_evidence(evidence, message):
    g = read_uai(DATA / "chain3.uai")
    with pytest.raises(EinsliceError, match=re.escape(message)):
        g.condition(evidence)


def test_from_factors_infers_cardinalities():
    g = FactorGraph.from_factors([(0, 1), (1, 2)], [np.ones((2, 3)), np.ones((3, 4))])
    assert g.cardinalities == (2, 3, 4)
    assert g.variables == (0, 1, 2)


def test_from_factors_rejects_disagreeing_shapes():
    message = (
        "variable 1 has 3 states in one factor but 4 in factor 1 (scope (1, 2), "
        "shape (4, 4)); every table must agree on a variable's cardinality."
    )
    with pytest.raises(EinsliceError, match=re.escape(message)):
        FactorGraph.from_factors([(0, 1), (1, 2)], [np.ones((2, 3)), np.ones((4, 4))])


def test_from_factors_rejects_negative_potentials():
    with pytest.raises(EinsliceError, match=re.escape("must be finite and non-neg")):
        FactorGraph.from_factors([(0,)], [np.array([1.0, -1.0])])


def test_from_cliques_as_mbi_holds_them():
    cliques = {("A", "B"): np.zeros((2, 3)), ("B", "C"): np.log(np.ones((3, 2)))}
    g = FactorGraph.from_cliques(cliques, {"D": 5}, log=True)
    assert g.variables == ("A", "B", "C", "D")
    assert g.cardinalities == (2, 3, 2, 5)
    assert [f.scope for f in g.factors] == [(0, 1), (1, 2)]
    c = g.condition({"B": 1})
    assert c.variables == ("A", "C", "D")


def test_tables_are_read_only():
    g = read_uai(DATA / "chain3.uai")
    with pytest.raises(ValueError, match="read-only"):
        g.factors[0].log_table[0] = 0.0


def test_reader_and_model_do_not_import_jax():
    for name in ("_uai.py", "_model.py", "_network.py"):
        tree = ast.parse((PGM / name).read_text())
        imported = {
            alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        } | {
            (node.module or "").split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
        }
        assert "jax" not in imported, name
