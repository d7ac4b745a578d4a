"""Issue 24: valid input never crashes, the memory promise holds at every dtype
mix, semirings give no NaN beside ±inf, bad input is refused where it enters,
and the cache directory survives concurrency and damage.

Each reproducer of the issue is a test here; the hypothesis properties draw a
small fixed number of random cases each (the ``ci`` profile: 25, or fewer).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import einslice
from einslice._plan import _wisdom
from einslice._plan._cachedir import CacheWarning
from strategies import equations

DTYPES = ["bool", "int32", "float32", "float64", "complex64", "complex128"]
SRC = str(Path(einslice.__file__).parents[1])


def temp_bytes(fn, *args) -> int:
    stats = jax.jit(fn).lower(*args).compile().memory_analysis()
    assert stats is not None, "this backend reports no memory analysis"
    return stats.temp_size_in_bytes


# --- valid input that crashed -------------------------------------------------

ISSUE_SHAPES = [
    (3, 3, 1, 2),
    (3, 1, 3),
    (3, 3, 3),
    (3, 2),
    (3, 3, 3),
    (3, 3, 3, 3, 1, 3),
]
ISSUE_DTYPES = ["complex128", "float32", "int32", "complex64", "float32", "bool"]
ISSUE_FORMULA = "II...,I...I,III...,I...,III,III...I"


def _ops(shapes, dtypes, seed=0):
    rng = np.random.default_rng(seed)
    return [
        np.asarray(rng.integers(0, 3, s)).astype(d)
        for s, d in zip(shapes, dtypes, strict=True)
    ]


def test_repeated_labels_with_ellipsis_and_an_explicit_path_run():
    ops = _ops(ISSUE_SHAPES, ISSUE_DTYPES)
    path = [(0, 1), (0, 2), (0, 2), (0, 2), (0, 1)]  # crashed (108 of 2700 paths)
    got = einslice.einsum(ISSUE_FORMULA, *ops, optimize=path)
    np.testing.assert_allclose(got, jnp.einsum(ISSUE_FORMULA, *ops), rtol=1e-5)


def test_interleaved_repeated_int_labels_with_a_zero_sized_axis():
    shapes = [(3, 3, 1, 0), (3, 1, 3), (3, 3, 3), (3, 0), (3, 3, 3), (3, 3, 3, 3, 1, 3)]
    ops = _ops(shapes, ISSUE_DTYPES)
    terms = [[119, 119, ...], [119, ..., 119], [119] * 3 + [...], [119, ...],
             [119] * 3, [119] * 3 + [..., 119]]  # fmt: skip
    args = [x for pair in zip(ops, terms, strict=True) for x in pair]
    path = [(0, 1), (0, 2), (0, 2), (0, 2), (0, 1)]
    got = einslice.einsum(*args, optimize=path)
    assert got.shape == jnp.einsum(*args).shape == (3, 0)


def test_an_explicit_path_through_scalars():
    path = [(0, 3), (0, 2), (0, 2), (0, 2), (0, 1)]
    ones = jnp.ones
    got = einslice.einsum(",,,a,i,i->a", 2.0, 2.0, 2.0, ones(2), ones(3), ones(3),
                          optimize=path)  # fmt: skip
    assert got.tolist() == [24.0, 24.0]


def test_numpy_integer_limits_are_accepted():
    x = jnp.ones((4, 4))
    for limit in (np.int64(10**6), np.int32(10**5), np.prod(x.shape) * 4 * 100):
        np.testing.assert_allclose(
            einslice.einsum("ij,jk->ik", x, x, memory_limit=limit),  # pyright: ignore[reportArgumentType]
            x @ x,
        )


def test_a_fractional_byte_limit_is_refused_as_written():
    with pytest.raises(
        einslice.EinsliceError, match=r"memory_limit=0\.5 is not a whole"
    ):
        einslice.einsum(
            "ij,jk->ik",
            jnp.ones((3, 3)),
            jnp.ones((3, 3)),
            memory_limit=0.5,  # pyright: ignore[reportArgumentType]
        )


@pytest.mark.slow
@settings(max_examples=25)
@given(equations(zero_size=True, max_operands=5), st.data())
def test_random_formulas_in_dtype_mixes_match_numpy(eq, data):
    dtypes = data.draw(st.lists(st.sampled_from(DTYPES), min_size=len(eq.shapes),
                                max_size=len(eq.shapes)))  # fmt: skip
    ops = _ops(eq.shapes, dtypes)
    optimize = data.draw(st.sampled_from(["auto", "greedy", "optimal", False]))
    try:
        expected = jnp.einsum(eq.subscripts, *ops)
    except (ValueError, TypeError):
        return  # not a formula jnp takes
    reference = np.einsum(eq.subscripts, *[x.astype(np.complex128) for x in ops])
    if expected.dtype == bool:
        reference = reference != 0
    got = einslice.einsum(eq.subscripts, *ops, optimize=optimize)
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(np.asarray(got, np.complex128), reference, atol=1e-4)


# --- the memory promise at every dtype mix --------------------------------------


def test_a_promoted_operand_copy_is_counted():
    # float64 @ float32 at 8 MB compiled 37.7 MB: the float32 side's float64
    # copy (32 MB) was not counted. It cannot fit, and the error says so.
    x = jax.ShapeDtypeStruct((2000, 2000), jnp.float64)
    y = jax.ShapeDtypeStruct((2000, 2000), jnp.float32)
    with pytest.raises(einslice.MemoryLimitError, match="promoted to float64") as e:
        einslice.plan("ij,jk->ik", x, y, memory_limit="8MB")
    assert e.value.smallest_limit > 32_000_000
    limit = e.value.smallest_limit
    fn = lambda a, b: einslice.einsum("ij,jk->ik", a, b, memory_limit=limit)  # noqa: E731
    assert temp_bytes(fn, x, y) <= limit


def test_casts_and_diagonals_of_the_issue_stay_within_the_limit():
    f = "ET,JEB,EBJJ,JJ->J"
    structs = [jax.ShapeDtypeStruct(s, d) for s, d in zip(
        [(6, 3), (4, 6, 3), (6, 3, 4, 4), (4, 4)],
        ["complex64", "bool", "int32", "float64"], strict=True)]  # fmt: skip
    path = [(0, 1), (0, 2), (0, 1)]
    with pytest.raises(einslice.MemoryLimitError):  # compiled 7,184 B before
        einslice.plan(f, *structs, memory_limit=2048, optimize=path)
    for limit in (6600, 8000, 20000):
        fn = lambda *xs: einslice.einsum(f, *xs, memory_limit=limit, optimize=path)  # noqa: B023, E731
        try:
            got = temp_bytes(fn, *structs)
        except einslice.MemoryLimitError:
            continue
        assert got <= limit


@settings(max_examples=15)
@given(equations(max_operands=4, min_size=2, max_size=5, max_elements=4096,
                 implicit=False), st.data())  # fmt: skip
def test_random_dtype_mixes_keep_the_memory_promise(eq, data):
    dtypes = data.draw(st.lists(st.sampled_from(DTYPES), min_size=len(eq.shapes),
                                max_size=len(eq.shapes)))  # fmt: skip
    structs = [
        jax.ShapeDtypeStruct(s, d) for s, d in zip(eq.shapes, dtypes, strict=True)
    ]
    try:
        einslice.plan(eq.subscripts, *structs, memory_limit=1)
        return
    except einslice.MemoryLimitError as e:
        smallest = e.smallest_limit
    limit = int(smallest * data.draw(st.sampled_from([1.0, 1.1, 1.5, 3.0])))
    fn = lambda *xs: einslice.einsum(eq.subscripts, *xs, memory_limit=limit)  # noqa: E731
    assert temp_bytes(fn, *structs) <= limit


# --- semirings beside ±inf ------------------------------------------------------


@pytest.mark.parametrize("fn", [einslice.log_einsum, einslice.max_einsum])
def test_an_empty_sum_beside_inf_is_the_semiring_zero(fn):
    got = fn("i,ij->i", jnp.array([jnp.inf, 0.0]), jnp.zeros((2, 0)))
    assert got.tolist() == [-np.inf, -np.inf]


def _semiring_reference(semiring, subscripts, ops):
    """Brute force: every index materialized, -inf annihilating."""
    lhs, out = subscripts.split("->")
    terms = lhs.split(",")
    letters = sorted(set("".join(terms)))
    sizes = {c: x.shape[t.index(c)] for t, x in zip(terms, ops, strict=True) for c in t}
    total = np.zeros([sizes[c] for c in letters])
    zero = np.zeros_like(total, dtype=bool)
    for t, x in zip(terms, ops, strict=True):
        view = np.einsum(f"{t}->{''.join(sorted(t))}", x)
        shape = [sizes[c] if c in t else 1 for c in letters]
        part = np.broadcast_to(view.reshape(shape), total.shape)
        zero |= part == -np.inf
        with np.errstate(invalid="ignore"):
            total = total + part
    total[zero] = -np.inf
    axes = tuple(k for k, c in enumerate(letters) if c not in out)
    kept = [c for c in letters if c in out]
    if semiring == "max":
        red = np.max(total, axis=axes, initial=-np.inf)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            m = np.max(total, axis=axes, keepdims=True, initial=-np.inf)
            m = np.where(np.isfinite(m), m, 0)
            red = np.log(np.sum(np.exp(total - m), axis=axes)) + np.squeeze(m, axes)
    return np.einsum(f"{''.join(kept)}->{out}", red) if kept else red


@settings(max_examples=25)
@given(st.sampled_from(["log", "max"]),
       st.sampled_from(["i,ij->i", "ij,jk->ik", "ij,ij->i", "i,j->ij", "ij,jk,k->i"]),
       st.integers(0, 2), st.integers(0, 2**16))  # fmt: skip
def test_semirings_with_infinities_and_empty_axes_give_no_nan(semiring, f, n, seed):
    rng = np.random.default_rng(seed)
    lhs = f.split("->")[0].split(",")
    sizes = {c: (n if c == "j" else 2) for c in "ijk"}
    values = np.array([np.inf, -np.inf, 0.0, 1.5, -2.0])
    ops = [rng.choice(values, [sizes[c] for c in t]) for t in lhs]
    if any(np.isposinf(x).any() for x in ops) and semiring == "log":
        # +inf beside finite terms is +inf; beside -inf the zero annihilates
        pass
    got = np.asarray(einslice.einsum(f, *map(jnp.asarray, ops), semiring=semiring))
    expected = _semiring_reference(semiring, f, ops)
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, expected)


# --- bad input refused where it enters ------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: einslice.plan("ij,jk->ik", (2, -3), (-3, 1)),
         einslice.EinsliceError, r"shape \(2, -3\) with a negative size"),
        (lambda: einslice.plan("ij,jk->ik", (2, 3), (3, 1), profile="x"),  # pyright: ignore[reportArgumentType]
         TypeError, "profile='x'"),
        (lambda: einslice.einsum("i...->......i", jnp.ones((2, 3))),
         einslice.EinsliceError, r"'\.\.\.\.\.\.i' has '\.\.\.' more than once"),
        (lambda: einslice.einsum("ij,jk->ik.", jnp.ones((2, 2)), jnp.ones((2, 2))),
         einslice.EinsliceError, "stray '.' in term 'ik.'"),
        (lambda: einslice.einsum("i->i", jnp.ones(2), memory_limit="-5MB"),
         einslice.EinsliceError, "memory_limit='-5MB' must be positive"),
    ],
)  # fmt: skip
def test_bad_values_are_refused_as_written(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_a_profile_with_a_zero_rate_is_refused():
    from dataclasses import replace

    from einslice._plan._profile import CPU_DEFAULT

    bad = replace(CPU_DEFAULT, matmul_flops=0.0)
    with pytest.raises(einslice.EinsliceError, match=r"matmul_flops is 0\.0"):
        einslice.plan("ij,jk->ik", (2, 3), (3, 1), profile=bad)


@settings(max_examples=25)
@given(st.one_of(st.floats(allow_nan=True), st.integers(-(10**6), 0),
                 st.text(max_size=6), st.lists(st.integers(), max_size=2),
                 st.booleans()))  # fmt: skip
def test_random_bad_limits_raise_einslice_errors_only(limit):
    try:
        got = einslice.parse_memory_limit(limit)
    except einslice.EinsliceError as e:
        assert "memory_limit=" in str(e)
        return
    assert isinstance(got, int) and got >= 1


# --- the cache directory ----------------------------------------------------------


def _tune(n: int):
    x = jnp.ones((n, n))
    return einslice.einsum("ij,jk->ik", x, x, tune="measure", memory_limit=10**7)


def _wisdom_file() -> Path:
    return _wisdom.wisdom_path()


def test_wisdom_entries_from_concurrent_processes_all_survive(tmp_path):
    # Four processes storing 15 signatures each into one wisdom file: each
    # used to rewrite the file from its own view (6 of 9 lost in the issue).
    script = textwrap.dedent(
        """
        import importlib, sys, types
        package = types.ModuleType("einslice")
        package.__path__ = [sys.argv[1] + "/einslice"]
        sys.modules["einslice"] = package  # the pure-Python planner only
        w = importlib.import_module("einslice._plan._wisdom")
        entry = {"path": [[0, 1]], "chunks": [], "lowering": "scan",
                 "labels": ["a"], "seconds": [0.1], "chosen": 0}
        for k in range(15):
            w.remember(f"{sys.argv[2]}-{k}", entry)
        """
    )
    env = {**os.environ, "EINSLICE_CACHE_DIR": str(tmp_path)}
    runs = [
        subprocess.Popen([sys.executable, "-c", script, SRC, f"p{p}"], env=env)
        for p in range(4)
    ]
    assert all(run.wait(timeout=120) == 0 for run in runs)
    data = json.loads((tmp_path / "wisdom.json").read_text())
    assert set(data["entries"]) == {f"p{p}-{k}" for p in range(4) for k in range(15)}


@pytest.mark.slow
def test_tuning_processes_share_one_wisdom_file(tmp_path):
    script = textwrap.dedent(
        """
        import sys, jax.numpy as jnp, einslice
        n = int(sys.argv[1])
        x = jnp.ones((n, n))
        einslice.einsum("ij,jk->ik", x, x, tune="measure", memory_limit=10**7)
        """
    )
    env = {**os.environ, "EINSLICE_CACHE_DIR": str(tmp_path), "PYTHONPATH": SRC}
    runs = [
        subprocess.Popen([sys.executable, "-c", script, str(n)], env=env)
        for n in (8, 9, 10, 11)
    ]
    assert all(run.wait(timeout=300) == 0 for run in runs)
    entries = json.loads((tmp_path / "wisdom.json").read_text())["entries"]
    assert sorted(json.loads(k)[1][0][0] for k in entries) == [8, 9, 10, 11]


def test_a_directory_in_place_of_the_wisdom_file_warns_once():
    _wisdom_file().mkdir(parents=True)
    with pytest.warns(CacheWarning, match="cannot write") as record:
        _tune(8)
        _tune(9)
    assert len(record) == 1


@pytest.mark.parametrize("how", ["under_a_file", "read_only"])
def test_an_unwritable_cache_dir_disables_remembering_with_one_warning(
    tmp_path, monkeypatch, how
):
    if how == "under_a_file":
        (tmp_path / "file").write_text("")
        monkeypatch.setenv("EINSLICE_CACHE_DIR", str(tmp_path / "file" / "cache"))
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes read-only directories")
        directory = tmp_path / "ro"
        directory.mkdir(mode=0o555)
        monkeypatch.setenv("EINSLICE_CACHE_DIR", str(directory))
    with pytest.warns(CacheWarning, match="cannot write") as record:
        np.testing.assert_allclose(_tune(8), np.full((8, 8), 8.0))
        _tune(9)
    assert len(record) == 1


GOOD = {"path": [[0, 1]], "chunks": [], "lowering": "scan", "labels": ["a"],
        "seconds": [0.1], "chosen": 0}  # fmt: skip


@settings(max_examples=25)
@given(st.sampled_from(["path", "chunks", "lowering", "labels", "seconds", "chosen"]),
       st.one_of(st.none(), st.integers(), st.text(max_size=3), st.floats(),
                 st.lists(st.integers(), max_size=3)))  # fmt: skip
def test_random_damaged_wisdom_entries_are_ignored_with_one_warning(field, value):
    entry = {**GOOD, field: value}
    data = {"format": 1, **_wisdom.versions(),
            "entries": {"good": GOOD, "bad": entry}}  # fmt: skip
    if _wisdom._entry_ok(entry):
        return
    with pytest.warns(CacheWarning, match="1 of its entries") as record:
        assert einslice.wisdom.import_(data) == 1
    assert len(record) == 1


@pytest.mark.parametrize("text", ["null", "[]", "3", '{"format": 1}', "{not json"])
def test_a_damaged_wisdom_file_of_any_shape_warns_once(text):
    path = _wisdom_file()
    path.parent.mkdir(parents=True)
    path.write_text(text)
    _wisdom._source[0] = None
    with pytest.warns(CacheWarning, match="ignoring the wisdom file"):
        _tune(8)


def test_a_garbage_choice_with_the_right_key_is_ignored():
    _tune(8)
    path = _wisdom_file()
    data = json.loads(path.read_text())
    for entry in data["entries"].values():
        entry["path"] = 3
    path.write_text(json.dumps(data))
    _wisdom._source[0] = None
    with pytest.warns(CacheWarning, match="malformed"):
        _tune(8)


def test_a_stored_profile_with_zero_rates_is_ignored():
    from einslice._exec import _calibrate
    from einslice._plan._profile import CPU_DEFAULT

    data = json.loads(CPU_DEFAULT.to_json())
    data["matmul_flops"] = 0
    data["device_kind"] = _calibrate.device_kind()
    path = _calibrate.profile_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    _calibrate._load.cache_clear()
    with pytest.warns(CacheWarning, match="matmul_flops is 0"):
        einslice.plan("ij,jk->ik", (4, 4), (4, 4))
    _calibrate._load.cache_clear()


@pytest.mark.slow
def test_default_limit_wisdom_is_found_in_the_next_process(tmp_path):
    script = textwrap.dedent(
        """
        import jax.numpy as jnp, einslice
        x = jnp.ones((8, 8))
        p = einslice.plan("ij,jk->ik", x, x, tune="measure")
        print(p.choice.how)
        """
    )
    env = {**os.environ, "EINSLICE_CACHE_DIR": str(tmp_path), "PYTHONPATH": SRC}
    first, second = (
        subprocess.run(
            [sys.executable, "-c", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        ).stdout.split()
        for _ in range(2)
    )
    key = json.loads(
        next(iter(json.loads((tmp_path / "wisdom.json").read_text())["entries"]))
    )
    assert key[4] == "default"
    assert (first, second) == (["measure"], ["wisdom"])
