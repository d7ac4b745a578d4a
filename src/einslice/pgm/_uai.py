"""Readers for the UAI competition formats: models (``.uai``) and evidence (``.evid``).

Design constraints: pure Python + numpy, no JAX, so a model can be read and checked
anywhere. The format is whitespace-separated numbers; the preamble is line-based
(type, variable count, cardinalities, factor count, one scope per line) and the
tables are a free-form stream of ``count v_1 … v_count``. Every malformed input
raises `einslice.EinsliceError` naming the file, the line and what was expected,
because a wrong count silently shifts every number after it.

Format: https://www.cs.huji.ac.il/project/PASCAL/fileFormat.php (MARKOV and BAYES;
a BAYES table is P(last scope variable | the others), laid out like a MARKOV one,
the last variable varying fastest).
"""

from __future__ import annotations

import errno
import gzip
import math
import os
from dataclasses import dataclass

import numpy as np

from einslice import EinsliceError

from .._internal import EinsliceFileNotFoundError
from ._model import Factor, FactorGraph

__all__ = [
    "parse_evidence",
    "parse_query",
    "parse_uai",
    "read_evidence",
    "read_query",
    "read_uai",
]

_TYPES = ("MARKOV", "BAYES")


def read_uai(path: str | os.PathLike[str]) -> FactorGraph:
    """Reads a MARKOV or BAYES network in the UAI format (gzip-compressed or not).

    Args:
        path: the ``.uai`` file (``.uai.gz`` or any gzip stream is decompressed).

    Returns:
        The `FactorGraph`; variable ``i`` of the file is position ``i``.

    Raises:
        FileNotFoundError: no file at ``path`` (also an EinsliceError).
        EinsliceError: on a malformed file, naming the line and what was expected.

    Example:
        >>> g = read_uai("tests/data/chain3.uai")  # doctest: +SKIP
        >>> g.cardinalities  # doctest: +SKIP
        (2, 3, 2)
    """
    return parse_uai(_read_text(path), source=os.fspath(path))


def read_evidence(path: str | os.PathLike[str]) -> dict[int, int]:
    """Reads a UAI evidence file: ``N var state var state …`` (``0`` = none).

    The older form with a leading sample count of 1 (``1 N var state …``) is also
    accepted. An empty file means no evidence.

    Args:
        path: the ``.evid`` file (gzip accepted).

    Returns:
        A dict from variable position to observed state, to pass as ``evidence=``.

    Raises:
        FileNotFoundError: no file at ``path`` (also an EinsliceError).
        EinsliceError: on a malformed file, naming the line and what was expected.

    Example:
        >>> read_evidence("tests/data/chain3.uai.evid")  # doctest: +SKIP
        {1: 2}
    """
    return parse_evidence(_read_text(path), source=os.fspath(path))


def read_query(path: str | os.PathLike[str]) -> list[int]:
    """Reads a UAI query file (marginal MAP): ``q v_1 … v_q``.

    Args:
        path: the ``.query`` file (gzip accepted).

    Returns:
        The query variables' positions, in the file's order, to pass as
        ``query=`` to `marginal_map`.

    Raises:
        FileNotFoundError: no file at ``path`` (also an EinsliceError).
        EinsliceError: on a malformed file, naming the line and what was expected.

    Example:
        >>> read_query("Grids_18.uai.query")  # doctest: +SKIP
        [46, 1342, 1030, ...]
    """
    return parse_query(_read_text(path), source=os.fspath(path))


@dataclass(frozen=True, slots=True)
class _Token:
    text: str
    line: int


class _Cursor:
    """Tokens with their line numbers, consumed in order; errors name the line."""

    def __init__(self, tokens: list[_Token], source: str, last_line: int):
        self.tokens = tokens
        self.pos = 0
        self.source = source
        self.last_line = last_line

    def error(self, line: int, message: str) -> EinsliceError:
        return EinsliceError(f"{self.source}, line {line}: {message}")

    def at_end(self) -> bool:
        return self.pos >= len(self.tokens)

    def peek_line(self) -> int:
        return self.tokens[self.pos].line if not self.at_end() else self.last_line

    def int(self, what: str) -> tuple[int, int]:
        if self.at_end():
            raise self.error(
                self.last_line, f"the file ends here; expected {what} (an integer)."
            )
        token = self.tokens[self.pos]
        self.pos += 1
        try:
            return int(token.text), token.line
        except ValueError:
            raise self.error(
                token.line, f"expected {what} (an integer) but found {token.text!r}."
            ) from None


