"""The ``einslice`` command line end to end, on sizes that run in seconds.

No timings are asserted: only that every output is written, that what does not
fit or would take too long is reported as such, and that bad arguments give one
line and exit code 2.
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys

import pytest

import einslice
from einslice._cli import main

SEED = "ij,ik,il,jk,jl,kl->ij"


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _bench(tmp_path, args, progress=False):
    """Run ``einslice bench ARGS --out TMP`` (no progress bar unless asked).

    Two timing rounds unless ARGS says: the tests check what is reported, not
    how steady the times are.
    """
    argv = ["bench", *args.split(), "--out", str(tmp_path)]
    if "--rounds" not in args:
        argv += ["--rounds", "2"]
    return main(argv if progress else [*argv, "--no-progress"])


def test_bench_writes_table_csv_and_plot(tmp_path, capsys):
    code = _bench(tmp_path, "--sizes 16,32 --max-seconds 5", progress=True)
    out, err = capsys.readouterr()
    assert code == 0, err
    for name in ("seed.md", "seed.csv", "seed.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert (tmp_path / "seed.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the terminal shows the same table as the Markdown file
    assert "| n  | jnp.einsum | vmap_einsum | scan_einsum | einslice |" in out
    assert (tmp_path / "seed.md").read_text() in out
    rows = _rows(tmp_path / "seed.csv")
    # a matmul is timed alongside each n: the reference for the fractions
    assert [(r["n"], r["method"]) for r in rows] == [
        (n, m)
        for n in ("16", "32")
        for m in ("jnp.einsum", "vmap_einsum", "scan_einsum", "einslice", "matmul")
    ]
    assert "matmul |" not in out  # the reference is not a column
    assert {r["status"] for r in rows} == {"ok"}  # ran, and all results agree
    assert all(float(r["seconds"]) > 0 for r in rows)
    einslice_rows = [r for r in rows if r["method"] == "einslice"]
    assert all(r["memory_source"] == "compiled" for r in einslice_rows)
    # rounds: counted in the time table, one time per round in the CSV, and
    # einslice against each method round by round
    assert all(r["rounds"] == "2" and len(r["round_seconds"].split()) == 2
               for r in rows)  # fmt: skip
    assert "timed in up to 2 rounds" in out
    assert re.search(r"\| 32 \| [0-9.e+-]+ \(2\)", out)
    assert re.search(
        r"vs scan_einsum.*\n.*\n\| 16 +\| [0-9.]+x \([0-9.]+-[0-9.]+, 2 rounds", out
    )
    # one matmul reference for the run: the median of its rounds
    assert "median of its 4 rounds timed alongside the methods" in out


@pytest.mark.slow
def test_bench_reports_oom_instead_of_running(tmp_path, capsys):
    # jnp.einsum materialises n^4 floats (4.2 MB at n=32); einslice does not
    args = "--sizes 32 --methods jnp.einsum,einslice@500kB --device-memory 1MB"
    code = _bench(tmp_path, args)
    out, _ = capsys.readouterr()
    assert code == 0
    assert re.search(r"OOM \(needs 4\.\d+ MB\)", out)
    rows = {r["method"]: r for r in _rows(tmp_path / "seed.csv")}
    assert rows["jnp.einsum"]["status"] == "oom"
    assert rows["einslice@500kB"]["status"] == "ok"
    assert int(rows["einslice@500kB"]["memory_bytes"]) <= 500_000
    assert rows["einslice@500kB"]["over_limit"] == "False"


@pytest.mark.slow
def test_bench_skips_what_would_exceed_max_seconds(tmp_path, capsys):
    # vmap_einsum's time at n=16 (~1e-4 s), scaled by (64/16)^4, is far above 1 ms
    code = _bench(tmp_path, "--sizes 16,64 --methods vmap_einsum --max-seconds 1e-3")
    out, _ = capsys.readouterr()
    assert code == 0
    assert re.search(r"skipped \(est\. [0-9.e+-]+ s\)", out)
    rows = [r for r in _rows(tmp_path / "seed.csv") if r["method"] == "vmap_einsum"]
    assert [r["status"] for r in rows] == ["ok", "skipped"]
    assert float(rows[1]["estimate_seconds"]) > 1e-3


def test_bench_suite_on_tiny_shapes(tmp_path, capsys):
    only = "seed-3,attention,random-network"
    methods = "einslice,einslice-tuned,jnp.einsum,opt_einsum"
    code = _bench(tmp_path, f"--suite --only {only} --scale 0.1 --methods {methods}")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "geometric-mean speed-up" in out
    assert "einslice-tuned vs the best peer that fit" in out
    assert re.search(r"\| seed-3 \| [0-9.]+ \| \d+ of \d+: path", out), out
    for name in ("suite.md", "suite.csv", "suite.png"):
        assert (tmp_path / name).stat().st_size > 0
    rows = _rows(tmp_path / "suite.csv")
    assert {r["formula"] for r in rows} == set(only.split(","))
    assert {r["status"] for r in rows} == {"ok"}


@pytest.mark.slow
def test_missing_peer_is_reported_not_fatal(tmp_path, capsys, monkeypatch):
    # importing a module mapped to None raises ImportError, as if not installed
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "torch_semiring_einsum", None)
    methods = "einslice,torch.einsum,torch_semiring_einsum"
    code = _bench(tmp_path, f"--sizes 16 --methods {methods}")
    out, err = capsys.readouterr()
    assert code == 0
    assert "torch.einsum is missing" in err
    assert "pip install -e '.[bench]'" in err
    assert "pip install -e '.[bench]'" in out  # noted under the tables too
    status = {r["method"]: r["status"] for r in _rows(tmp_path / "seed.csv")}
    assert status == {
        "einslice": "ok",
        "torch.einsum": "missing",
        "torch_semiring_einsum": "missing",
        "matmul": "ok",
    }


def test_explain_prints_the_plan(capsys):
    shapes = ["--shape", "i=256,j=256", "--shape", "k=256", "--shape", "l=256"]
    code = main(["explain", SEED, *shapes, "--memory-limit", "16MB"])
    out, err = capsys.readouterr()
    assert code == 0, err
    expected = einslice.plan(
        SEED, *[(256, 256)] * 6, memory_limit="16MB", dtype="float32"
    )
    assert out == str(expected) + "\n"


def test_explain_float64(capsys):
    code = main("explain ij,jk->ik --shape i=8,j=8,k=8 --dtype float64".split())
    out, _ = capsys.readouterr()
    assert code == 0
    expected = einslice.plan("ij,jk->ik", (8, 8), (8, 8), dtype="float64")
    assert out == str(expected) + "\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "--methods", "einslice,nope"], "unknown method 'nope'"),
        (["bench", "--methods", "einslice@lots"], "--methods 'einslice@lots'"),
        (["bench", "--sizes", "16,abc"], "'abc' is not a positive integer"),
        (["bench", "--sizes", "16,-4"], "'-4' is not a positive integer"),
        (["bench", "--max-seconds", "soon"], "'soon' is not a positive number"),
        (["bench", "--memory-limit", "lots"], "'lots' is not understood"),
        (["bench", "--suite", "--only", "nope"], "unknown formula 'nope'"),
        (["bench", "--suite", "--sizes", "16"], "--sizes and --formula"),
        (["explain", "ij->i", "--shape", "i4096"], "'i4096' is not INDEX=SIZE"),
        (["explain", "ij->i", "--shape", "i=big,j=2"], "size 'big' of index 'i'"),
        (["explain", "ij->i", "--shape", "i=4"], "no size for 'j'"),
        (["explain", "ij->i", "--shape", "i=4,j=4,q=2"], "'q', which"),
        (["explain", "ij->i", "--shape", "i=4,j=4", "--memory-limit", "1"],
         "give at least --memory-limit"),
        (["explain", "ij->i", "--shape", "i=4,j=4", "--memory-limit", "-1"],
         "--memory-limit: '-1' must be positive"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        ([], "choose a command"),
    ],
)  # fmt: skip
def test_bad_arguments_exit_2_with_one_line(argv, message, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith("einslice")
    assert message in err


def test_python_dash_m_einslice():
    done = subprocess.run(
        [sys.executable, "-m", "einslice", "explain", "ij,jk->ik", "--shape",
         "i=4,j=5,k=6"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "ij,jk->ik" in done.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "einslice", "bench", "--sizes", "x"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1


def test_uai_subcommand_is_registered(capsys):
    assert main(["uai", "--help"]) == 0
    assert "uai" in capsys.readouterr().out


def test_tuning_section_skips_other_cache_entries():
    from einslice._cli import _tuning_section

    plan = einslice.plan("ij,jk->ik", (4, 4), (4, 4))
    cache = {("cotengra", "f"): object(), ("tuning", "f"): (1.5, plan)}
    text = _tuning_section(cache)
    assert "| f | 1.50 | estimate (nothing measured) |" in text
