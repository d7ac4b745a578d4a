"""What one kind of device is like, as the time model sees it: a ``Profile``.

Every figure is physical (FLOP/s, bytes/s, bytes, seconds), so a profile can be
measured (``einslice.calibrate()``) or read off a data sheet. ``CPU_DEFAULT``
holds the figures einslice's time model was tuned with on a 2-core x86 CPU;
``GPU_DEFAULT`` those measured on an NVIDIA H200 and ``TPU_DEFAULT`` on a
Google TPU v5e (their comments say which were measured and which assumed).
A profile holds a matrix-multiply rate per ``precision=`` (``matmul_rate``);
``for_precision`` gives the profile a plan for that precision is costed
with. Pure Python: no JAX here.
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, asdict, dataclass, fields, replace

from ._cachedir import parse_json


@dataclass(frozen=True, slots=True)
class Profile:
    """A device kind's speeds, cache sizes and per-loop costs.

    Hashable and immutable: it is part of the plan cache key, so plans made for
    one profile are never reused for another. ``compile_seconds`` and
    ``compile_step_seconds`` (and the fields after them) describe the
    compiler, not the plans: ``compile_estimate`` reads them.

    Example:
        >>> CPU_DEFAULT.matmul_flops
        300000000000.0
        >>> from dataclasses import replace
        >>> replace(CPU_DEFAULT, loop_seconds=1e-5).loop_seconds
        1e-05
    """

    device_kind: str
    # Dense matrix-multiply rate (FLOP/s) of large products: the time unit.
    matmul_flops: float
    # Streaming bandwidths (bytes/s) of a step whose data fits the per-core
    # caches together / a share of the last-level cache / neither (DRAM).
    cache_bandwidth: float
    shared_cache_bandwidth: float
    dram_bandwidth: float
    # A transpose copy reads with strides: slower per byte than a stream.
    transpose_bandwidth: float
    # Data up to cache_bytes streams at cache_bandwidth, up to
    # shared_cache_bytes at shared_cache_bandwidth; a plan's peak beyond
    # last_level_cache_bytes is nudged down (see _cost.ranking).
    cache_bytes: int
    shared_cache_bytes: int
    last_level_cache_bytes: int
    # Temporaries above this size come fresh from the OS (page faults and
    # zeroing on first touch) at fresh_page_bandwidth bytes/s; inf: free.
    fresh_pages_from: int
    fresh_page_bandwidth: float
    # One iteration of a lax.scan (loop bookkeeping), and one kernel launch
    # (every step of every chunk); zero where launches cost nothing extra.
    loop_seconds: float
    launch_seconds: float
    # A matrix multiply with a side below small_gemm_side, or a result below
    # small_gemm_output entries, runs below matmul_flops (see _cost).
    small_gemm_side: int
    small_gemm_output: int
    # A batched product contracting few entries runs as many tiny multiplies:
    # seconds per result entry and per operand entry.
    thin_batched_result_seconds: float
    thin_batched_operand_seconds: float
    # A "log" chunk in scaled form: seconds per operand or block entry.
    log_entry_seconds: float
    # Slicing an output index runs this much slower than a summed one.
    output_slice_penalty: float
    # Fields added later have defaults, so that stored profiles without them
    # still load (as the CPU's figures).
    # Each doubling of a plan's peak above last_level_cache_bytes ranks it
    # this much slower (see _cost.ranking).
    peak_preference: float = 0.06
    # Measured matrix-multiply rates (FLOP/s) by ``precision_key``: e.g.
    # (("default", 3.5e14), ("highest", 5e13), ...). matmul_flops is the rate
    # of ``precision``; a precision with no rate here is costed at the
    # default precision's.
    matmul_rates: tuple[tuple[str, float], ...] = ()
    # The precision whose rate matmul_flops is (see for_precision).
    precision: str = "default"
    # What compiling a plan's program for this device costs, in wall seconds
    # (the host compiles; the choosing stage, ``_exec/_choose.py``, weighs it
    # against walking the plan in numpy on the host, and tuning against the
    # gain of measuring): a fixed part per program, a part per pairwise step
    # of a forward program and of a value-and-gradient program, and one
    # tuning candidate's compile. The defaults are the CPU's (see CPU_DEFAULT).
    compile_seconds: float = 0.0
    compile_step_seconds: float = 0.03
    grad_compile_step_seconds: float = 0.2
    candidate_compile_seconds: float = 0.3
    # Bytes/s between the host's memory and this device's, each way: what a
    # plan walked on the host pays to fetch operands that live on the device
    # and to put its result back; inf where the device is the host.
    host_transfer_bandwidth: float = math.inf
    # The executor (``_executors.EXECUTOR_FACTS``) of a plan that slices
    # nothing, where that executor runs it: "einslice" (its own
    # ``dot_general`` per step, laid out to spare XLA:CPU its copies) or
    # "xla" (one ``jnp.einsum`` along the plan's path: the program jnp
    # compiles for that path, laid out by the accelerator's compiler).
    unsliced_executor: str = "einslice"
    # How the device lays out a buffer (see _layout.buffer_bytes): XLA:TPU
    # tiles its two minor dimensions, buffer_lanes entries along the minor
    # one and up to buffer_sublanes rows along the other (1, 2 or 4 for a
    # dimension that small), and gives each buffer at least min_buffer_bytes.
    # 0: no tiles (CPU, GPU: a buffer holds its entries).
    buffer_lanes: int = 0
    buffer_sublanes: int = 0
    min_buffer_bytes: int = 0
    # Temporary bytes a compiled program holds beyond the buffers the model
    # counts (on a TPU: scratch of reductions and loops, and of float64's
    # emulation; see _cost._scratch): a plain program (one pass, "sum", no
    # derivative), and one that loops over chunks, runs another semiring or
    # is a derivative; for element types of at most 4 bytes and for wider
    # ones (float64, complex64: "wide"). None for a program without a
    # reduction or a product (a copy, a transpose), nor for a plain sum of
    # one operand of up to 4-byte entries (see _cost._scratch).
    scratch_bytes: int = 0
    loop_scratch_bytes: int = 0
    wide_scratch_bytes: int = 0
    wide_loop_scratch_bytes: int = 0
    # A step's copies of its sides count this many times for wide element
    # types (float64 emulated in float32 pairs: more copies, and larger).
    wide_step_factor: float = 1.0
    # Element types narrower than this many bytes are computed in this width
    # (XLA's CPU backend computes bfloat16 and float16 in float32: copies of
    # the operands and buffers of 4 bytes an entry); 0: in their own width.
    compute_itemsize: int = 0
    # Measured seconds of a plan's calls per second of this model's estimate,
    # on einsum-benchmark-like networks (fixed costs the model leaves out:
    # dispatch, and per step layouts of small tensors): the tree search's
    # rules, fixed on the CPU, weigh estimates by it (``_search.rule_scale``).
    # The CPU's: ~3 (the "sum" trees of ``_search.TRIAL_COST_PER_TENSOR``'s
    # comment; ``_search.SUM_MEASURED_PER_ESTIMATED`` reads it from here).
    measured_per_estimated: float = 3.0

    def __hash__(self) -> int:
        # Plans are cached on the profile: hash a few fields, not all 22.
        return hash(
            (self.device_kind, self.matmul_flops, self.loop_seconds, self.precision)
        )

    def matmul_rate(self, precision: object = None) -> float:
        """FLOP/s of large float32 products at ``precision`` (as jnp takes it).

        The measured rate of that precision, else the default precision's.
        Two precisions (one per operand) run at the slower one's rate.

        Example:
            >>> GPU_DEFAULT.matmul_rate("highest") / 1e12
            50.0
            >>> GPU_DEFAULT.matmul_rate(None) == GPU_DEFAULT.matmul_flops
            True
            >>> CPU_DEFAULT.matmul_rate("highest") == CPU_DEFAULT.matmul_flops
            True
        """
        key = precision_key(precision)
        if "," in key:
            return min(self.matmul_rate(part) for part in key.split(","))
        if key == self.precision:
            return self.matmul_flops
        rates = dict(self.matmul_rates)
        if key in rates:
            return rates[key]
        return rates.get("default", self.matmul_flops)

    def for_precision(self, precision: object) -> Profile:
        """This profile with ``matmul_flops`` the rate of ``precision``.

        What a plan for that precision is costed with; ``precision`` then
        names it (``print(plan)`` says so). The profile itself when it is
        already for that precision.

        Example:
            >>> highest = GPU_DEFAULT.for_precision("float32")
            >>> highest.precision, highest.matmul_flops / 1e12
            ('highest', 50.0)
            >>> highest.for_precision(None) == GPU_DEFAULT
            True
        """
        key = precision_key(precision)
        if key == self.precision:
            return self
        rates = dict(self.matmul_rates)
        rates.setdefault(self.precision, self.matmul_flops)
        return replace(
            self,
            matmul_flops=self.matmul_rate(key),
            precision=key,
            matmul_rates=tuple(sorted(rates.items())),
        )

    def compile_estimate(self, steps: int, gradient: bool = False) -> float:
        """Estimated wall seconds to compile a program of ``steps`` pairwise steps.

        ``gradient``: a value-and-gradient program (several times the
        forward's compile).

        Example:
            >>> CPU_DEFAULT.compile_estimate(100)
            3.0
            >>> TPU_DEFAULT.compile_estimate(1) > CPU_DEFAULT.compile_estimate(1)
            True
        """
        per_step = (
            self.grad_compile_step_seconds if gradient else self.compile_step_seconds
        )
        return self.compile_seconds + per_step * max(1, steps)

    def to_json(self) -> str:
        """The profile as a JSON object (inf written as a string).

        Example:
            >>> Profile.from_json(CPU_DEFAULT.to_json()) == CPU_DEFAULT
            True
        """
        data = {k: ("inf" if v == math.inf else v) for k, v in asdict(self).items()}
        data["matmul_rates"] = dict(self.matmul_rates)
        return json.dumps(data, indent=1, sort_keys=True)

    @staticmethod
    def from_json(text: str, defaults: Profile | None = None) -> Profile:
        """Read ``to_json``'s output back; ValueError if any field is wrong.

        A field added after the file was written (one with a default) takes
        its value from ``defaults`` when given (the built-in profile of the
        file's platform), else the CPU's.

        Example:
            >>> old = json.loads(TPU_DEFAULT.to_json())
            >>> del old["compile_step_seconds"]
            >>> back = Profile.from_json(json.dumps(old), defaults=TPU_DEFAULT)
            >>> back.compile_step_seconds == TPU_DEFAULT.compile_step_seconds
            True
        """
        data = parse_json(text)
        if not isinstance(data, dict):
            raise ValueError(f"a profile is a JSON object, not {type(data).__name__}")
        if defaults is not None:
            known = json.loads(defaults.to_json())
            data = {**{k: known[k] for k in known if k not in data}, **data}
        names = {f.name: f for f in fields(Profile)}
        required = {n for n, f in names.items() if f.default is MISSING}
        if not required <= set(data) <= set(names):
            raise ValueError(
                f"profile fields {sorted(data)!r} differ from {sorted(names)!r}"
            )
        values: dict[str, object] = {}
        for name, value in data.items():
            kind = names[name].type
            if name == "matmul_rates":
                values[name] = _rates(value)
                continue
            if kind == "str":
                if not isinstance(value, str):
                    raise ValueError(f"profile field {name!r} is {value!r}, not text")
                values[name] = value
                continue
            number = math.inf if value == "inf" else value
            if (
                not isinstance(number, int | float)
                or isinstance(number, bool)
                or not number >= 0
            ):
                raise ValueError(f"profile field {name!r} is {value!r}, not >= 0")
            values[name] = int(number) if kind == "int" else float(number)
        return Profile(**values)  # type: ignore[arg-type]


def _rates(value: object) -> tuple[tuple[str, float], ...]:
    """A JSON object of precision name -> FLOP/s as ``matmul_rates`` holds it."""
    if not isinstance(value, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and v > 0
        for v in value.values()
    ):
        raise ValueError(
            f"profile field 'matmul_rates' is {value!r}, not an object of "
            "precision names and FLOP/s > 0"
        )
    return tuple(sorted((str(k), float(v)) for k, v in value.items()))


# JAX's names for its three precisions (lax.Precision), as jnp accepts them.
_PRECISION_ALIASES = {
    "fastest": "default",
    "bfloat16": "default",
    "high": "high",
    "bfloat16_3x": "high",
    "tensorfloat32": "high",
    "highest": "highest",
    "float32": "highest",
    "default": "default",
}


def precision_key(precision: object) -> str:
    """The name ``matmul_rates`` keys a ``precision=`` value by (no JAX needed).

    ``"default"``, ``"high"`` or ``"highest"`` for ``lax.Precision`` values
    and JAX's strings for them; a ``lax.DotAlgorithmPreset``'s name (e.g.
    ``"TF32_TF32_F32_X3"``); two precisions (one per operand) joined by a
    comma; any other value (a ``lax.DotAlgorithm``) as its ``str``.

    Example:
        >>> precision_key(None), precision_key("float32"), precision_key("HIGH")
        ('default', 'highest', 'high')
        >>> precision_key(("highest", "highest")), precision_key(("default", "high"))
        ('highest', 'default,high')
    """
    if precision is None:
        return "default"
    if isinstance(precision, tuple | list):
        return ",".join(dict.fromkeys(precision_key(p) for p in precision))
    name = getattr(precision, "name", None)  # lax.Precision, DotAlgorithmPreset
    text = name if isinstance(name, str) else str(precision)
    return _PRECISION_ALIASES.get(text.lower(), text)


# Bandwidths that are infinite where the cost they model does not arise.
_MAY_BE_INFINITE = ("fresh_page_bandwidth", "host_transfer_bandwidth")

# What ``Profile.unsliced_executor`` may name (``_executors.EXECUTOR_FACTS``
# holds their facts; a compiling executor that runs unsliced "sum" plans).
UNSLICED_EXECUTORS = ("einslice", "xla")


def figures_problem(profile: object) -> str | None:
    """What makes ``profile`` unusable for planning, or None if nothing does.

    Rates (``*_flops``, ``*_bandwidth``) must be positive, every other figure
    finite and >= 0 (only fresh pages and host transfers may come at an
    infinite bandwidth); the time model divides by the rates.

    Example:
        >>> figures_problem(CPU_DEFAULT) is None
        True
        >>> from dataclasses import replace
        >>> figures_problem(replace(CPU_DEFAULT, matmul_flops=0.0))
        'matmul_flops is 0.0, not a positive rate'
    """
    if not isinstance(profile, Profile):
        return f"it is a {type(profile).__name__}, not an einslice.Profile"
    for field in fields(Profile):
        value = getattr(profile, field.name)
        if field.name == "unsliced_executor" and value not in UNSLICED_EXECUTORS:
            return (
                f"unsliced_executor is {value!r}, not one of {list(UNSLICED_EXECUTORS)}"
            )
        if isinstance(value, str):
            continue
        if field.name == "matmul_rates":  # (precision name, FLOP/s) pairs
            bad = [r for _, r in value if not (0 < r < math.inf)]
            if bad:
                return f"matmul_rates has {bad[0]!r}, not a positive rate"
            continue
        if not isinstance(value, int | float) or isinstance(value, bool):
            return f"{field.name} is {value!r}, not a number"
        rate = field.name.endswith(("_flops", "_bandwidth"))
        if rate and not value > 0:
            return f"{field.name} is {value!r}, not a positive rate"
        if not value >= 0:
            return f"{field.name} is {value!r}, not >= 0"
        if math.isinf(value) and field.name not in _MAY_BE_INFINITE:
            return f"{field.name} is {value!r}, not finite"
    return None


# Measured on the 2-core x86 CPU einslice was developed on (XLA CPU): ~300
# GFLOP/s for large float32 products; ~30 GB/s from DRAM, ~60 GB/s from a
# share of the 32 MB last-level cache, ~120 GB/s from the 2 x 2 MB L2 caches,
# ~10 GB/s for transposing copies; ~0.67 us per scan iteration; fresh pages
# at ~7.5 GB/s above glibc's 32 MB mmap threshold. See _cost for how each
# figure was measured and which plan choice it fixed.
CPU_DEFAULT = Profile(
    device_kind="cpu",
    matmul_flops=3.0e11,
    cache_bandwidth=1.2e11,
    shared_cache_bandwidth=6.0e10,
    dram_bandwidth=3.0e10,
    transpose_bandwidth=1.0e10,
    cache_bytes=4 * 2**20,
    shared_cache_bytes=8 * 2**20,
    last_level_cache_bytes=32 * 2**20,
    fresh_pages_from=32 * 2**20,
    fresh_page_bandwidth=7.5e9,
    loop_seconds=2.0e5 / 3.0e11,
    launch_seconds=0.0,
    small_gemm_side=32,
    small_gemm_output=2**16,
    thin_batched_result_seconds=336.0 / 3.0e11,
    thin_batched_operand_seconds=44.0 / 3.0e11,
    log_entry_seconds=250.0 / 3.0e11,
    output_slice_penalty=1.3,
    # Compiling (XLA:CPU with einslice's compile options, lowering included;
    # 2026-12-05, load 2-3): UAI "log" plans of 42-189 steps compiled in
    # 0.6-2 s (0.01-0.02 s a step), lattices of 99-399 steps in 0.1-9 s; UAI
    # 2014's larger MAR models far more: ObjectDetection_17 149 steps 22 s,
    # Grids_17 175 steps 25 s, DBN_16 29 steps 6.9 s, CSP_11 320 steps 10.8
    # s: 0.03-0.24 s a step, while their host walks took 1.3-8 s and compile
    # + run 1.5-5x the walk. At 0.01 the first two compiled (PR 37 s end to
    # end where the walk takes 5 s, MAR over 60 s); 0.03 is the low end of
    # those four. No fixed part: it is within those figures' spread. (The
    # lowering of union steps since (2026-12-07, benchmarks/log_compile.py,
    # load 5-9): Grids_12's "log" plan, 279 steps, 0.030-0.043 s a step
    # against 0.049-0.062; Promedus_24's unchanged: still at or above 0.03.)
    compile_seconds=0.0,
    compile_step_seconds=0.03,
    # A value-and-gradient program: "log" plans of UAI networks, 42-49 steps,
    # 30-52 s on a loaded machine (0.6-1 s a step), ~2-8 s when quiet
    # (0.05-0.19 s a step); ObjectDetection_30 (164 steps in a 121-chunk
    # scan): 105 s for compile and first call under load, against 38 s for
    # its host walk; its likes (ObjectDetection_42-75) took 55-59 s end to
    # end on a quiet machine, nearly all compiling (~0.3 s a step). At three
    # times the forward's figure (0.09) that plan was compiled: UAI 2014's 40
    # ObjectDetection models like it took 55-90 s for marginals, against 5 s
    # for those walked. 0.2: inside the measured range and below its top, so
    # that the host is still chosen only when it clearly wins.
    grad_compile_step_seconds=0.2,
    # Tuning's guess of one candidate's compile (the candidates of calls
    # estimated at 10 s or more, whose steps are few and large): a flat,
    # conservative figure that errs towards not measuring.
    candidate_compile_seconds=0.3,
    host_transfer_bandwidth=math.inf,
    # bfloat16 computed in float32: `de->` on a 4x129 bfloat16 matrix
    # planned at 194 bytes compiled 2132 (the operand's float32 copy).
    compute_itemsize=4,
)

# Measured on one NVIDIA H200 (jax 0.11.2, CUDA 13; ../shared/gpu/ in the
# project's notes, 2026-12-04), with jitted float32 products of 8192^3 (best
# of 3): 350 TFLOP/s at the default precision (TF32 tensor cores), 50 at
# HIGHEST, and per lax.DotAlgorithmPreset the rates in GPU_MATMUL_RATES.
# Measured too: a device-to-device copy at ~4.3 TB/s (read + write), 4.3 us
# per lax.scan iteration and 0.46 us per kernel launched inside one.
# Assumed, not measured: the 50 MB L2 (a data-sheet figure) streaming at
# ~2.3x HBM, transposing copies at half the copy rate (calibrate() read 0.17
# TB/s there, but from a 16 MB transpose that a GPU finishes in launch-sized
# time), the small-GEMM sides (132 SMs need large products), the thin-product
# and log-entry costs, no slowdown for slicing output indices, and no cost of
# fresh memory: XLA's BFC allocator reuses device memory, so a temporary of
# GBs costs only its traffic at HBM bandwidth (peak_preference 0: no nudge
# towards small peaks; every scan iteration, at ~5 us, is what slicing costs).
GPU_MATMUL_RATES = {
    "default": 3.50e14,
    "highest": 5.0e13,
    "F32_F32_F32": 4.99e13,
    "TF32_TF32_F32": 3.54e14,
    "TF32_TF32_F32_X3": 1.20e14,
    "BF16_BF16_F32_X3": 2.11e14,
    "BF16_BF16_F32_X6": 1.07e14,
    "BF16_BF16_F32_X9": 1.58e14,
}
GPU_DEFAULT = Profile(
    device_kind="gpu",
    matmul_flops=GPU_MATMUL_RATES["default"],
    cache_bandwidth=1.0e13,
    shared_cache_bandwidth=1.0e13,
    dram_bandwidth=4.3e12,
    transpose_bandwidth=2.15e12,
    cache_bytes=50 * 2**20,
    shared_cache_bytes=50 * 2**20,
    last_level_cache_bytes=50 * 2**20,
    fresh_pages_from=2**62,
    fresh_page_bandwidth=math.inf,
    loop_seconds=4.3e-6,
    launch_seconds=4.6e-7,
    small_gemm_side=128,
    small_gemm_output=2**20,
    thin_batched_result_seconds=2.0e-11,
    thin_batched_operand_seconds=2.0e-12,
    log_entry_seconds=1.0e-11,
    output_slice_penalty=1.0,
    peak_preference=0.0,
    matmul_rates=tuple(sorted(GPU_MATMUL_RATES.items())),
    # Not measured on a GPU: the CPU's compile figures (a GPU's compile is
    # XLA:GPU's, with autotuning: not faster than the CPU's), and a host
    # link assumed at a PCIe 5 x16 link's practical rate.
    host_transfer_bandwidth=2.5e10,
    unsliced_executor="xla",
    # The H200's suite run (../shared/gpu/logs/suite.log, 2026-12-04: medians
    # of einslice's calls) against this profile's estimates of the same
    # plans: the tensor networks peps-5x5 282 us / 41 us (6.9x), mps-inner
    # 255 / 17 (15x), random-network 336 / 117 (2.9x); the few-step
    # formulas 1-3x, and 10-24x where ~85 us a call is all they take. 7: the
    # networks' middle (a device's estimates weigh by it over the CPU's 3 in
    # the search's rules, `_search.rule_scale`). Not measured end to end on
    # a GPU.
    measured_per_estimated=7.0,
)

# Measured on one Google TPU v5e chip ("TPU v5 lite", jax 0.10.2,
# 2026-12-06, einslice.calibrate() and jitted float32 products): 171 TFLOP/s
# at the default precision (one bf16 pass; 98 at 4096^3, 148 at 8192^3), 63 at
# HIGH, 30.6 at HIGHEST (F32_F32_F32, TF32 and BF16_X9 presets are
# UNIMPLEMENTED there); HBM copies at 623 GB/s; 0.42 us per lax.scan
# iteration. Assumed, not measured: no cache level worth modelling (XLA
# stages data through the core's vector memory itself: every level streams
# at HBM speed), transposing copies at half the copy rate, small products
# below a 128-wide side (the MXU is 128x128), the thin-product and log-entry
# costs of the GPU, no launch cost inside a program, and no cost of fresh
# memory (XLA's allocator owns device memory, as on a GPU).
# Memory (benchmarks/tpu_memory_probe.py, 2026-12-07; _layout.py): buffers
# are tiled 8x128 (fewer rows for a dimension below 8), at least 512 bytes
# each (203 shapes x dtypes reproduced exactly). A compiled program's
# temporaries (memory_analysis) also hold scratch the buffers do not
# explain, in ~32 kB steps: reductions, scan loops, semirings and float64's
# emulation (float32 pairs). The most seen over 269 random small programs,
# by class: 161 kB for a plain one of 4-byte types (one pass, "sum"), 614
# kB for a loop, a "max"/"log" or a derivative; in float64 and complex64
# 968 kB and 2.26 MB (`a,a->` on float64 4-vectors: 516 kB against a 384 B
# limit); none in the 13 programs without a reduction or a product, nor in
# the 31 plain sums of one operand of 4-byte types (97 kB in float64). The
# allowances below are 1.6-2.2x those. And float64's emulated products can
# hold far more than their sides: `ij,ij->` on two 2048x2048 float64
# matrices, unsliced, compiled 537 MB, 16x one side (wide_step_factor 10
# counts 20x); sliced into 10 chunks, 744 kB.
TPU_MATMUL_RATES = {"default": 1.71e14, "high": 6.3e13, "highest": 3.06e13}
TPU_DEFAULT = Profile(
    device_kind="tpu",
    matmul_flops=TPU_MATMUL_RATES["default"],
    cache_bandwidth=6.23e11,
    shared_cache_bandwidth=6.23e11,
    dram_bandwidth=6.23e11,
    transpose_bandwidth=3.1e11,
    cache_bytes=16 * 2**20,
    shared_cache_bytes=16 * 2**20,
    last_level_cache_bytes=16 * 2**20,
    fresh_pages_from=2**62,
    fresh_page_bandwidth=math.inf,
    loop_seconds=4.2e-7,
    launch_seconds=0.0,
    small_gemm_side=128,
    small_gemm_output=2**16,
    thin_batched_result_seconds=2.0e-11,
    thin_batched_operand_seconds=2.0e-12,
    log_entry_seconds=1.0e-11,
    output_slice_penalty=1.0,
    peak_preference=0.0,
    matmul_rates=tuple(sorted(TPU_MATMUL_RATES.items())),
    # Compiling for the chip (jax 0.10.2, 2026-12-07, benchmarks/accel_probe.py
    # and the parity probe, benchmarks/results/tpu_v5e.md): a program of 1-5
    # steps compiled in 0.2-2.5 s (most 0.2-0.9 s), far above the CPU's; lattice
    # plans of tiny steps (bond 2) of 24 and 48 steps, "sum" 0.26 and 0.70 s,
    # "log" 1.1-1.5 and 3.0-3.5 s (0.06 s a step: 4-5x the sum's 0.018, its
    # steps emit ~28 StableHLO ops to the sum's 1-2), "max" 4.2 s at 24 steps
    # (its blocked product on XLA's ops). The per-step figure is the log's:
    # many-step plans are graphical models', log Z and marginals. Not measured
    # there: the gradient's compile, taken as 5x the forward's a step (the
    # CPU's ratio on the same lattices, 3-5x) and tuning's candidates (0.6 s:
    # the single-digit-step compiles above). The "log" figures predate the
    # union steps' logaddexp reduction (_exec/_semiring.ONE_PASS_UP_TO): with
    # it the same lattices' "log" plans take 0.66 and 1.12 s, lowering
    # included (0.023-0.028 s a step, 2.1x the "sum" plans'; 0.59 and 1.10 s,
    # 1.8-1.9x at 48 steps, since their unions reduce a major axis). The figure
    # stays at 0.06 until a many-step plan's end-to-end run on the chip is
    # measured with a lower one (Grids_15's 177-step plan, walked on the host
    # at 0.06, did not finish compiling there in 214 s before).
    # Host copies: 5.0 GB/s to the chip, 0.91 GB/s back (16M float32
    # entries), ~5 ms a round trip for a tiny one; the slower way is the figure.
    compile_seconds=0.2,
    compile_step_seconds=0.06,
    grad_compile_step_seconds=0.3,
    candidate_compile_seconds=0.6,
    host_transfer_bandwidth=9.1e8,
    unsliced_executor="xla",
    buffer_lanes=128,
    buffer_sublanes=8,
    min_buffer_bytes=512,
    scratch_bytes=2**18,
    loop_scratch_bytes=2**20,
    wide_scratch_bytes=2**21,
    wide_loop_scratch_bytes=2**22,
    wide_step_factor=10.0,
    # Measured on the chip (2026-12-08, .tpu probe steps24: einslice's
    # optimized programs, warm medians of 15): lattice-8x8-d4 3.5 ms against
    # 0.376 ms estimated (9x), its CPU-profile tree 1.93 against 0.071 (27x);
    # ctg-lattice-10x10-d3 5.2/0.43 (12x) and 2.95/0.22 (13x);
    # mera-p-first-last-d3 22.5/0.31 (72x), 10.1/0.24 (41x); tree-100
    # 0.77/0.0115 (67x), mps-100 0.90/0.075 (12x). Small steps of tiled
    # high-rank tensors cost 20-50 us each there, and a call ~0.5 ms, which the
    # model does not count. 20: the middle of those, below the floor-bound
    # trees (tree-100's 67x is the call's fixed cost, which no tree improves).
    measured_per_estimated=20.0,
)

BUILT_IN = {"cpu": CPU_DEFAULT, "gpu": GPU_DEFAULT, "tpu": TPU_DEFAULT}
# JAX's platform names for each built-in profile's kind of device.
PLATFORMS = {"gpu": ("gpu", "cuda", "rocm"), "tpu": ("tpu",)}


def built_in(platform: str) -> Profile:
    """The built-in profile for a JAX platform name; the CPU one if unknown.

    Example:
        >>> built_in("cuda").device_kind, built_in("tpu").device_kind
        ('gpu', 'tpu')
        >>> built_in("METAL").device_kind
        'cpu'
    """
    for kind, names in PLATFORMS.items():
        if platform.lower() in names:
            return BUILT_IN[kind]
    return CPU_DEFAULT
