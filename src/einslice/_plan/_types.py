"""Frozen, hashable descriptions of an equation and of a plan to contract it.

Being tuples of ints, these are valid static arguments of ``jax.jit``: the plan
is data, and execution is a plain walk over it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields, replace
from math import prod
from typing import Any, Protocol, TypeVar

from ._profile import Profile
from ._semiring import Semiring, semiring_named

# What runs a plan: registered by einslice._exec._run when it is imported
# (einslice/__init__.py imports it, and importing any einslice module runs
# that first), so that planning never imports the executors: the flow goes
# one way, plan -> run (tests/plan/test_no_jax.py checks the import graph).
_runner: Callable[..., Any] | None = None


def register_runner(run: Callable[..., Any]) -> None:
    """Make ``run(plan, operands, precision=, preferred_element_type=)`` run plans."""
    global _runner
    _runner = run


T = TypeVar("T")
# One step's contraction: (step, left, left term, right, right term) -> result.
Contract = Callable[["Step", T, tuple[int, ...], T, tuple[int, ...]], T]


@dataclass(frozen=True, slots=True)
class Equation:
    """A parsed einsum: one term of index ids per operand, and the output.

    Indices are small ints; ``names`` gives how each is shown to people.
    ``squeezed`` lists, per operand, the size-1 axes that broadcast against a
    larger size elsewhere: they are dropped before contraction, and ``terms``
    describes the operands after that drop (repeated indices kept).
    """

    terms: tuple[tuple[int, ...], ...]
    output: tuple[int, ...]
    sizes: tuple[int, ...]
    names: tuple[str, ...]
    squeezed: tuple[tuple[int, ...], ...]
    shapes: tuple[tuple[int, ...], ...]

    def term_text(self, term: tuple[int, ...]) -> str:
        r"""Show a term as people wrote it, e.g. ``'ij'``.

        A name of one printable character stands as it is (``'a×#'``); any
        other in brackets, escaped when it does not print (``'[12][\t]'``).
        """
        return "".join(_name_text(self.names[i]) for i in term)

    def index_name(self, index: int) -> str:
        r"""Index ``index``'s name, escaped where it does not print (``'\t'``)."""
        name = self.names[index]
        return name if name.isprintable() else repr(name)[1:-1]

    def text(self) -> str:
        """The equation as a string, e.g. ``'ij,jk->ik'``."""
        inputs = ",".join(self.term_text(t) for t in self.terms)
        return f"{inputs}->{self.term_text(self.output)}"

    def brief(self) -> str:
        """The equation quoted for a message, cut when long (see `brief`)."""
        return brief(self.text(), len(self.terms))


def _name_text(name: str) -> str:
    """An index's name as `Equation.term_text` shows it."""
    if len(name) == 1 and name.isprintable():
        return name
    return f"[{name if name.isprintable() else repr(name)[1:-1]}]"


# Messages quote at most this many characters of an equation.
BRIEF_CHARS = 200


def brief(text: str, operands: int, limit: int = BRIEF_CHARS) -> str:
    """``text`` quoted; cut after ``limit`` characters, with the operand count.

    A graphical model's equation runs to kilobytes: a message names its size.

    Example:
        >>> print(brief("ij,jk->ik", 2))
        'ij,jk->ik'
        >>> print(brief("i," * 150 + "i->", 151, limit=8))
        'i,i,i,i,'... (151 operands, 303 characters)
    """
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({operands} operands, {len(text)} characters)"


@dataclass(frozen=True, slots=True)
class Step:
    """One pairwise contraction: two nodes in, one node out.

    Nodes ``0..n_operands-1`` are the prepared operands; step ``s`` makes node
    ``n_operands + s``. ``result`` lists the result's indices in the order
    ``lax.dot_general`` yields them (batch, left free, right free).
    """

    left: int
    right: int
    result: tuple[int, ...]
    contracted: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Cost:
    """What a plan costs: total FLOPs, predicted peak temporary bytes, est. time."""

    flops: int
    peak_bytes: int
    time: float


