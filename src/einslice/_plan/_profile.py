"""What one kind of device is like, as the time model sees it: a ``Profile``.

Every figure is physical (FLOP/s, bytes/s, bytes, seconds), so a profile can be
measured (``einslice.calibrate()``) or read off a data sheet. ``CPU_DEFAULT``
holds the figures einslice's time model was tuned with on a 2-core x86 CPU;
``GPU_DEFAULT`` is estimated from an H100-class GPU's published figures (not
measured: no GPU was lent while writing it). Pure Python: no JAX here.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields


@dataclass(frozen=True, slots=True)
class Profile:
    """A device kind's speeds, cache sizes and per-loop costs.

    Hashable and immutable: it is part of the plan cache key, so plans made for
    one profile are never reused for another.

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

    def __hash__(self) -> int:
        # Plans are cached on the profile: hash a few fields, not all 19.
        return hash((self.device_kind, self.matmul_flops, self.loop_seconds))

    def to_json(self) -> str:
        """The profile as a JSON object (inf written as a string).

        Example:
            >>> Profile.from_json(CPU_DEFAULT.to_json()) == CPU_DEFAULT
            True
        """
        data = {k: ("inf" if v == math.inf else v) for k, v in asdict(self).items()}
        return json.dumps(data, indent=1, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> Profile:
        """Read ``to_json``'s output back; ValueError if any field is wrong."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"a profile is a JSON object, not {type(data).__name__}")
        names = {f.name: f for f in fields(Profile)}
        if set(data) != set(names):
            raise ValueError(
                f"profile fields {sorted(data)!r} differ from {sorted(names)!r}"
            )
        values: dict[str, object] = {}
        for name, value in data.items():
            kind = names[name].type
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


def figures_problem(profile: object) -> str | None:
    """What makes ``profile`` unusable for planning, or None if nothing does.

    Rates (``*_flops``, ``*_bandwidth``) must be positive, every other figure
    finite and >= 0 (only fresh pages may come at an infinite bandwidth);
    the time model divides by the rates.

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
        if isinstance(value, str):
            continue
        if not isinstance(value, int | float) or isinstance(value, bool):
            return f"{field.name} is {value!r}, not a number"
        rate = field.name.endswith(("_flops", "_bandwidth"))
        if rate and not value > 0:
            return f"{field.name} is {value!r}, not a positive rate"
        if not value >= 0:
            return f"{field.name} is {value!r}, not >= 0"
        if math.isinf(value) and field.name != "fresh_page_bandwidth":
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
)

# Estimated from an H100 SXM's data sheet, not measured here: ~50 TFLOP/s
# reached by float32 products (67 peak without tensor cores), HBM3 at ~3 TB/s
# reached of 3.35, a 50 MB L2 at ~3x HBM, transposes at half HBM speed; the
# BFC allocator reuses memory (no fresh pages); each scan iteration copies its
# loop predicate to the host (~10 us) and each kernel launch costs ~4 us.
# Small products underuse 132 SMs, hence the larger small-GEMM sides.
GPU_DEFAULT = Profile(
    device_kind="gpu",
    matmul_flops=5.0e13,
    cache_bandwidth=1.0e13,
    shared_cache_bandwidth=1.0e13,
    dram_bandwidth=3.0e12,
    transpose_bandwidth=1.5e12,
    cache_bytes=50 * 2**20,
    shared_cache_bytes=50 * 2**20,
    last_level_cache_bytes=50 * 2**20,
    fresh_pages_from=2**62,
    fresh_page_bandwidth=math.inf,
    loop_seconds=1.0e-5,
    launch_seconds=4.0e-6,
    small_gemm_side=128,
    small_gemm_output=2**20,
    thin_batched_result_seconds=2.0e-11,
    thin_batched_operand_seconds=2.0e-12,
    log_entry_seconds=1.0e-11,
    output_slice_penalty=1.0,
)

BUILT_IN = {"cpu": CPU_DEFAULT, "gpu": GPU_DEFAULT}


def built_in(platform: str) -> Profile:
    """The built-in profile for a JAX platform name; the CPU one if unknown.

    Example:
        >>> built_in("cuda").device_kind
        'gpu'
    """
    if platform in ("gpu", "cuda", "rocm"):
        return GPU_DEFAULT
    return CPU_DEFAULT
