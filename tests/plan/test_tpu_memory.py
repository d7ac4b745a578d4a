"""The TPU profile's peak model against what a TPU v5e compiled: pure Python.

Every number here was measured on one TPU v5e chip (jax 0.10.2, 2026-12-07)
by ``benchmarks/tpu_memory_probe.py`` (``memory_analysis()`` of programs
compiled there, nothing run); ``benchmarks/results/tpu_v5e.md`` tells the
story. CI has no TPU: the numbers are data, the model is checked on them.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from einslice._errors import MemoryLimitError
from einslice._plan._cost import Body, peak_bytes
from einslice._plan._equation import build_equation, parse_subscripts
from einslice._plan._layout import buffer_bytes, tiling_of
from einslice._plan._planner import make_plan
from einslice._plan._profile import CPU_DEFAULT, GPU_DEFAULT, TPU_DEFAULT
from einslice._plan._request import PlanRequest

ITEMSIZE = {
    "float32": 4,
    "int32": 4,
    "bfloat16": 2,
    "float64": 8,
    "complex64": 8,
    "int8": 1,
}

# Bytes of a buffer of each shape: the argument size of ``-x`` compiled on
# the chip (its layout in brackets where it tells something). Every one of
# the 203 shapes x dtypes measured is reproduced; a sample is kept here.
BUFFER_BYTES = [
    ("float32", (), 512),
    ("float32", (3,), 512),
    ("float32", (129,), 1024),  # f32[129]{0:T(256)}
    ("float32", (1000,), 4096),  # {0:T(1024)}
    ("float32", (1025,), 8192),
    ("float32", (1, 1), 512),  # {1,0:T(1,128)}
    ("float32", (2, 3), 1024),  # {1,0:T(2,128)}
    ("float32", (200, 3), 4096),  # {0,1:T(4,128)}: the 200 is minor
    ("float32", (3, 200), 4096),
    ("float32", (9, 128), 8192),
    ("float32", (8, 129), 8192),
    ("float32", (17, 5), 4096),  # {0,1:T(8,128)}
    ("float32", (200, 1), 1024),
    ("float32", (100, 100), 53248),
    ("float32", (2, 3, 4), 3072),  # {2,0,1:T(2,128)}
    ("float32", (5, 3, 7), 10240),
    ("float32", (3, 1, 3), 1536),  # {2,1,0:T(1,128)}
    ("float32", (64, 64, 2), 65536),  # {1,2,0:T(2,128)}
    ("float32", (4, 5, 6, 7), 61440),  # {3,0,2,1:T(4,128)}
    ("int32", (17, 5), 4096),
    ("bfloat16", (), 512),
    ("bfloat16", (1000,), 2048),
    ("bfloat16", (1, 200), 1024),  # {1,0:T(2,128)(2,1)}: 2 rows a word
    ("bfloat16", (3, 1, 3), 1024),
    ("bfloat16", (100, 100), 26624),
    ("bfloat16", (4, 5, 6, 7), 30720),
    ("float64", (), 1024),  # 8 bytes an entry, float32's tiles
    ("float64", (200, 3), 8192),
    ("float64", (100, 100), 106496),
    ("complex64", (5, 3, 7), 20480),
    ("int8", (2, 3, 4), 1024),  # {2,1,0:T(4,128)(4,1)}: 4 rows a word
    ("int8", (2, 2, 2, 2), 2048),
    ("int8", (64, 64, 2), 16384),
]


@pytest.mark.parametrize("dtype, shape, measured", BUFFER_BYTES)
def test_buffer_bytes_are_the_chips(dtype, shape, measured):
    tiling = tiling_of(TPU_DEFAULT, ITEMSIZE[dtype])
    assert tiling is not None
    assert buffer_bytes(shape, tiling) == measured


def test_only_the_tpu_profile_tiles_buffers():
    assert tiling_of(CPU_DEFAULT, 4) is None and tiling_of(GPU_DEFAULT, 4) is None
    assert GPU_DEFAULT.scratch_bytes == CPU_DEFAULT.scratch_bytes == 0


# Programs compiled on the chip (formula, shapes, dtype, semiring, gradient,
# limit, compiled temporary bytes), planned by the model before it knew the
# TPU: the random formulas of the probe's first run (seed 0) that went over
# their limit, the cases issue 35 names, and float64's emulated products.
# Most of what the small ones hold is scratch in ~32 kB steps (reductions,
# loops, float64's emulation), not the einsum's buffers.
COMPILED_ON_THE_CHIP = [
    ("ad,db->", ((13, 2), (2, 3)), "float64", "sum", False, 384, 580608),
    ("b,ab->", ((4,), (7, 4)), "float32", "max", False, 408, 612864),
    ("bacb,bb->", ((2, 2, 1, 2), (2, 2)), "float32", "max", False, 376, 483840),
    ("b,bbbb->", ((3,), (3, 3, 3, 3)), "float64", "sum", False, 439, 516096),
    ("bd,c->", ((3, 8), (2,)), "float32", "log", False, 336, 354816),
    ("a,adca->", ((5,), (5, 17, 5, 5)), "float32", "log", False, 380, 322560),
    (
        "fb,b,d,f->",
        ((8, 16), (16,), (13,), (8,)),
        "float64",
        "sum",
        False,
        1664,
        970240,
    ),
    (
        "b,be,ad,ffda->fda",
        ((129,), (129, 129), (31, 4), (13, 13, 4, 31)),
        "float64",
        "sum",
        False,
        2584,
        1003008,
    ),
    (
        "bb,adba,cd,c->ca",
        ((5, 5), (5, 2, 5, 5), (64, 2), (64,)),
        "float32",
        "sum",
        False,
        1640,
        614400,
    ),
    ("d,ade->a", ((129,), (7, 129, 3)), "float32", "sum", False, 1372, 454144),
    ("bdc->", ((9, 2, 4),), "complex64", "sum", False, 374, 96768),
    (
        "ea,b,bcc->cb",
        ((129, 2), (8,), (8, 16, 16)),
        "complex64",
        "sum",
        False,
        1528,
        290816,
    ),
    (
        "bb,bb,a,b->",
        ((17, 17), (17, 17), (2,), (17,)),
        "bfloat16",
        "sum",
        False,
        748,
        161280,
    ),
    (
        "abb,b,abb->",
        ((200, 2, 2), (2,), (200, 2, 2)),
        "int32",
        "sum",
        False,
        1508,
        259584,
    ),
    (
        "ba,,d,eba->",
        ((8, 128), (), (7,), (9, 8, 128)),
        "int32",
        "sum",
        False,
        2457,
        258560,
    ),
    ("aa,a,b->b", ((64, 64), (64,), (31,)), "float64", "sum", True, 72832, 1516032),
    ("ccb,aa->c", ((64, 64, 7), (7, 7)), "float32", "sum", False, 41220, 64512),
    # the cases issue 35 names (the probe's "known" part)
    ("a,a->", ((4,), (4,)), "float64", "sum", False, 384, 516096),
    ("a,a->", ((4,), (4,)), "float64", "sum", True, 2176, 806400),
    ("ij,ij->", ((200, 3), (200, 3)), "float32", "sum", False, 2000, 226304),
    ("ij,ij->", ((200, 3), (200, 3)), "float32", "sum", True, 18464, 355328),
    ("ij,ij->", ((200, 3), (200, 3)), "float64", "sum", False, 4000, 743936),
    ("ij,ij->", ((200, 3), (200, 3)), "float64", "sum", True, 28464, 1227264),
    # float64's emulated product, unsliced (the probe's "scale" part): 16x
    # one side's 33.5 MB; sliced into 10 chunks (at 17.3 MB) it held 744 kB
    ("ij,ij->", ((2048, 2048),) * 2, "float64", "sum", False, 10**10, 537356288),
    ("ij,ij->", ((2048, 2048),) * 2, "float64", "sum", False, 17301584, 743936),
]

# The TPU profile as it was when those programs were planned: no tiles, no
# scratch (its speeds unchanged).
BEFORE = replace(
    TPU_DEFAULT,
    buffer_lanes=0,
    buffer_sublanes=0,
    min_buffer_bytes=0,
    scratch_bytes=0,
    loop_scratch_bytes=0,
    wide_scratch_bytes=0,
    wide_loop_scratch_bytes=0,
    wide_step_factor=1.0,
)


def _request(subscripts, shapes, dtype, semiring, gradient, limit, profile):
    spec = parse_subscripts(subscripts, len(shapes))
    eq = build_equation(spec, shapes)
    return PlanRequest(
        eq,
        ITEMSIZE[dtype],
        dtype,
        limit,
        semiring=semiring,
        profile=profile,
        gradient=gradient,
    )


@pytest.mark.parametrize(
    "subscripts, shapes, dtype, semiring, gradient, limit, compiled",
    COMPILED_ON_THE_CHIP,
)
def test_the_tpu_peak_of_the_plan_compiled_there_covers_it(
    subscripts, shapes, dtype, semiring, gradient, limit, compiled
):
    # The same plan (made as it was made then), costed by today's TPU model.
    request = _request(subscripts, shapes, dtype, semiring, gradient, limit, BEFORE)
    try:
        plan = make_plan(request)
    except MemoryLimitError as error:
        # a,adca-> ("log"): the diagonal its pre-reduction makes is counted
        # now (measured on a CPU), on every profile
        plan = make_plan(replace(request, memory_limit=error.smallest_limit))
    eq = plan.equation
    body = Body(eq.terms, plan.prepared, plan.steps, eq.output, semiring)
    chunks = dict(plan.tangent_chunks if gradient else plan.chunks)
    itemsize = ITEMSIZE[dtype]
    before = peak_bytes(body, eq.sizes, chunks, itemsize, gradient, BEFORE)
    now = peak_bytes(body, eq.sizes, chunks, itemsize, gradient, TPU_DEFAULT)
    assert compiled <= now, (before, compiled, now)
    if compiled > limit:  # the model before missed it
        assert before < compiled, (before, compiled, now)


def test_large_plans_pay_little_for_tiles_and_scratch():
    # the seed formula at n=1024 under 256 MB (tpu_v5e.md: 236 MB predicted,
    # 0 compiled): dimensions of 128 multiples pad nothing, and the scratch
    # is a few MB of hundreds
    seed = "ij,ik,il,jk,jl,kl->ij"
    before = make_plan(
        _request(
            seed, ((1024, 1024),) * 6, "float32", "sum", False, 256 * 10**6, BEFORE
        )
    )
    now = make_plan(
        _request(
            seed, ((1024, 1024),) * 6, "float32", "sum", False, 256 * 10**6, TPU_DEFAULT
        )
    )
    assert now.peak_bytes <= 256 * 10**6
    assert now.cost.time <= 1.1 * before.cost.time


def test_float64_runs_einslices_steps_on_a_tpu():
    # jnp.einsum's own float64 program for the seed formula at n=32 compiled
    # 539 MB of temporaries on the chip, einslice's unsliced steps none: the
    # peak model counts the latter, so an unsliced float64 plan keeps them
    seed = "ij,ik,il,jk,jl,kl->ij"
    shapes = ((32, 32),) * 6
    wide = make_plan(
        _request(seed, shapes, "float64", "sum", False, 10**10, TPU_DEFAULT)
    )
    narrow = make_plan(
        _request(seed, shapes, "float32", "sum", False, 10**10, TPU_DEFAULT)
    )
    assert not wide.chunks and wide.executor == "einslice"
    assert narrow.executor == "xla"