@dataclass(frozen=True, slots=True)
class Derivative:
    """A plan's derivative pass: its chunks, its cost and the gradient limit.

    ``chunks`` maps each index the derivative slices to its chunk size;
    ``cost`` is that pass's (its peak with the operands' promotion copies
    and their tangents); ``gradient_limit`` the smallest memory limit under
    which derivatives fit (re-planned at that limit, so retrying with it
    succeeds), the plan's memory limit when they fit already.
    """

    chunks: tuple[tuple[int, int], ...]
    cost: Cost
    gradient_limit: int

    def resolve(self) -> Derivative:
        """Itself (a `DerivativeSource` found already)."""
        return self


class DerivativeSource(Protocol):
    """A plan's `Derivative`, or what finds it on first use.

    A plan made without ``gradient=True`` holds the second kind
    (``_planner.Deferred``: its request, body and the forward's chunks;
    hashable and compared by them), so that planning the value alone skips
    the derivative's slicing search; ``resolve`` runs it once (cached), when
    a derivative is traced or the plan described.
    """

    def resolve(self) -> Derivative: ...


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a plan runs: an input to planning, copied into the Plan it makes.

    ``devices`` split the summed chunk grid along ``mesh_axis`` of ``mesh``
    (a ``jax.sharding.Mesh``, opaque here so that planning never imports
    JAX; None: the first ``devices`` devices). ``sharded``: the index along
    which the operands arrive split over those devices and are used in place
    (``_exec/_shard.in_place``), or None.

    Example:
        >>> Placement(devices=4).spread, Placement(devices=4, sharded=0).spread
        (4, 1)
    """

    devices: int = 1
    mesh: object = None
    mesh_axis: str | None = None
    sharded: int | None = None

    @property
    def spread(self) -> int:
        """How many devices the planner spreads chunks over.

        Operands used in place are contracted whole by each device on its
        own shard: no chunks to spread.
        """
        return self.devices if self.sharded is None else 1

    @property
    def single(self) -> bool:
        """One device, no mesh: what tuning and the plain lowering need."""
        return self == ONE_DEVICE


ONE_DEVICE = Placement()


@dataclass(frozen=True, slots=True)
class Choice:
    """How a plan was picked among ranked candidates, and what each measured.

    ``how`` is "estimate" (the time model's first), "measure" (the fastest
    compiled and timed on the device) or "wisdom" (remembered from an earlier
    measurement). ``seconds[k]`` is candidate k's measured time, None when
    not measured; ``notes[k]`` says why one was rejected ("" otherwise).
    """

    how: str
    chosen: int
    labels: tuple[str, ...]
    seconds: tuple[float | None, ...]
    notes: tuple[str, ...]
    tuning_seconds: float = 0.0


class Steps:
    """Pairwise steps over prepared operands: what the executors walk.

    The base of `Plan` and `HostWalk`; they hold ``prepared`` (each operand's
    indices after diagonals and private sums) and ``steps``.
    """

    # ``_hash``: `Plan.__hash__`'s cache (a slot, not a field: neither
    # compared, shown nor copied by ``dataclasses.replace``).
    __slots__ = ("_hash",)
    prepared: tuple[tuple[int, ...], ...]
    steps: tuple[Step, ...]

    def node_terms(self) -> tuple[tuple[int, ...], ...]:
        """Indices of every node: prepared operands, then each step's result."""
        return self.prepared + tuple(step.result for step in self.steps)

    def walk_steps(
        self, prepared: Iterable[T], contract: Contract[T]
    ) -> tuple[T, tuple[int, ...]]:
        """Run every step with ``contract``; the last node and its indices.

        The executors (JAX's and the host's numpy walk) differ only in how
        one step contracts: ``contract(step, left, left_term, right,
        right_term)``. Nodes are indexed as `node_terms` says. Each node is
        the side of one step only, and is let go once that step has run:
        the host walk's memory is then the nodes alive at once, not all of
        them (pass the prepared operands as an iterator, or a list no one
        else holds, for them to go too).

        Example:
            >>> import einslice
            >>> p = einslice.plan("ij,jk,kl->il", (2, 3), (3, 4), (4, 5))
            >>> def paren(step, left, lt, right, rt):
            ...     return f"({left}{right})"
            >>> p.walk_steps(["A", "B", "C"], paren)  # operand order: the layout's
            ('((BA)C)', (0, 3))
        """
        nodes: list[T | None] = list(prepared)
        del prepared
        terms = self.node_terms()
        for step in self.steps:
            left, right = nodes[step.left], nodes[step.right]
            assert left is not None and right is not None  # Why: each used once
            nodes[step.left] = nodes[step.right] = None
            nodes.append(
                contract(step, left, terms[step.left], right, terms[step.right])
            )
            del left, right
        last = nodes[-1]
        assert last is not None  # Why: the root is no step's side
        return last, terms[len(nodes) - 1]