def parse_uai(text: str, source: str = "<string>") -> FactorGraph:
    r"""Parses the text of a UAI model file; see `read_uai`.

    Args:
        text: the file's contents.
        source: the name used in error messages.

    Returns:
        The `FactorGraph`.

    Raises:
        EinsliceError: on malformed input, naming the line and what was expected.

    Example:
        >>> g = parse_uai("MARKOV\n1\n2\n1\n1 0\n2 0.25 0.75\n")
        >>> g.cardinalities, g.factors[0].scope
        ((2,), (0,))
    """
    cur = _cursor(text, source)
    if cur.at_end():
        raise cur.error(1, f"the file is empty; expected a network type {_TYPES}.")
    _network_type(cur)
    cards, n_line, card_lines = _cardinalities(cur)
    n_factors, m_line = _factor_count(cur, len(cards), n_line, card_lines)
    scopes = [_scope(cur, i, len(cards), n_factors, m_line) for i in range(n_factors)]

    factors = []
    for i, scope in enumerate(scopes):
        table = _table(cur, i, scope, cards, n_factors, m_line)
        with np.errstate(divide="ignore"):
            log_table = np.log(table).reshape(tuple(cards[v] for v in scope))
        factors.append(Factor(scope, log_table))

    if not cur.at_end():
        token = cur.tokens[cur.pos]
        raise cur.error(
            token.line,
            f"unexpected {token.text!r} after the last table; the header (line "
            f"{m_line}) declares {n_factors} factors, so expected the end of the file.",
        )
    return FactorGraph(tuple(cards), tuple(factors))


def _cursor(text: str, source: str) -> _Cursor:
    """A cursor over the text's whitespace-separated tokens."""
    rows = [
        (n, line.split()) for n, line in enumerate(text.splitlines(), 1) if line.split()
    ]
    last_line = rows[-1][0] if rows else 1
    tokens = [_Token(t, n) for n, row in rows for t in row]
    return _Cursor(tokens, source, last_line)


def _network_type(cur: _Cursor) -> None:
    """Read the first token, the network type, and check it is a known one."""
    kind = cur.tokens[0]
    cur.pos = 1
    if kind.text.upper() not in _TYPES:
        raise cur.error(
            kind.line,
            f"unknown network type {kind.text!r}; expected one of {', '.join(_TYPES)}.",
        )


def _cardinalities(cur: _Cursor) -> tuple[list[int], int, list[int]]:
    """Read N and N cardinalities; also return N's line and each cardinality's."""
    n_vars, n_line = cur.int("the number of variables")
    if n_vars < 0:
        raise cur.error(n_line, f"the number of variables is {n_vars}; expected ≥ 0.")
    cards = [_card(cur, v, n_vars, n_line) for v in range(n_vars)]
    card_lines = [t.line for t in cur.tokens[cur.pos - n_vars : cur.pos]]
    return cards, n_line, card_lines


def _factor_count(
    cur: _Cursor, n_vars: int, n_line: int, card_lines: list[int]
) -> tuple[int, int]:
    """Read M, the number of factors, which must stand alone on its line."""
    n_factors, m_line = cur.int("the number of factors")
    if n_factors < 0:
        raise cur.error(m_line, f"the number of factors is {n_factors}; expected ≥ 0.")
    if card_lines and m_line == card_lines[-1]:
        raise cur.error(
            m_line,
            f"the line holds more than the {n_vars} cardinalities declared on line "
            f"{n_line}; expected N={n_vars} cardinalities, then the number of "
            "factors alone on the next line.",
        )
    if not cur.at_end() and cur.peek_line() == m_line:
        # Why: M shares its line with more numbers when N undercounts the
        # cardinalities (M was read from a scope line); point at the cardinalities.
        first = card_lines[0] if card_lines else m_line
        if len(set(card_lines)) > 1:
            raise cur.error(
                first,
                f"the line lists {card_lines.count(first)} cardinalities but line "
                f"{n_line} declares N={n_vars}; expected {n_vars} cardinalities, then "
                "the number of factors alone on the next line.",
            )
        raise cur.error(
            m_line,
            f"found {cur.tokens[cur.pos].text!r} after the number of factors "
            f"({n_factors}); expected it alone on its line.",
        )
    return n_factors, m_line


