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
