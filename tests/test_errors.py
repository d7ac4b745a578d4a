"""Every bad input raises einslice.EinsliceError (a ValueError) naming the culprit.

Messages are pinned loosely: each test names the fragments that must appear
(the offending index, value or count), not the whole wording.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import einslice


def raises(*fragments: str, error=einslice.EinsliceError):
    """``pytest.raises`` whose message must contain every fragment."""
    pattern = "".join(f"(?=.*{re.escape(f)})" for f in fragments)
    return pytest.raises(error, match=re.compile(pattern, re.DOTALL))


def ones(*shapes):
    return [jnp.ones(s, jnp.float32) for s in shapes]


def test_error_types():
    assert issubclass(einslice.EinsliceError, ValueError)
    assert issubclass(einslice.MemoryLimitError, einslice.EinsliceError)


@pytest.mark.parametrize(
    ("subscripts", "fragment"),
    [
        ("ij,jk->ik->i", "->"),  # two arrows
        ("ij,jk-ik", "-"),  # half an arrow
        ("ij,jk>ik", ">"),
        ("i..j,jk->ik", "."),  # a broken ellipsis
        ("ij,j.->i", "."),
        ("i...j...,jk->ik", "..."),  # two ellipses in one term
        ("ij,jk->i,k", ","),  # a comma in the output
    ],
)
def test_malformed_subscripts(subscripts, fragment):
    with raises(fragment):
        einslice.einsum(subscripts, *ones((2, 2), (2, 2)))
    with raises(fragment):
        einslice.plan(subscripts, (2, 2), (2, 2))


def test_wrong_operand_count():
    with raises("2", "3"):
        einslice.einsum("ij,jk->ik", *ones((2, 2), (2, 2), (2, 2)))
    with raises("2", "1"):
        einslice.einsum("ij,jk->ik", *ones((2, 2)))
    with raises("2", "1"):
        einslice.plan("ij,jk->ik", (2, 2))
    with raises("0"):
        einslice.einsum("ij->ij")


def test_term_does_not_match_the_operand_rank():
    with raises("'ijk'", "2"):
        einslice.einsum("ijk,jk->ik", *ones((2, 2), (2, 2)))


def test_mismatched_dimension_sizes():
    with raises("'j'", "3", "4"):
        einslice.einsum("ij,jk->ik", *ones((2, 3), (4, 5)))
    with raises("'j'", "3", "4"):
        einslice.plan("ij,jk->ik", (2, 3), (4, 5))
    with raises("'i'", "2", "3"):  # a repeated index within one operand
        einslice.einsum("ii->i", *ones((2, 3)))


def test_ellipsis_dimensions_that_do_not_broadcast():
    with raises("2", "3"):
        einslice.einsum("...i,...i->...", *ones((2, 4), (3, 4)))


def test_unknown_index_in_the_output():
    with raises("'q'"):
        einslice.einsum("ij,jk->iq", *ones((2, 2), (2, 2)))
    with raises("'q'"):
        einslice.plan("ij,jk->iq", (2, 2), (2, 2))


def test_repeated_index_in_the_output():
    with raises("'i'"):
        einslice.einsum("ij->ii", *ones((2, 2)))


@pytest.mark.parametrize(
    ("limit", "fragment"),
    [
        (-1, "-1"),
        ("-5MB", "-5MB"),
        ("12 parsecs", "12 parsecs"),
        ("MB", "MB"),
        ("", "''"),
        ([16], "[16]"),
    ],
)
def test_bad_memory_limit(limit, fragment):
    with raises(fragment):
        einslice.einsum("ij,jk->ik", *ones((2, 2), (2, 2)), memory_limit=limit)
    with raises(fragment):
        einslice.plan("ij,jk->ik", (2, 2), (2, 2), memory_limit=limit)


@pytest.mark.parametrize("limit", [-1, "12 parsecs", "-3GiB"])
def test_parse_memory_limit_rejects(limit):
    with raises(str(limit)):
        einslice.parse_memory_limit(limit)


@pytest.mark.parametrize("where", ["einsum", "plan", "jit"])
def test_memory_limit_below_feasibility(where):
    n = 6
    ops = [jnp.asarray(np.random.default_rng(k).random((n, n))) for k in range(6)]
    eq = "ij,ik,il,jk,jl,kl->ij"

    def call(limit):
        if where == "einsum":
            return einslice.einsum(eq, *ops, memory_limit=limit)
        if where == "plan":
            return einslice.plan(eq, *ops, memory_limit=limit)(*ops)
        return jax.jit(lambda *o: einslice.einsum(eq, *o, memory_limit=limit))(*ops)

    with pytest.raises(einslice.MemoryLimitError) as info:
        call(3)
    e = info.value
    assert isinstance(e, einslice.EinsliceError)
    assert isinstance(e.smallest_limit, int) and e.smallest_limit > 3
    assert isinstance(e.flops, int) and e.flops > 0
    message = str(e)
    assert "memory_limit" in message and "3" in message, message
    # it states the smallest feasible limit (in bytes or in a unit)
    assert str(e.smallest_limit) in message or re.search(
        r"\d\s*[kKMG]?i?B\b", message
    ), message
    out = call(e.smallest_limit)
    np.testing.assert_allclose(out, np.einsum(eq, *map(np.asarray, ops)), rtol=1e-12)
    with pytest.raises(einslice.MemoryLimitError):
        call(e.smallest_limit - 1)


def test_unknown_optimize():
    with raises("'fastest'"):
        einslice.einsum("ij,jk->ik", *ones((2, 2), (2, 2)), optimize="fastest")


def test_bad_explicit_path():
    with raises("(0, 5)"):
        einslice.einsum(
            "ij,jk,kl->il", *ones((2, 2), (2, 2), (2, 2)), optimize=[(0, 5), (0, 1)]
        )


def test_unknown_semiring():
    with raises("'tropical'"):
        einslice.einsum("ij,jk->ik", *ones((2, 2), (2, 2)), semiring="tropical")
    with raises("'tropical'"):
        einslice.plan("ij,jk->ik", (2, 2), (2, 2), semiring="tropical")


def test_bad_interleaved_labels():
    a = jnp.ones((2, 2))
    with raises("'x'", "do not sort together"):  # jnp.einsum cannot order them
        einslice.einsum(a, [0, "x"], a, ["x", 2])
    with raises("[0]", "not hashable"):
        einslice.einsum(a, [0, [0]], a, [[0], 2])
    with raises("7"):  # output label that no operand has
        einslice.einsum(a, [0, 1], a, [1, 2], [0, 7])


@pytest.mark.parametrize("kind", ["jax", "numpy", "list"])
@pytest.mark.parametrize("called_before", [False, True])
def test_plan_called_with_other_shapes(kind, called_before):
    # jax and numpy arrays skip the Python check (jit's dispatch compares
    # shapes; a new one traces, and the trace checks): also after a call
    # compiled the program for the right shapes
    p = einslice.plan("ij,jk->ik", (2, 3), (3, 4))
    if called_before:
        p(*ones((2, 3), (3, 4)))
    wrong = ones((2, 5), (5, 4))
    if kind != "jax":
        wrong = [np.asarray(x) for x in wrong]
    if kind == "list":
        wrong = [x.tolist() for x in wrong]
    with raises("(2, 3)", "(2, 5)", "einslice.plan"):
        p(*wrong)


def test_errors_name_the_equation_and_are_raised_under_jit():
    f = jax.jit(lambda a, b: einslice.einsum("ij,jk->ik", a, b))
    with raises("'j'", "3", "4"):
        f(*ones((2, 3), (4, 5)))


@pytest.mark.parametrize("limit", [float("inf"), float("nan"), 10**30 * 1.0])
def test_float_memory_limits_work_or_raise_einslice_errors(limit):
    # Floats are not in the contract (int | str | None); whatever einslice does
    # with them, it must not escape as an OverflowError or a TypeError.
    try:
        einslice.plan("ij,jk->ik", (2, 2), (2, 2), memory_limit=limit)
    except einslice.EinsliceError as e:
        assert repr(limit) in str(e) or str(limit) in str(e), str(e)


# --- issue 19's messages: the value named, in the words of the interface -------


def test_read_uai_of_a_missing_file_raises_file_not_found(tmp_path):
    from einslice.pgm import read_uai

    missing = tmp_path / "nope.uai"
    with pytest.raises(FileNotFoundError, match=r"nope\.uai") as e:
        read_uai(missing)
    assert isinstance(e.value, einslice.EinsliceError)
    assert e.value.filename == str(missing)


def test_cli_limit_messages_speak_in_flags(capsys):
    from einslice._cli import main

    assert main(["explain", "ij,jk->ik", "--shape", "i=64,j=64,k=64",
                 "--memory-limit", "1"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "give at least --memory-limit" in err
    assert "memory_limit=None" not in err


def test_cli_uai_negative_limit_must_be_positive(capsys):
    from pathlib import Path

    from einslice._cli import main

    model = str(Path(__file__).parent / "data" / "chain3.uai")
    assert main(["uai", model, "--task", "PR", "--memory-limit=-1"]) == 1
    err = capsys.readouterr().err
    assert "--memory-limit -1 must be positive" in err


def test_explain_says_gradients_raise_when_their_peak_is_above_the_limit(capsys):
    from einslice._cli import main

    assert main(["explain", "ij,jk,kl->il", "--shape", "i=30,j=30,k=30,l=30",
                 "--memory-limit", "8kB"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "gradients of this plan (jax.grad, jax.jvp) raise MemoryLimitError" in out
    assert "give --memory-limit" in out
