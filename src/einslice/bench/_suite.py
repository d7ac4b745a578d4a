"""The benchmark formulas: the seed's formula swept over n, and the named suite.

A :class:`Formula` holds explicit labels for every operand (one-character
strings, or ints where letters do not suffice), the size of every index, and
optionally the subscripts string a user would write (with ``...`` where the
formula broadcasts). Methods pick the form they accept: the string, the
interleaved form with int labels, or letters when there are at most 52 indices.
"""

from __future__ import annotations

import dataclasses
import math
import string
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ._seed import SEED_SUBSCRIPTS

Label = Hashable
LETTERS = string.ascii_lowercase + string.ascii_uppercase


@dataclass(frozen=True)
class Formula:
    """One einsum to benchmark, with named index sizes.

    Attributes:
        name: short identifier used on the command line (``--only``) and in tables.
        description: one line saying where the formula comes from.
        inputs: the labels of each operand, explicit (no ellipsis).
        output: the labels of the result.
        sizes: ``(label, size)`` pairs, one per index.
        subscripts: the string a user writes (may contain ``...``); ``None`` means
            the formula is passed in the interleaved form with int labels.
        flops: the FLOP count of the work from the sizes, if known in closed
            form; otherwise :func:`work_flops` asks opt_einsum for its best path.
    """

    name: str
    description: str
    inputs: tuple[tuple[Label, ...], ...]
    output: tuple[Label, ...]
    sizes: tuple[tuple[Label, int], ...]
    subscripts: str | None = None
    flops: Callable[[dict[Label, int]], float] | None = field(default=None, repr=False)
    n: int | None = field(default=None, compare=False)

    @property
    def size_dict(self) -> dict[Label, int]:
        """Index -> size."""
        return dict(self.sizes)

    @property
    def shapes(self) -> tuple[tuple[int, ...], ...]:
        """The shape of each operand."""
        sizes = self.size_dict
        return tuple(tuple(sizes[label] for label in term) for term in self.inputs)

    @property
    def out_shape(self) -> tuple[int, ...]:
        """The shape of the result."""
        sizes = self.size_dict
        return tuple(sizes[label] for label in self.output)

    @property
    def labels(self) -> tuple[Label, ...]:
        """Every distinct index, in order of first appearance."""
        seen: dict[Label, None] = {}
        for term in (*self.inputs, self.output):
            for label in term:
                seen.setdefault(label, None)
        return tuple(seen)

    @property
    def equation(self) -> str:
        """A readable form of the formula, for tables."""
        if self.subscripts is not None:
            return self.subscripts
        return f"{len(self.inputs)} operands, {len(self.labels)} indices (interleaved)"

    def letters(self) -> str | None:
        """The formula as an explicit letters-only subscripts string.

        Returns ``None`` when the formula has more than 52 indices, which is
        what peers limited to letters (torch) cannot express.
        """
        labels = self.labels
        if len(labels) > len(LETTERS):
            return None
        symbol = {label: LETTERS[k] for k, label in enumerate(labels)}
        ins = ",".join("".join(symbol[lab] for lab in term) for term in self.inputs)
        return ins + "->" + "".join(symbol[lab] for lab in self.output)

    def int_terms(self) -> tuple[list[tuple[int, ...]], tuple[int, ...]]:
        """Inputs and output relabelled with ints (for the interleaved form)."""
        number = {label: k for k, label in enumerate(self.labels)}
        ins = [tuple(number[lab] for lab in term) for term in self.inputs]
        return ins, tuple(number[lab] for lab in self.output)

    def einsum_args(self, operands: Sequence[object]) -> tuple[object, ...]:
        """Positional arguments for ``jnp.einsum``-style functions.

        The subscripts string when there is one, otherwise the interleaved form
        ``(op0, [0, 1], op1, [1, 2], ..., [out])``.
        """
        if self.subscripts is not None:
            return (self.subscripts, *operands)
        ins, out = self.int_terms()
        args: list[object] = []
        for op, term in zip(operands, ins, strict=True):
            args += [op, list(term)]
        args.append(list(out))
        return tuple(args)

    def naive_flops(self) -> float:
        """FLOPs of the nested loop over every index (one multiply per operand)."""
        return float(math.prod(self.size_dict.values())) * max(1, len(self.inputs))

    def scaled(self, factor: float) -> Formula:
        """The same formula with every index size multiplied by ``factor``.

        Sizes are rounded and kept at least 2; used by tests to run the suite tiny.
        """
        sizes = tuple((lab, max(2, round(s * factor))) for lab, s in self.sizes)
        return dataclasses.replace(self, sizes=sizes)


def work_flops(formula: Formula) -> float:
    """The FLOPs of the work, the same for every method (2 per multiply-add).

    The formula's closed form if it has one, else the cost of opt_einsum's
    ``'auto-hq'`` path: a good pairwise order, found in well under a second.
    """
    if formula.flops is not None:
        return formula.flops(formula.size_dict)
    import opt_einsum

    ins, out = formula.int_terms()
    eq = ",".join("".join(opt_einsum.get_symbol(i) for i in t) for t in ins)
    eq += "->" + "".join(opt_einsum.get_symbol(i) for i in out)
    _, info = opt_einsum.contract_path(
        eq, *formula.shapes, shapes=True, optimize="auto-hq"
    )
    return float(info.opt_cost)


