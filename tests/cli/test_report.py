"""The benchmark's report (bench/_report.py): reference, rounds, ratios, plot."""

from __future__ import annotations

from einslice.bench import _report
from einslice.bench._run import Cell

FLOPS = 2.0 * 4**4  # the seed formula's work at n=4
MATMUL = 2.0 * 2048**3


def _cell(n, method, rounds, flops=FLOPS, **kw):
    rounds = list(rounds)
    seconds = sorted(rounds)[len(rounds) // 2] if rounds else None
    return Cell("seed-6", n, method, kw.pop("status", "ok"), seconds=seconds,
                runs=len(rounds), rounds=rounds, flops=flops, **kw)  # fmt: skip


def _header():
    return _report.Header("einslice bench: f", "einslice bench", "cpu", 999.0,
                          10**9, None, "float32", 60.0, rounds=3)  # fmt: skip


def test_one_matmul_reference_per_run_the_median_of_all_its_rounds():
    # 1 s, 2 s, 4 s rounds at one n; 8 s at the other: median of the 4 rounds
    cells = [
        _cell(4, "matmul", [1.0, 2.0, 4.0], flops=MATMUL),
        _cell(8, "matmul", [8.0], flops=MATMUL),
    ]
    ref = _report.reference(cells)
    assert ref is not None and ref.rounds == 4 and ref.side == 2048
    # the median of the 4 rates: (F/2 + F/4) / 2
    assert abs(ref.gflops - MATMUL / 1e9 * 0.375) < 1e-9
    assert "median of its 4 rounds" in ref.note()


def test_sweep_tables_give_rounds_ratios_and_say_why_a_fraction_is_over_100():
    cells = [
        _cell(4, "scan_einsum", [2e-6, 3e-6, 4e-6]),
        _cell(4, "einslice", [1e-6, 1e-6, 1e-6]),
        _cell(4, "matmul", [1.0, 1.0, 1.0], flops=MATMUL),  # 17.2 GFLOP/s
        _cell(8, "scan_einsum", [100.0], over_time=True),
        _cell(8, "einslice", [2.0, 2.0]),
        _cell(8, "matmul", [1.0], flops=MATMUL),
    ]
    md = _report.sweep_markdown(cells, _header())
    assert "float32 matmul 17.2 GFLOP/s (2048x2048" in md  # not the header's 999
    assert "matmul |" not in md  # the reference is not a column
    assert "| 4 | 3e-06 (3)" in md  # median (rounds)
    assert "100 (1, over 60 s)" in md
    assert "3.00x (2.50-3.50, 3 rounds)" in md  # scan / einslice by round
    assert "50.00x (1 round)" in md
    # 512 FLOP in 1 us: 0.512 GFLOP/s of 17.2 is 3%; nothing over 100% here
    assert "(3%)" in md and "above 100%" not in md
    assert "A started call cannot be interrupted" in md
    fast = [_cell(4, "einslice", [1e-9]), _cell(4, "matmul", [1.0], flops=MATMUL)]
    assert "A fraction above 100%" in _report.sweep_markdown(fast, _header())


def test_skipped_and_oom_cells_say_so():
    skipped = Cell("f", 8, "vmap_einsum", "skipped", estimate=45.0)
    assert _report.cell_text(skipped, "time") == "skipped (est. 45-90 s)"
    oom = Cell("f", 8, "jnp.einsum", "oom", needs=17_200_000_000)
    assert _report.cell_text(oom, "time") == "OOM (needs 17.2 GB)"


def test_suite_speedup_gives_the_spread_of_round_ratios():
    cells = [
        Cell("f", None, "einslice", "ok", seconds=1.0, rounds=[1.0, 1.0, 1.0]),
        Cell("f", None, "jnp.einsum", "ok", seconds=2.0, rounds=[1.0, 2.0, 3.0]),
    ]
    md = _report.suite_markdown(cells, _header(), "einslice", ["jnp.einsum"],
                                {"f": "ij->i"})  # fmt: skip
    assert "2.00x (1.50-2.50 by round)" in md
    assert "| f       | `ij->i`  | 1 (3)" in md


def test_sweep_plot_marks_oom_skipped_and_over_time(tmp_path):
    cells = [
        _cell(4, "einslice", [1e-3], memory=1000, limit=5000),
        _cell(8, "einslice", [2e-3], memory=2000, limit=5000),
        _cell(4, "jnp.einsum", [1e-2], memory=10**6),
        Cell("seed-6", 8, "jnp.einsum", "oom", needs=10**9),
        _cell(4, "vmap_einsum", [70.0], over_time=True, memory=10),
        Cell("seed-6", 8, "vmap_einsum", "skipped", estimate=900.0),
    ]
    path = tmp_path / "p.png"
    _report.plot_sweep(str(path), cells, "t", device_memory=10**10)
    assert path.read_bytes()[:4] == b"\x89PNG"
