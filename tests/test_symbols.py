"""Every index symbol ``jnp.einsum`` takes, einslice takes, with the same result.

``jnp.einsum`` (through opt_einsum's parser) takes any character but ``,``,
``-``, ``>`` and ``.`` as an index and drops only the space; opt_einsum's own
symbols go past the letters into Unicode (``get_symbol(75)`` is ``'×'``), so
every large network that opt_einsum, cotengra or einsum-benchmark writes uses
them. Random formulas of the strategies' shape are renamed into symbols drawn
from ``get_symbol(0..1000)``, digits, other scripts and punctuation, and
compared with ``jnp.einsum`` (shape, dtype, values) and with ``numpy.einsum``
in float64 on the same formula written in letters. The interleaved form's
labels (any hashable values that sort together) are compared likewise,
including its implicit output's order past 26 labels.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import opt_einsum
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import einslice
from strategies import Equation, equations, random_operands, seeds

# Symbols beside opt_einsum's: digits, other scripts (one outside the BMP),
# punctuation, and a tab (an index too: only ' ' is dropped).
OTHERS = "0123456789" + "αβЖЯあ中한אب०😀" + "#!*$%&'()+/:;<=?@[]^_`{|}~\\\"" + "\t"
SYMBOLS = st.one_of(
    st.integers(0, 1000).map(opt_einsum.get_symbol), st.sampled_from(OTHERS)
)
# The strategies' Equation names broadcast axes with these when it writes a
# formula out explicitly: the renamed formulas leave them out.
RESERVED = set("ZYXW")


@st.composite
def renamed(draw):
    """(a formula in letters, the same formula in drawn symbols, spaces strewn)."""
    eq = draw(equations(max_operands=4, max_indices=8))
    letters = sorted(set("".join(eq.terms).replace("...", "")))
    symbols = draw(
        st.lists(
            SYMBOLS.filter(lambda c: c not in RESERVED),
            min_size=len(letters),
            max_size=len(letters),
            unique=True,
        )
    )
    to = dict(zip(letters, symbols, strict=True))

    def rename(term: str) -> str:
        out = term.replace("...", "\0")
        out = "".join(to.get(c, c) for c in out).replace("\0", "...")
        if out and draw(st.booleans()):  # a space somewhere: dropped by both
            pos = draw(st.integers(0, len(out)))
            out = out[:pos] + " " + out[pos:]
        return out

    output = None if eq.output is None else rename(eq.output)
    return eq, Equation(tuple(map(rename, eq.terms)), output, eq.shapes), to


def _numpy_reference(symbolic: Equation, to: dict[str, str], operands) -> np.ndarray:
    """float64 ``numpy.einsum`` of ``symbolic`` written back in letters.

    The explicit form of the symbolic formula (its implicit output sorted by
    the symbols' code points, as ``jnp.einsum`` sorts them), each symbol
    replaced by the letter it stands for.
    """
    back = {symbol: letter for letter, symbol in to.items()}
    clean = Equation(
        tuple(t.replace(" ", "") for t in symbolic.terms),
        None if symbolic.output is None else symbolic.output.replace(" ", ""),
        symbolic.shapes,
    )
    terms, output = clean.explicit()

    def letters(term: str) -> str:
        return "".join(back.get(c, c) for c in term)

    return np.einsum(",".join(map(letters, terms)) + "->" + letters(output), *operands)


@settings(max_examples=60)
@given(renamed(), seeds)
def test_any_symbol_but_the_separators_gives_jnp_einsums_result(pair, seed):
    eq, symbolic, to = pair
    ops = random_operands(eq, seed)
    formula = symbolic.subscripts
    expected = jnp.einsum(formula, *ops)
    got = einslice.einsum(formula, *ops)
    assert got.shape == expected.shape and got.dtype == expected.dtype, formula
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)
    reference = _numpy_reference(symbolic, to, ops)
    np.testing.assert_allclose(got, reference, rtol=1e-10, atol=1e-10)


@st.composite
def interleaved(draw):
    """Interleaved arguments of many size-1 and size-2 labels, output left out.

    Past 26 distinct labels jnp.einsum's implicit output puts labels of rank
    26..51 (its symbols 'A'..'Z') before ranks 0..25 ('a'..'z').
    """
    kind = draw(st.sampled_from(["int", "negative", "str", "float"]))
    n = draw(st.integers(2, 60))
    if kind == "int":
        pool = draw(
            st.lists(st.integers(0, 10**6), min_size=n, max_size=n, unique=True)
        )
    elif kind == "negative":
        pool = list(range(-(n // 2), n - n // 2))
    elif kind == "str":
        texts = st.text(min_size=1, max_size=3)
        pool = draw(st.lists(texts, min_size=n, max_size=n, unique=True))
    else:
        pool = [k / 3 for k in range(n)]
    pairs = set(draw(st.lists(st.sampled_from(pool), max_size=6)))  # size 2
    args: list = []
    for _ in range(draw(st.integers(1, 3))):
        term = draw(st.lists(st.sampled_from(pool), max_size=30))
        if draw(st.integers(0, 4)) == 0:  # '...' of one axis of size 2
            term.insert(draw(st.integers(0, len(term))), Ellipsis)
        shape = tuple(2 if x is Ellipsis or x in pairs else 1 for x in term)
        args += [shape, term]
    return args


@pytest.mark.slow
@settings(max_examples=40)
@given(interleaved(), seeds)
def test_the_interleaved_forms_labels_and_implicit_order_match_jnp(args, seed):
    rng = np.random.default_rng(seed)
    arrays = []
    for k in range(0, len(args), 2):
        arrays += [rng.standard_normal(args[k]), args[k + 1]]
    expected = jnp.einsum(*arrays)
    got = einslice.einsum(*arrays)
    assert got.shape == expected.shape, args
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)


def test_opt_einsums_own_symbols_past_the_letters():
    # get_symbol(75) is '×' and get_symbol(107) is '÷': any equation of more
    # than 75 indices that opt_einsum, cotengra or quimb writes has them
    a, b = np.arange(6.0).reshape(2, 3), np.arange(3.0)
    assert opt_einsum.get_symbol(75) == "×"
    np.testing.assert_allclose(einslice.einsum("a×,×->a", a, b), a @ b)
    np.testing.assert_allclose(einslice.einsum("a÷,÷", a, b), a @ b)
    np.testing.assert_allclose(einslice.einsum("a#,#->a", a, b), a @ b)
    # implicit: sorted by code point, as jnp.einsum sorts ('B' < 'a' < '×')
    for formula in ("×a", "a×", "Ba", "aB", "1a", "a1", "ŔŎ", "ŎŔ"):
        assert einslice.einsum(formula, a).shape == jnp.einsum(formula, a).shape


def test_past_26_labels_the_interleaved_implicit_output_is_in_jnps_order():
    # ranks 0..25 get 'a'..'z' and 26..51 'A'..'Z', which sort first
    shape = [1] * 30
    shape[0], shape[1], shape[27] = 2, 5, 3
    x = np.arange(30.0).reshape(shape)
    expected = jnp.einsum(x, list(range(30)))
    assert expected.shape[:6] == (1, 3, 1, 1, 2, 5)  # labels 26..29, then 0, 1
    got = einslice.einsum(x, list(range(30)))
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    ("formula", "shapes", "message"),
    [
        ("a-,-->a", [(2, 3), (3,)], "stray '-'"),
        ("a>,>->a", [(2, 3), (3,)], "stray '>'"),
        ("a.,.->a", [(2, 3), (3,)], "stray '.'"),
        ("a,,", [(2,), (2,)], "',' separates operands: it cannot be an index"),
        ("a->a->a", [(2,)], "'->' more than once"),
        ("a\tb,b->a", [(2, 3), (3,)], r"Whitespace other than ' ' is an index"),
    ],
)
def test_a_separator_used_as_an_index_is_refused_as_jnp_refuses_it(
    formula, shapes, message
):
    ops = [np.ones(s) for s in shapes]
    with pytest.raises(ValueError):
        jnp.einsum(formula, *ops)
    with pytest.raises(einslice.EinsliceError, match=message):
        einslice.einsum(formula, *ops)
    if "stray" in message:
        with pytest.raises(einslice.EinsliceError, match="cannot be indices"):
            einslice.einsum(formula, *ops)


def test_labels_jnp_cannot_order_are_refused_without_an_output():
    a = np.ones((2, 3))
    with pytest.raises(TypeError):
        jnp.einsum(a, [0, "x"])
    with pytest.raises(einslice.EinsliceError, match="do not sort together"):
        einslice.einsum(a, [0, "x"])
    with pytest.raises(einslice.EinsliceError, match="not hashable"):
        einslice.einsum(a, [[0], 1])


def test_plans_print_and_explain_takes_any_symbol(capsys):
    p = einslice.plan("a×\t,×\t#->#a", (2, 3, 4), (3, 4, 5))
    text = str(p)
    assert "a×[\\t],×[\\t]#->#a" in text and "×=3" in text
    assert p.sliced == {}
    from einslice._cli import main

    assert main(["explain", "a×,×#->a#", "--shape", "a=2,×=3,#=4"]) == 0
    assert "a×,×#->a#" in capsys.readouterr().out
