"""Benchmarks behind ``einslice bench``: the seed's table, the suite, the peers.

Private modules; the command line (``einslice._cli``) and ``benchmarks/`` use them:

- ``_seed``: the seed blog post's ``vmap_einsum`` and ``scan_einsum``.
- ``_suite``: :class:`Formula`, the seed sweep and the ~15-formula suite.
- ``_methods``: einslice and its peers, each imported lazily.
- ``_measure``: matmul throughput, device memory, timing, peak memory.
- ``_run``: every method on every formula, guarded (OOM, time) and checked.
- ``_report``: Markdown/terminal tables, CSV, plots.
"""