def _card(cur: _Cursor, v: int, n_vars: int, n_line: int) -> int:
    if cur.at_end():
        raise cur.error(
            cur.last_line,
            f"the file ends after {v} cardinalities; expected {n_vars} (line {n_line} "
            f"declares N={n_vars}).",
        )
    token = cur.tokens[cur.pos]
    cur.pos += 1
    try:
        card = int(token.text)
    except ValueError:
        card = 0
    if card < 1:
        raise cur.error(
            token.line,
            f"variable {v} has cardinality {token.text!r}; expected a positive "
            f"integer (line {n_line} declares N={n_vars} variables).",
        )
    return card


def _scope(
    cur: _Cursor, i: int, n_vars: int, n_factors: int, m_line: int
) -> tuple[int, ...]:
    if cur.at_end():
        raise cur.error(
            cur.last_line,
            f"the file ends before factor {i}'s scope; expected one scope line per "
            f"factor as line {m_line} declares.",
        )
    size, line = cur.int(f"the size of factor {i}'s scope")
    # Why: a scope is one line; a count that disagrees with the line misaligns all.
    end = cur.pos
    while end < len(cur.tokens) and cur.tokens[end].line == line:
        end += 1
    row = cur.tokens[cur.pos : end]
    if size < 0 or len(row) != size:
        listed = " ".join(t.text for t in row)
        raise cur.error(
            line,
            f"factor {i}'s scope declares {size} variables but the line lists "
            f"{len(row)} ({listed!r}); expected '{size}' followed by {size} variable "
            f"indices on one line (line {m_line} declares {n_factors} factors).",
        )
    cur.pos += size
    scope = []
    for t in row:
        try:
            v = int(t.text)
        except ValueError:
            v = -1
        if not 0 <= v < n_vars:
            raise cur.error(
                line,
                f"factor {i}'s scope names variable {t.text!r}; expected an index in "
                f"0..{n_vars - 1}.",
            )
        if v in scope:
            raise cur.error(
                line, f"factor {i}'s scope lists variable {v} twice; list it once."
            )
        scope.append(v)
    return tuple(scope)


def _table(
    cur: _Cursor,
    i: int,
    scope: tuple[int, ...],
    cards: list[int],
    n_factors: int,
    m_line: int,
) -> np.ndarray:
    if cur.at_end():
        raise cur.error(
            cur.last_line,
            f"the file ends before factor {i}'s table; expected {n_factors} tables "
            f"(line {m_line} declares {n_factors} factors) but found {i}.",
        )
    count, line = cur.int(f"the number of entries in factor {i}'s table")
    shape = tuple(cards[v] for v in scope)
    need = math.prod(shape)
    if count != need:
        raise cur.error(
            line,
            f"factor {i}'s table declares {count} entries but its scope {scope} with "
            f"cardinalities {shape} needs {need}.",
        )
    chunk = cur.tokens[cur.pos : cur.pos + count]
    if len(chunk) < count:
        raise cur.error(
            cur.last_line,
            f"the file ends inside factor {i}'s table (begun on line {line}): "
            f"found {len(chunk)} of its {count} entries; expected "
            f"{count - len(chunk)} more.",
        )
    cur.pos += count
    try:
        values = np.array([t.text for t in chunk], dtype=np.float64)
    except ValueError:
        values = np.full(count, np.nan)
        for j, t in enumerate(chunk):
            try:
                values[j] = float(t.text)
            except ValueError:
                raise cur.error(
                    t.line,
                    f"factor {i}'s table entry {j} is {t.text!r}; expected a number.",
                ) from None
    bad = np.flatnonzero(~np.isfinite(values) | (values < 0))
    if bad.size:
        j = int(bad[0])
        raise cur.error(
            chunk[j].line,
            f"factor {i}'s table entry {j} is {chunk[j].text!r}; expected a finite, "
            "non-negative potential.",
        )
    return values


