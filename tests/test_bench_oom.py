"""The bench reports XLA's out-of-memory as OOM with its size, and keeps XLA quiet.

XLA's GPU autotuner raises RESOURCE_EXHAUSTED while compiling a program the
device cannot hold; these tests simulate that error on the CPU.
"""

from __future__ import annotations

import os

import jax
import pytest

from einslice.bench import _measure, _methods, _report, _run
from einslice.bench._methods import Method, OutOfMemory, out_of_memory
from einslice.bench._suite import seed_formula


class XlaRuntimeError(RuntimeError):
    """Named as jaxlib names its runtime error (detected by name)."""


class JaxRuntimeError(XlaRuntimeError):
    """Newer JAX's name for it."""


AUTOTUNER = (
    "RESOURCE_EXHAUSTED: Failed to get configs for: 2 out of 6 instructions. "
    "See logs for all failures. Example failure: Out of memory while trying to "
    "allocate 68719476736 bytes."
)


@pytest.mark.parametrize(
    ("message", "needs"),
    [
        (AUTOTUNER, 68719476736),
        ("RESOURCE_EXHAUSTED: Failed to allocate request for 64.00GiB", 64 * 2**30),
        ("Out of memory allocating 1.5GB on device 0", 1_500_000_000),
        ("RESOURCE_EXHAUSTED: the allocator gave up", None),
    ],
)
def test_xla_out_of_memory_is_recognized_with_its_size(message, needs):
    for kind in (XlaRuntimeError, JaxRuntimeError):
        oom = out_of_memory(kind(message))
        assert isinstance(oom, OutOfMemory)
        assert oom.needs == needs


def test_other_errors_are_not_out_of_memory():
    assert out_of_memory(XlaRuntimeError("INVALID_ARGUMENT: bad shape")) is None
    assert out_of_memory(MemoryError("Out of memory")) is None  # not XLA's
    assert out_of_memory(ValueError(AUTOTUNER)) is None


def _compile_raises(monkeypatch, message: str) -> None:
    """Make every ``jax.jit(...).lower(...).compile()`` raise XLA's error."""

    class Lowered:
        def compile(self):
            raise JaxRuntimeError(message)

    class Jitted:
        def lower(self, *args):
            return Lowered()

    monkeypatch.setattr(jax, "jit", lambda fn, **kw: Jitted())


def test_a_compile_out_of_memory_is_raised_as_out_of_memory(monkeypatch):
    _compile_raises(monkeypatch, AUTOTUNER)
    with pytest.raises(OutOfMemory) as caught:
        _methods._jax_runner(lambda x: x, [1.0])
    assert caught.value.needs == 68719476736
    _compile_raises(monkeypatch, "INTERNAL: something else")
    with pytest.raises(JaxRuntimeError):  # other errors pass through unchanged
        _methods._jax_runner(lambda x: x, [1.0])


def test_a_peer_out_of_memory_while_compiling_shows_as_oom_with_its_size(monkeypatch):
    def prepare(formula, operands, ctx):
        raise out_of_memory(JaxRuntimeError(AUTOTUNER)) or AssertionError

    def broken(formula, operands, ctx):
        raise JaxRuntimeError("INTERNAL: not memory")

    methods = [Method("peer", "runs out", prepare), Method("bug", "fails", broken)]
    device = _measure.Device("gpu", "a simulated GPU", 2**40)
    ctx = _methods.Context(None, None, device.memory)
    cells = _run.run([seed_formula(4)], methods, ctx, device, matmul_gflops=1.0,
                     progress=False)  # fmt: skip
    by_method = {c.method: c for c in cells}
    assert by_method["peer"].status == "oom"
    assert _report.cell_text(by_method["peer"], "time") == "OOM (needs 68.7 GB)"
    assert by_method["bug"].status == "error"


def test_an_out_of_memory_of_unknown_size_shows_as_oom():
    cell = _run.Cell("f", 4, "peer", "oom", needs=None)
    assert _report.cell_text(cell, "time") == "OOM"


def test_xla_logs_are_silenced_unless_asked_for(monkeypatch):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    monkeypatch.setenv(_measure.VERBOSE_XLA, "1")
    _measure.quiet_xla()
    assert "TF_CPP_MIN_LOG_LEVEL" not in os.environ
    monkeypatch.delenv(_measure.VERBOSE_XLA)
    _measure.quiet_xla()
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "3"
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "1")  # the user's own setting wins
    _measure.quiet_xla()
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "1"