def make_operands(formula: Formula, dtype: str = "float32", seed: int = 0):
    """Deterministic random operands, scaled so that results stay near 1.

    Entries are uniform on ``[0, 2 s)`` where ``s`` is the product over the
    operand's summed indices of ``size ** (-1 / occurrences)``: the expected
    value of every output entry is then 1, whatever the network, so large
    networks neither overflow nor underflow in float32.
    """
    rng = np.random.default_rng(seed)
    sizes = formula.size_dict
    count: dict[Label, int] = {}
    for term in formula.inputs:
        for label in set(term):
            count[label] = count.get(label, 0) + 1
    summed = set(sizes) - set(formula.output)
    operands = []
    for term, shape in zip(formula.inputs, formula.shapes, strict=True):
        scale = 1.0
        for label in set(term) & summed:
            scale *= sizes[label] ** (-1.0 / count[label])
        x = rng.random(shape, dtype=np.float32) * np.float32(2 * scale)
        operands.append(x.astype(dtype, copy=False))
    return operands


def from_subscripts(
    name: str,
    description: str,
    subscripts: str,
    sizes: dict[str, int],
    *,
    ellipsis: str = "",
    flops: Callable[[dict[Label, int]], float] | None = None,
) -> Formula:
    """Build a :class:`Formula` from a subscripts string and index sizes.

    Args:
        name: see :class:`Formula`.
        description: see :class:`Formula`.
        subscripts: explicit-output subscripts; ``...`` stands for ``ellipsis``.
        sizes: index -> size, including the letters in ``ellipsis``.
        ellipsis: the letters that ``...`` expands to (the broadcast dimensions).
        flops: closed-form FLOP count from the sizes, if known.

    Returns:
        The formula.
    """
    lhs, rhs = subscripts.replace("...", ellipsis).split("->")
    inputs = tuple(tuple(term) for term in lhs.split(","))
    labels = {label for term in inputs for label in term} | set(rhs)
    missing = labels - set(sizes)
    if missing:
        raise ValueError(f"formula {name!r}: no size for indices {sorted(missing)}")
    return Formula(
        name=name,
        description=description,
        inputs=inputs,
        output=tuple(rhs),
        sizes=tuple((label, sizes[label]) for label in sorted(labels)),
        subscripts=subscripts,
        flops=flops,
    )


def seed_formula(n: int, subscripts: str = SEED_SUBSCRIPTS) -> Formula:
    """A formula with every index of size ``n`` (the seed's table is one of these).

    The seed's formula gets its closed-form work of 2 n^4 FLOPs; an implicit
    output (no ``->``) is made explicit the way einsum does it.
    """
    if "->" not in subscripts:
        lhs = subscripts.replace(",", "")
        once = sorted(c for c in set(lhs) if lhs.count(c) == 1 and c != ".")
        subscripts = f"{subscripts}->{''.join(once)}"
    letters = set(subscripts.replace(",", "").replace("->", "").replace(".", ""))
    seed = subscripts == SEED_SUBSCRIPTS
    formula = from_subscripts(
        "seed-6" if seed else subscripts,
        "the seed's hard 6-input formula" if seed else "every index of size n",
        subscripts,
        dict.fromkeys(letters, n),
    )
    return dataclasses.replace(formula, n=n, flops=_seed_flops if seed else None)


def _seed_flops(sizes: dict[Label, int]) -> float:
    """The seed's count: 2 n^4 (the O(n^4) step is one multiply-add per term)."""
    return 2.0 * float(sizes["i"]) ** 4


def _random_network(
    name: str, n_tensors: int, extra_edges: int, bond: int, open_size: int, seed: int
) -> Formula:
    """A random connected network: a random spanning tree plus extra edges.

    Two tensors carry one open index each, so the result is a matrix. Labels are
    ints: the network has more indices than there are letters.
    """
    rng = np.random.default_rng(seed)
    edges: set[tuple[int, int]] = set()
    for i in range(1, n_tensors):
        edges.add((int(rng.integers(0, i)), i))
    while len(edges) < n_tensors - 1 + extra_edges:
        i, j = sorted(int(v) for v in rng.choice(n_tensors, 2, replace=False))
        edges.add((i, j))
    terms: list[list[int]] = [[] for _ in range(n_tensors)]
    for label, (i, j) in enumerate(sorted(edges)):
        terms[i].append(label)
        terms[j].append(label)
    sizes = dict.fromkeys(range(len(edges)), bond)
    open_a, open_b = len(edges), len(edges) + 1
    terms[0].append(open_a)
    terms[n_tensors - 1].append(open_b)
    sizes[open_a] = sizes[open_b] = open_size
    return Formula(
        name=name,
        description=f"random connected network: {n_tensors} tensors, "
        f"{len(edges)} bonds of size {bond}, two open indices of size {open_size}",
        inputs=tuple(tuple(t) for t in terms),
        output=(open_a, open_b),
        sizes=tuple(sizes.items()),
    )