def parse_evidence(text: str, source: str = "<string>") -> dict[int, int]:
    """Parses the text of a UAI evidence file; see `read_evidence`.

    Args:
        text: the file's contents.
        source: the name used in error messages.

    Returns:
        A dict from variable position to observed state.

    Raises:
        EinsliceError: on malformed input, naming the line and what was expected.

    Example:
        >>> parse_evidence("2 0 1 3 0")
        {0: 1, 3: 0}
    """
    cur = _cursor(text, source)
    if cur.at_end():
        return {}
    return _observations(cur, _observed_count(cur))


def parse_query(text: str, source: str = "<string>") -> list[int]:
    """Parses the text of a UAI query file; see `read_query`.

    Args:
        text: the file's contents.
        source: the name used in error messages.

    Returns:
        The query variables' positions.

    Raises:
        EinsliceError: on malformed input, naming the line and what was expected.

    Example:
        >>> parse_query("4 0 4 8 17")
        [0, 4, 8, 17]
    """
    cur = _cursor(text, source)
    if cur.at_end():
        raise cur.error(1, "the file is empty; expected 'q v_1 … v_q'.")
    count, line = cur.int("the number of query variables")
    if count < 0:
        raise cur.error(line, f"{count} query variables; expected ≥ 0.")
    if len(cur.tokens) != 1 + count:
        raise cur.error(
            line,
            f"the query declares {count} variables, so expected {1 + count} "
            f"numbers in all ('q v_1 … v_q') but the file holds {len(cur.tokens)}.",
        )
    query = []
    for _ in range(count):
        var, vline = cur.int("a variable index")
        if var < 0:
            raise cur.error(vline, f"variable index {var}; expected ≥ 0.")
        if var in query:
            raise cur.error(vline, f"variable {var} is listed twice; list it once.")
        query.append(var)
    return query


def _observed_count(cur: _Cursor) -> int:
    """Read the number of observed variables, past an older file's sample count."""
    tokens = cur.tokens
    first, line = cur.int("the number of observed variables")
    if first < 0:
        raise cur.error(line, f"{first} observed variables; expected ≥ 0.")
    if len(tokens) != 1 + 2 * first:
        # Why: older files start with a sample count; only one sample is meaningful.
        older = first == 1 and len(tokens) >= 2
        if older:
            try:
                older = len(tokens) == 2 + 2 * int(tokens[1].text)
            except ValueError:
                older = False
        if not older:
            raise cur.error(
                line,
                f"the evidence declares {first} observed variables, so expected "
                f"{1 + 2 * first} numbers in all ('N var state var state …') but the "
                f"file holds {len(tokens)}.",
            )
        first, line = cur.int("the number of observed variables")
    return first


def _observations(cur: _Cursor, count: int) -> dict[int, int]:
    """Read ``count`` (variable, state) pairs."""
    evidence: dict[int, int] = {}
    for _ in range(count):
        var, vline = cur.int("a variable index")
        state, sline = cur.int(f"the state of variable {var}")
        if var < 0:
            raise cur.error(vline, f"variable index {var}; expected ≥ 0.")
        if state < 0:
            raise cur.error(sline, f"variable {var} has state {state}; expected ≥ 0.")
        if evidence.get(var, state) != state:
            raise cur.error(
                vline,
                f"variable {var} is observed twice, as {evidence[var]} and {state}; "
                "observe it once.",
            )
        evidence[var] = state
    return evidence


def _read_text(path: str | os.PathLike[str]) -> str:
    # Why: competition files ship gzipped as often as not; sniff the magic bytes.
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise EinsliceFileNotFoundError(
            errno.ENOENT, "no such file; check the path", os.fspath(path)
        ) from None
    except OSError as e:
        raise EinsliceError(f"cannot read {os.fspath(path)!r}: {e.strerror}.") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise EinsliceError(
                f"{os.fspath(path)}: looks gzip-compressed but cannot be "
                f"decompressed ({e})."
            ) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise EinsliceError(
            f"{os.fspath(path)}: byte {e.start} is not text; expected a UAI file of "
            "whitespace-separated numbers."
        ) from None
