"""Subscripts (string or interleaved) plus operand shapes → a validated Equation."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from opt_einsum import get_symbol

from .._errors import EinsliceError
from ._types import Equation

Label = (
    Hashable  # a character, a label of the interleaved form (an int...), or Ellipsis
)
Spec = tuple[tuple[tuple[Label, ...], ...], tuple[Label, ...] | None]

# The characters that write the separators: ',' between operands, '->' before
# the output and '...' for broadcast axes. Every other character is an index
# (``jnp.einsum`` takes them all: opt_einsum's own symbols run from 'a' to
# 'Z' and then through Unicode, 'À', ..., '×', ...), and of the whitespace
# only ' ' is dropped, as opt_einsum drops it: a tab is an index there too.
_SEPARATORS = frozenset(",->.")
_SPACE = " "


def parse_subscripts(subscripts: str, n_operands: int) -> Spec:
    """Split ``'ij,jk->ik'`` into per-operand label tuples and the output.

    Spaces are dropped; ``...`` becomes ``Ellipsis``; every character other
    than ``,``, ``-``, ``>`` and ``.`` is an index, as in ``jnp.einsum``; the
    output is ``None`` when the string has no ``->`` (implicit mode).

    Example:
        >>> parse_subscripts("ij,jk->ik", 2)
        ((('i', 'j'), ('j', 'k')), ('i', 'k'))
        >>> parse_subscripts("a×,×#", 2)
        ((('a', '×'), ('×', '#')), None)
    """
    text = subscripts.replace(_SPACE, "")
    if text.count("->") > 1:
        raise EinsliceError(
            f"subscripts {subscripts!r} contain '->' more than once; write one "
            "output, e.g. 'ij,jk->ik'."
        )
    lhs, arrow, rhs = text.partition("->")
    terms = tuple(_parse_term(t, subscripts) for t in lhs.split(","))
    if len(terms) != n_operands:
        raise EinsliceError(
            f"subscripts {subscripts!r} name {len(terms)} operand(s) but "
            f"{n_operands} operand(s) were given; pass one array per "
            "comma-separated term"
            + (
                " (',' separates operands: it cannot be an index)."
                if len(terms) > n_operands
                else "."
            )
        )
    output = _parse_term(rhs, subscripts) if arrow else None
    return terms, output


def _parse_term(term: str, subscripts: str) -> tuple[Label, ...]:
    labels: list[Label] = []
    pos = 0
    while pos < len(term):
        if term.startswith("...", pos):
            labels.append(Ellipsis)
            pos += 3
            continue
        char = term[pos]
        if char in _SEPARATORS:
            raise EinsliceError(
                f"subscripts {subscripts!r} have a stray {char!r} in term "
                f"{term!r}; ',', '-', '>' and '.' cannot be indices (',' "
                "separates operands, '->' starts the output and '...' stands "
                "for broadcast axes); any other character can."
            )
        labels.append(char)
        pos += 1
    return tuple(labels)


def parse_interleaved(args: Sequence[object]) -> tuple[list[object], Spec]:
    """Split ``(op0, sublist0, op1, sublist1, ..., [output])`` into operands, spec.

    Labels are what ``jnp.einsum`` takes there: ``Ellipsis`` and any hashable
    values (ints, usually; strings or floats too). Without an output sublist
    the output is resolved here, in ``jnp.einsum``'s order
    (`implicit_interleaved_output`), which needs labels that sort together
    (``jnp.einsum`` asks that of an explicit output too; einslice does not).

    Example:
        >>> ops, spec = parse_interleaved(["A", [0, 1], "B", [1, 2], [0, 2]])
        >>> ops, spec
        (['A', 'B'], (((0, 1), (1, 2)), (0, 2)))
        >>> parse_interleaved(["A", ["x", "y"], "B", ["y", "z"]])[1][1]
        ('x', 'z')
    """
    items = list(args)
    output = None
    if len(items) % 2 == 1:
        output = _sublist(items.pop(), "the output sublist")
    if not items:
        raise EinsliceError(
            "einsum needs at least one operand; got only "
            f"{len(args)} argument(s) in the interleaved form."
        )
    operands = items[0::2]
    terms = tuple(
        _sublist(s, f"the sublist of operand {k}") for k, s in enumerate(items[1::2])
    )
    if output is None:
        output = implicit_interleaved_output(terms)
    return operands, (terms, output)


def _sublist(sublist: object, what: str) -> tuple[Label, ...]:
    if isinstance(sublist, str) or not isinstance(sublist, Sequence):
        raise EinsliceError(
            f"{what} must be a list of labels (ints, or Ellipsis), got {sublist!r}; "
            "the interleaved form is einsum(op0, [0, 1], op1, [1, 2], [0, 2])."
        )
    labels: list[Label] = []
    for label in sublist:
        try:
            hash(label)
        except TypeError:
            raise EinsliceError(
                f"{what} has label {label!r}, which is not hashable; labels of "
                "the interleaved form are ints (or other hashable values that "
                "sort together) or Ellipsis."
            ) from None
        labels.append(label)
    return tuple(labels)


def _ranks(terms: tuple[tuple[Label, ...], ...]) -> dict[Label, int]:
    """Each label's rank among the operands' labels in sorted order.

    ``jnp.einsum`` (opt_einsum's ``convert_interleaved_input``) sorts them to
    give each a symbol; labels that do not sort together are refused.
    """
    distinct = {label for term in terms for label in term if label is not Ellipsis}
    try:
        ordered = sorted(distinct)  # pyright: ignore[reportArgumentType, reportCallIssue]
    except TypeError:
        shown = ", ".join(sorted({repr(x) for x in distinct}))
        raise EinsliceError(
            f"the interleaved form's labels {{{shown}}} do not sort together "
            "(jnp.einsum orders them to name its indices); use labels of one "
            "kind, e.g. ints."
        ) from None
    return {label: rank for rank, label in enumerate(ordered)}


def implicit_interleaved_output(
    terms: tuple[tuple[Label, ...], ...],
) -> tuple[Label, ...]:
    """The output of the interleaved form without one, as ``jnp.einsum`` has it.

    ``...`` first when an operand has it, then the labels used once, in the
    order of the symbols opt_einsum gives them: the label of rank ``r`` is
    ``get_symbol(r)`` ('a'..'z', 'A'..'Z', then Unicode), and the implicit
    output sorts those characters, so ranks 26 to 51 come before ranks 0 to 25.

    Example:
        >>> implicit_interleaved_output(((0, 1), (1, 2)))
        (0, 2)
        >>> implicit_interleaved_output((tuple(range(28)),))[:4]  # 'A', 'B', 'a', 'b'
        (26, 27, 0, 1)
    """
    ranks = _ranks(terms)
    counts: dict[Label, int] = {}
    for term in terms:
        for label in term:
            if label is not Ellipsis:
                counts[label] = counts.get(label, 0) + 1
    singles = sorted(
        (label for label, count in counts.items() if count == 1),
        key=lambda label: get_symbol(ranks[label]),
    )
    ellipsis = any(label is Ellipsis for term in terms for label in term)
    broadcast: tuple[Label, ...] = (Ellipsis,) if ellipsis else ()
    return (*broadcast, *singles)


@lru_cache(maxsize=4096)
def build_equation(spec: Spec, shapes: tuple[tuple[int, ...], ...]) -> Equation:
    """Check a spec against operand shapes and number its indices.

    Example:
        >>> spec = ((("i", "j"), ("j", "k")), ("i", "k"))
        >>> eq = build_equation(spec, ((2, 3), (3, 4)))
        >>> eq.terms, eq.output, eq.sizes
        (((0, 1), (1, 2)), (0, 2), (2, 3, 4))
    """
    in_terms, out_term = spec
    n_ellipsis = _ellipsis_rank(in_terms, shapes)
    ellipsis_labels = [_Broadcast(d) for d in range(n_ellipsis)]
    expanded = _expand_ellipses(in_terms, shapes, ellipsis_labels)
    if out_term is None:
        output = _implicit_output(expanded, ellipsis_labels)
    else:
        output = _explicit_output(out_term, expanded, ellipsis_labels)

    order: dict[Label, int] = {}
    for row in [*expanded, output]:
        for label in row:
            order.setdefault(label, len(order))

    size_of = _index_sizes(in_terms, expanded, shapes)
    terms, squeezed = _number_terms(expanded, shapes, order, size_of)
    labels = sorted(order, key=order.__getitem__)
    return Equation(
        terms=terms,
        output=tuple(order[label] for label in output),
        sizes=tuple(size_of[label][0] for label in labels),
        names=tuple(_name(label) for label in labels),
        squeezed=squeezed,
        shapes=shapes,
    )


def _ellipsis_rank(
    in_terms: tuple[tuple[Label, ...], ...], shapes: tuple[tuple[int, ...], ...]
) -> int:
    """Check each term's rank against its operand; return the widest '...'."""
    n_ellipsis = 0
    for k, (term, shape) in enumerate(zip(in_terms, shapes, strict=True)):
        explicit = [label for label in term if label is not Ellipsis]
        if len(explicit) < len(term) - 1:
            raise EinsliceError(
                f"term {_show(term)!r} of operand {k} has '...' more than once; "
                "one '...' stands for all broadcast axes."
            )
        if Ellipsis in term:
            rank = len(shape) - len(explicit)
            if rank < 0:
                raise EinsliceError(
                    f"operand {k} has {len(shape)} axes (shape {shape}) but term "
                    f"{_show(term)!r} names {len(explicit)}; the term needs at most "
                    "as many indices as the operand has axes." + _blank_note(term)
                )
            n_ellipsis = max(n_ellipsis, rank)
        elif len(explicit) != len(shape):
            raise EinsliceError(
                f"operand {k} has {len(shape)} axes (shape {shape}) but term "
                f"{_show(term)!r} names {len(explicit)}; give one index per axis, "
                "or '...' for the rest." + _blank_note(term)
            )
    return n_ellipsis


def _blank_note(term: tuple[Label, ...]) -> str:
    """A hint for a term whose count went wrong on whitespace that is an index."""
    blanks = sorted({x for x in term if isinstance(x, str) and x.isspace()})
    if not blanks:
        return ""
    return (
        f" Whitespace other than ' ' is an index, as in jnp.einsum: this term's "
        f"{', '.join(map(repr, blanks))} too."
    )


def _expand_ellipses(
    in_terms: tuple[tuple[Label, ...], ...],
    shapes: tuple[tuple[int, ...], ...],
    ellipsis_labels: Sequence[Label],
) -> list[list[Label]]:
    """Replace each term's '...' by labels for its broadcast axes, right-aligned."""
    n_ellipsis = len(ellipsis_labels)
    expanded: list[list[Label]] = []
    for term, shape in zip(in_terms, shapes, strict=True):
        row: list[Label] = []
        for label in term:
            if label is Ellipsis:
                rank = len(shape) - (len(term) - 1)
                row.extend(ellipsis_labels[n_ellipsis - rank :])
            else:
                row.append(label)
        expanded.append(row)
    return expanded


def _implicit_output(
    expanded: list[list[Label]], ellipsis_labels: Sequence[Label]
) -> list[Label]:
    """The string form's implicit output: broadcast axes, then once-used indices.

    Those are sorted by their characters, as ``jnp.einsum`` sorts them (code
    point order: 'B' < 'a' < '×'). The interleaved form's own order is
    resolved when it is parsed (`implicit_interleaved_output`).
    """
    counts: dict[Label, int] = {}
    for row in expanded:
        for label in row:
            counts[label] = counts.get(label, 0) + 1
    singles = [
        lab for lab, c in counts.items() if c == 1 and not isinstance(lab, _Broadcast)
    ]
    return [*ellipsis_labels, *sorted(singles, key=_sort_key)]


def _explicit_output(
    out_term: tuple[Label, ...],
    expanded: list[list[Label]],
    ellipsis_labels: Sequence[Label],
) -> list[Label]:
    """Expand the output's '...' and check each index is an input's, used once."""
    if out_term.count(Ellipsis) > 1:
        raise EinsliceError(
            f"the output {_show(out_term)!r} has '...' more than once; one '...' "
            "stands for all broadcast axes."
        )
    output: list[Label] = []
    for label in out_term:
        if label is Ellipsis:
            output.extend(ellipsis_labels)
        else:
            output.append(label)
    seen_in = {label for row in expanded for label in row}
    for label in output:
        if label not in seen_in:
            raise EinsliceError(
                f"output index {_name(label)!r} appears in no operand's term; "
                "every output index must come from an input."
            )
    if len(set(output)) != len(output):
        twice = next(lab for lab in output if output.count(lab) > 1)
        raise EinsliceError(
            f"output index {_name(twice)!r} appears more than once in the "
            "output; each output index may appear once."
        )
    return output


def _index_sizes(
    in_terms: tuple[tuple[Label, ...], ...],
    expanded: list[list[Label]],
    shapes: tuple[tuple[int, ...], ...],
) -> dict[Label, tuple[int, int, int]]:
    """Each label's size (size 1 broadcasts) and the first operand, axis giving it."""
    size_of: dict[Label, tuple[int, int, int]] = {}  # label -> (size, operand, axis)
    for k, (row, shape) in enumerate(zip(expanded, shapes, strict=True)):
        for axis, (label, size) in enumerate(zip(row, shape, strict=True)):
            if label in row[:axis] and shape[row.index(label)] != size:
                raise EinsliceError(
                    f"index {_name(label)!r} is repeated in operand {k} (term "
                    f"{_show(in_terms[k])!r}) with sizes {shape[row.index(label)]} "
                    f"and {size}; a repeated index takes a diagonal, so its axes "
                    "must have equal sizes."
                )
            if label not in size_of:
                size_of[label] = (size, k, axis)
                continue
            known, other, _ = size_of[label]
            if size in (known, 1):
                continue
            if known == 1:
                size_of[label] = (size, k, axis)
                continue
            raise EinsliceError(
                f"index {_name(label)!r} has size {known} in operand {other} "
                f"(term {_show(in_terms[other])!r}) but {size} in operand {k} "
                f"(term {_show(in_terms[k])!r}); every occurrence of an index "
                "must have the same size (or size 1, to broadcast)."
            )
    return size_of


def _number_terms(
    expanded: list[list[Label]],
    shapes: tuple[tuple[int, ...], ...],
    order: dict[Label, int],
    size_of: dict[Label, tuple[int, int, int]],
) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
    """Number each operand's indices, leaving out the size-1 axes that broadcast."""
    terms, squeezed = [], []
    for row, shape in zip(expanded, shapes, strict=True):
        keep, drop = [], []
        for axis, (label, size) in enumerate(zip(row, shape, strict=True)):
            if size == 1 and size_of[label][0] != 1:
                drop.append(axis)
            else:
                keep.append(order[label])
        terms.append(tuple(keep))
        squeezed.append(tuple(drop))
    return tuple(terms), tuple(squeezed)


def _sort_key(label: Label) -> tuple[int, str | int]:
    return (0, label) if isinstance(label, int) else (1, str(label))


@dataclass(frozen=True)
class _Broadcast:
    """The label of the ``axis``-th broadcast axis that ``...`` stands for.

    A class of its own, so that no label of the interleaved form (a tuple,
    say) can be taken for it.
    """

    axis: int


def _name(label: Label) -> str:
    if isinstance(label, _Broadcast):
        return f"…{label.axis}"
    return str(label)


def _show(term: tuple[Label, ...]) -> str:
    parts = ["..." if lab is Ellipsis else _name(lab) for lab in term]
    if all(len(p) == 1 or p == "..." for p in parts):
        return "".join(parts)
    return "[" + ", ".join(parts) + "]"
