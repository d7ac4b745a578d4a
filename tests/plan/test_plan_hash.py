"""A plan's hash is cached (every call hashes it) and agrees with its equality."""

from __future__ import annotations

import dataclasses

import einslice
from einslice._plan._types import Plan


def test_the_cached_hash_follows_the_compared_fields():
    p = einslice.plan("ij,jk,kl->il", (4, 5), (5, 6), (6, 7))
    compared = tuple(getattr(p, f.name) for f in dataclasses.fields(Plan) if f.compare)
    assert hash(p) == hash(compared) == hash(p)  # (the second from the cache)
    same = dataclasses.replace(p)
    assert same == p and hash(same) == hash(p)
    # choice is not compared: a tuned copy is the same program
    assert hash(dataclasses.replace(p, choice=None)) == hash(p)
    other = dataclasses.replace(p, executor="xla")
    assert other != p and hash(other) != hash(p)
    assert {p: 1}[same] == 1