def _lattice(name: str, rows: int, cols: int, bond: int) -> Formula:
    """A PEPS-like ``rows x cols`` grid of tensors, bonds between neighbours.

    Contracted to a scalar (a norm or a partition function of a 2D model).
    """
    horizontal = {
        (r, c): r * (cols - 1) + c for r in range(rows) for c in range(cols - 1)
    }
    base = rows * (cols - 1)
    vertical = {
        (r, c): base + r * cols + c for r in range(rows - 1) for c in range(cols)
    }
    terms = []
    for r in range(rows):
        for c in range(cols):
            term = []
            if c > 0:
                term.append(horizontal[r, c - 1])
            if c < cols - 1:
                term.append(horizontal[r, c])
            if r > 0:
                term.append(vertical[r - 1, c])
            if r < rows - 1:
                term.append(vertical[r, c])
            terms.append(tuple(term))
    n_bonds = len(horizontal) + len(vertical)
    return Formula(
        name=name,
        description=f"PEPS-like {rows}x{cols} lattice, bond {bond}, to a scalar",
        inputs=tuple(terms),
        output=(),
        sizes=tuple((label, bond) for label in range(n_bonds)),
    )


def _mps_inner(name: str, sites: int, bond: int, phys: int) -> Formula:
    """The inner product <psi|phi> of two open-boundary matrix product states.

    Ket bonds, bra bonds and physical indices get int labels.
    """
    ket = list(range(sites - 1))
    bra = list(range(sites - 1, 2 * (sites - 1)))
    phy = list(range(2 * (sites - 1), 2 * (sites - 1) + sites))
    terms = []
    for bonds in (ket, bra):
        for s in range(sites):
            term = []
            if s > 0:
                term.append(bonds[s - 1])
            term.append(phy[s])
            if s < sites - 1:
                term.append(bonds[s])
            terms.append(tuple(term))
    sizes = {label: bond for label in ket + bra} | dict.fromkeys(phy, phys)
    return Formula(
        name=name,
        description=f"MPS inner product: {sites} sites, bond {bond}, physical {phys}",
        inputs=tuple(terms),
        output=(),
        sizes=tuple(sizes.items()),
    )


def suite() -> list[Formula]:
    """The ~15 formulas real users run, sized for tens to hundreds of ms on a CPU."""
    s = from_subscripts
    return [
        s("seed-3", "the seed's 3-input formula: A * (B @ C.T)", "ij,ik,jk->ij",
          {"i": 1024, "j": 1024, "k": 1024}),
        s("seed-6", "the seed's hard 6-input formula (jnp.einsum asks for n^4)",
          SEED_SUBSCRIPTS, dict.fromkeys("ijkl", 320), flops=_seed_flops),
        s("jt-message", "junction-tree message, census-sized domains",
          "nkb,ndb,ndjkg->djkbg",
          {"n": 100, "k": 50, "b": 16, "d": 40, "j": 20, "g": 8}),
        s("jt-marginal", "clique potential times separator messages, marginalised",
          "abcd,ab,bc,cd,de->ae",
          {"a": 100, "b": 50, "c": 16, "d": 40, "e": 60}),
        s("mixture", "mixture of products projected on three variables",
          "ab,ac,ad->bcd", {"a": 2048, "b": 64, "c": 64, "d": 64}),
        _mps_inner("mps-inner", sites=16, bond=192, phys=2),
        _lattice("peps-5x5", rows=5, cols=5, bond=10),
        s("attention", "attention-shaped (linear, no softmax)",
          "bhqd,bhkd,bhkv->bhqv",
          {"b": 4, "h": 8, "q": 512, "k": 512, "d": 64, "v": 64}),
        s("bilinear", "batched bilinear layer", "bi,oij,bj->bo",
          {"b": 256, "o": 64, "i": 256, "j": 256}),
        s("matrix-chain", "matrix chain with uneven sizes", "ab,bc,cd,de,ef->af",
          {"a": 64, "b": 2048, "c": 64, "d": 2048, "e": 64, "f": 2048}),
        s("trace", "trace of a product of four matrices", "ab,bc,cd,da->",
          dict.fromkeys("abcd", 768)),
        s("tucker", "Tucker reconstruction from a core and three factors",
          "abc,ia,jb,kc->ijk",
          {"a": 32, "b": 32, "c": 32, "i": 128, "j": 128, "k": 128}),
        s("cp", "CP (canonical polyadic) reconstruction", "ia,ja,ka->ijk",
          {"a": 64, "i": 128, "j": 128, "k": 128}),
        s("batched-matmul", "broadcast batch dimensions through '...'",
          "...ij,...jk->...ik", {"y": 8, "z": 16, "i": 256, "j": 256, "k": 256},
          ellipsis="yz"),
        _random_network("random-network", n_tensors=36, extra_edges=24, bond=4,
                        open_size=8, seed=0),
    ]  # fmt: skip
