"""``einslice uai`` through add_uai_parser / run_uai, on tiny hand-written models."""

from __future__ import annotations

import argparse
import io
import math
import re
from pathlib import Path

import numpy as np
import pytest

from einslice.pgm import marginals, read_uai
from einslice.pgm._cli import add_uai_parser, run_uai

DATA = Path(__file__).resolve().parents[1] / "data"


def run(argv: list[str]) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="einslice")
    add_uai_parser(parser.add_subparsers(dest="command"))
    out = io.StringIO()
    code = run_uai(parser.parse_args(["uai", *argv]), stdout=out)
    return code, out.getvalue()


def test_pr_prints_log10_z(capsys):
    model, evid = str(DATA / "chain3.uai"), str(DATA / "chain3.uai.evid")
    code, text = run([model, "--evid", evid, "--task", "PR", "--memory-limit", "1MB"])
    assert code == 0
    header, value = text.splitlines()
    assert header == "PR"
    # Z with x1 = 2: Σ_x0 φ0(x0) φ1(x0, 2) Σ_x2 φ2(2, x2) = (0.4·0.5 + 1.6·1.5)·5
    assert float(value) == pytest.approx(math.log10((0.4 * 0.5 + 1.6 * 1.5) * 5))
    progress = capsys.readouterr().err
    assert "planning" in progress
    assert "running" in progress
    assert "of 1 MB" in progress


def test_mar_prints_every_variable():
    code, text = run([str(DATA / "loop4.uai"), "--task", "mar", "--dtype", "float64"])
    assert code == 0
    header, line = text.splitlines()
    assert header == "MAR"
    fields = line.split()
    model = read_uai(DATA / "loop4.uai")
    expected = marginals(model, dtype="float64").variables
    assert int(fields[0]) == model.num_variables
    k = 1
    for v, card in enumerate(model.cardinalities):
        assert int(fields[k]) == card
        got = np.array([float(x) for x in fields[k + 1 : k + 1 + card]])
        np.testing.assert_allclose(got, expected[v], atol=1e-6)
        k += 1 + card
    assert k == len(fields)


def test_map_prints_an_assignment():
    code, text = run([str(DATA / "loop4.uai"), "--task", "MAP", "-q"])
    assert code == 0
    header, line = text.splitlines()
    assert header == "MAP"
    n, *states = (int(x) for x in line.split())
    model = read_uai(DATA / "loop4.uai")
    assert n == len(states) == model.num_variables
    assert model.log_score(states) == pytest.approx(math.log(9.0))


def test_zero_partition_prints_minus_infinity():
    code, text = run([str(DATA / "frustrated.uai"), "--task", "PR", "-q"])
    assert (code, text) == (0, "PR\n-inf\n")


def test_output_file(tmp_path):
    target = tmp_path / "chain3.PR"
    model = str(DATA / "chain3.uai")
    code, text = run([model, "--task", "PR", "-q", "-o", str(target)])
    assert (code, text) == (0, "")
    assert target.read_text().startswith("PR\n")


def test_errors_are_one_line_and_exit_1(capsys):
    code, text = run([str(DATA / "bad_count.uai"), "--task", "PR"])
    assert (code, text) == (1, "")
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.fullmatch(r"einslice uai: error: .*bad_count\.uai, line 11: .*", err)


def test_memory_limit_error_states_the_smallest_limit(capsys):
    code, _ = run([str(DATA / "loop4.uai"), "--task", "PR", "--memory-limit", "8B"])
    assert code == 1
    assert "smallest" in capsys.readouterr().err