# weakref_slot: jax.jit(plan) keeps a weak reference to the function it wraps.
@dataclass(frozen=True, slots=True, weakref_slot=True)
class Plan(Steps):
    """How einslice contracts one equation: path, slices, chunk sizes and costs.

    ``chunks`` maps each sliced index to its chunk size (the forward pass);
    ``tangent_chunks`` does the same for the derivative pass, which keeps more
    alive per chunk (``derivative``: found on first use when the plan was
    made without ``gradient=True``). ``prepared`` gives each operand's
    indices after taking diagonals and summing indices no other operand or
    the output has.

    Example:
        >>> import einslice
        >>> p = einslice.plan("ij,jk->ik", (4, 5), (5, 6))
        >>> p.path, p.sliced
        (((0, 1),), {})
    """

    equation: Equation
    semiring: str
    itemsize: int
    prepared: tuple[tuple[int, ...], ...]
    steps: tuple[Step, ...]
    path: tuple[tuple[int, ...], ...]
    chunks: tuple[tuple[int, int], ...]
    # The derivative pass (`Derivative`; `tangent_chunks`, `tangent_cost`
    # and `gradient_limit` read it): found on first use for a plan made
    # without ``gradient=True`` (see `DerivativeSource`).
    derivative: DerivativeSource
    cost: Cost
    naive_flops: int
    memory_limit: int
    dtype: str = field(default="float32")
    # Many devices: the summed chunk grid is split across ``devices`` along
    # ``mesh_axis`` of ``mesh`` (a ``jax.sharding.Mesh``, kept opaque here so
    # planning never imports JAX; None means the first ``devices`` devices).
    devices: int = 1
    mesh: object = None
    mesh_axis: str | None = None
    # The index along which the operands arrive split across the mesh axis
    # and are used in place: each device contracts its own shard of it
    # (``_slice.shard_plan``) instead of its share of the chunk grid; a summed
    # index is then all-reduced, an output index gives each device its block.
    sharded: int | None = None
    # How many final steps run once after the chunk loop instead of in every
    # chunk: products with operands that hold output indices only (the seed's
    # ``ij``). The loop accumulates the rest; the derivative then needs no
    # recomputed chunk result to give those operands' gradients.
    hoisted: int = 0
    # The executor that runs it (``_plan/_executors.py``): "einslice", the
    # plan's own steps (and scan); "xla", one jnp.einsum call along the same
    # path (a tuning candidate for unsliced "sum" plans); "host", numpy.
    executor: str = "einslice"
    # How tuning chose this plan; not part of equality (same program). The
    # one field set after the planner made the plan (``_tune.with_choice``
    # says why); every other field comes from its PlanRequest.
    choice: Choice | None = field(default=None, compare=False)
    # The ``precision=`` it was planned for (opaque here, like mesh): a call
    # that gives none runs with it. And the device profile its time was
    # estimated with (``Profile.for_precision``: the matmul rate of that
    # precision). Both from the request (``_request.PlanRequest``).
    precision: object = field(default=None, compare=False)
    profile: Profile | None = field(default=None, compare=False)

    @property
    def ring(self) -> Semiring:
        """The `Semiring` that ``semiring`` names."""
        return semiring_named(self.semiring)

    @property
    def tangent_chunks(self) -> tuple[tuple[int, int], ...]:
        """Sliced indices and their chunk sizes in the derivative pass."""
        return self.derivative.resolve().chunks

    @property
    def tangent_cost(self) -> Cost:
        """What the derivative pass costs (its predicted peak, FLOPs, time)."""
        return self.derivative.resolve().cost

    @property
    def gradient_limit(self) -> int:
        """The smallest memory_limit under which derivatives fit.

        Re-planned at that limit, so that retrying with it succeeds;
        ``memory_limit`` when they fit already.
        """
        return self.derivative.resolve().gradient_limit

    @property
    def sliced(self) -> dict[str, int]:
        """Sliced indices (by name) and their chunk sizes in the forward pass."""
        return {self.equation.names[i]: c for i, c in self.chunks}

    @property
    def flops(self) -> int:
        """FLOPs of the forward pass, slicing overhead included."""
        return self.cost.flops

    @property
    def peak_bytes(self) -> int:
        """Predicted peak temporary bytes of the forward pass."""
        return self.cost.peak_bytes

    @property
    def n_chunks(self) -> int:
        """How many chunks the forward pass loops over."""
        sizes = self.equation.sizes
        return prod(-(-sizes[i] // c) for i, c in self.chunks)

    @property
    def placement(self) -> Placement:
        """The devices this plan was made for (see `Placement`)."""
        return Placement(self.devices, self.mesh, self.mesh_axis, self.sharded)

    @property
    def stem(self) -> Plan:
        """What the chunk loop runs: this plan without its ``hoisted`` steps.

        Those final products with output-only operands follow the loop once.
        (A plan derived for execution, not a patch of this one.)

        Example:
            >>> import einslice
            >>> seed = "ij,ik,il,jk,jl,kl->ij"
            >>> p = einslice.plan(seed, *[(32, 32)] * 6, memory_limit="256kB")
            >>> p.hoisted, len(p.steps), len(p.stem.steps), p.stem.hoisted
            (1, 5, 4, 0)
        """
        if not self.hoisted:
            return self
        return replace(self, steps=self.steps[: -self.hoisted], hoisted=0)

    def __hash__(self) -> int:
        """The hash of the compared fields, computed once per plan.

        Every call of a plan hashes it twice (its runner's cache and
        ``jax.jit``'s static argument): 16 us each for a 99-step plan, a
        tenth of a 100-tensor tree's 1 ms call before it was cached. The
        fields are immutable, so the cache never goes stale.
        """
        try:
            return self._hash
        except AttributeError:
            value = hash(tuple(getattr(self, f.name) for f in _HASHED_FIELDS))
            object.__setattr__(self, "_hash", value)
            return value

    def __call__(self, *operands, precision=None, preferred_element_type=None):
        """Run the plan on operands of the planned shapes (jit/vmap/grad safe)."""
        if _runner is None:
            raise RuntimeError(
                "no executor is registered to run plans: import einslice (its "
                "package registers einslice._exec._run's) before calling a plan."
            )
        return _runner(
            self,
            operands,
            precision=self.precision if precision is None else precision,
            preferred_element_type=preferred_element_type,
        )

    def __str__(self) -> str:
        from ._info import describe

        return describe(self)

    def __repr__(self) -> str:
        return (
            f"Plan({self.equation.text()!r}, semiring={self.semiring!r}, "
            f"sliced={self.sliced}, flops={self.flops:.3g}, "
            f"peak_bytes={self.peak_bytes})"
        )


# What `Plan.__hash__` hashes: the fields its equality compares.
_HASHED_FIELDS = tuple(
    f for f in fields(Plan) if (f.compare if f.hash is None else f.hash)
)


@dataclass(frozen=True, slots=True)
class HostWalk(Steps):
    """A contraction to walk once on the host: steps, no layout, no costing.

    What ``_exec/_host.run_on_host`` needs of a `Plan`, for a value computed
    once in numpy, where making a plan (laying out each step for
    ``dot_general``, costing the forward and derivative passes) would cost
    more than the walk: one device, nothing sliced. ``peak_bytes`` bounds
    the walk's memory (``_walk.walk_peak_bytes``, and the operands).

    Example:
        >>> from einslice._plan._equation import build_equation, parse_subscripts
        >>> from einslice._plan._walk import host_walk
        >>> eq = build_equation(parse_subscripts("ij,jk->k", 2), ((2, 3), (3, 4)))
        >>> w = host_walk(eq, ((0, 1),), "sum", "float64")
        >>> w.prepared, w.steps[0].result, w.n_chunks
        (((1,), (1, 2)), (2,), 1)
    """

    equation: Equation
    prepared: tuple[tuple[int, ...], ...]
    steps: tuple[Step, ...]
    semiring: str
    dtype: str
    flops: int
    peak_bytes: int

    chunks = ()  # nothing sliced (a class constant, not a field)
    devices = 1
    sharded = None
    n_chunks = 1

    @property
    def ring(self) -> Semiring:
        """The `Semiring` that ``semiring`` names."""
        return semiring_named(self.semiring)