def test_sample_writes_csv_and_npy(tmp_path):
    model = str(DATA / "sprinkler.uai")
    evid = str(DATA / "sprinkler.uai.evid")
    code, text = run(
        [model, "--evid", evid, "--task", "SAMPLE", "--samples", "50", "-q"]
    )
    assert code == 0
    header, *rows = text.splitlines()
    n_vars = read_uai(DATA / "sprinkler.uai").num_variables
    assert header == ",".join(str(v) for v in range(n_vars))
    assert len(rows) == 50 and all(len(r.split(",")) == n_vars for r in rows)
    observed = {}
    fields = (DATA / "sprinkler.uai.evid").read_text().split()
    for k in range(int(fields[0])):
        observed[int(fields[1 + 2 * k])] = int(fields[2 + 2 * k])
    for v, s in observed.items():
        assert {r.split(",")[v] for r in rows} == {str(s)}
    target = tmp_path / "samples.npy"
    argv = [model, "--task", "SAMPLE", "--samples", "50", "--seed", "3", "-q"]
    code, text = run([*argv, "--out", str(target)])
    assert (code, text) == (0, "")
    x = np.load(target)
    assert x.shape == (50, n_vars) and x.dtype == np.int32
    code, text = run([*argv, "-o", str(tmp_path / "samples.csv")])
    assert (code, text) == (0, "")
    csv = np.loadtxt(tmp_path / "samples.csv", delimiter=",", skiprows=1, dtype=int)
    np.testing.assert_array_equal(csv, x)  # the same seed, the same samples


def test_mmap_prints_query_variable_state_pairs(tmp_path):
    query = tmp_path / "loop4.uai.query"
    query.write_text("2 3 1\n")
    model = str(DATA / "loop4.uai")
    code, text = run([model, "--task", "MMAP", "--query", str(query), "-q"])
    assert code == 0
    header, line = text.splitlines()
    assert header == "MMAP"
    q, v1, s1, v2, s2 = (int(x) for x in line.split())
    assert (q, v1, v2) == (2, 3, 1)
    from einslice.pgm import marginal_map

    best = marginal_map(read_uai(DATA / "loop4.uai"), [3, 1])
    assert best.assignment == {3: s1, 1: s2}


def test_mmap_without_a_query_and_sample_without_a_count_are_errors(capsys):
    code, _ = run([str(DATA / "loop4.uai"), "--task", "MMAP"])
    assert code == 1
    assert "needs --query FILE" in capsys.readouterr().err
    code, _ = run([str(DATA / "loop4.uai"), "--task", "SAMPLE"])
    assert code == 1
    assert "needs --samples N" in capsys.readouterr().err


def test_the_help_lists_every_task():
    from einslice.pgm._cli import TASKS

    parser = argparse.ArgumentParser(prog="einslice")
    p = add_uai_parser(parser.add_subparsers(dest="command"))
    text = p.format_help()
    assert TASKS == ("PR", "MAR", "MAP", "MMAP", "SAMPLE")
    for task in TASKS:
        assert task in text


def test_mmap_says_how_many_query_variables_it_clamped(tmp_path, capsys):
    # a 5x5 grid, its border queried: one 2^12-entry table (32.8 kB) in 10 kB
    rng = np.random.default_rng(0)
    edges = [(r * 5 + c, r * 5 + c + 1) for r in range(5) for c in range(4)]
    edges += [(r * 5 + c, (r + 1) * 5 + c) for r in range(4) for c in range(5)]
    lines = ["MARKOV", "25", " ".join(["2"] * 25), str(len(edges))]
    lines += [f"2 {a} {b}" for a, b in edges]
    for _ in edges:
        lines += ["", "4", " ".join(f"{x:.6f}" for x in np.exp(rng.normal(size=4)))]
    model = tmp_path / "grid5.uai"
    model.write_text("\n".join(lines) + "\n")
    border = [v for v in range(25) if v // 5 in (0, 4) or v % 5 in (0, 4)]
    query = tmp_path / "grid5.uai.query"
    query.write_text(f"{len(border)} " + " ".join(map(str, border)) + "\n")
    argv = [str(model), "--task", "MMAP", "--query", str(query)]
    code, text = run([*argv, "--memory-limit", "10kB"])
    assert code == 0
    err = capsys.readouterr().err
    assert "16 query variables, 2 of them clamped to fit the limit (4 sub" in err
    code, whole = run(argv)
    assert code == 0 and whole == text
    assert "clamped" not in capsys.readouterr().err
