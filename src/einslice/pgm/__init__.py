"""Exact inference on discrete graphical models: log Z, marginals, MAP, MMAP, samples.

Example:
    >>> import numpy as np
    >>> from einslice.pgm import FactorGraph, log_partition
    >>> g = FactorGraph.from_cliques({("A", "B"): np.zeros((2, 2))}, log=True)
    >>> round(log_partition(g), 4)
    1.3863
"""

from ._infer import MapResult as MapResult
from ._infer import Marginals as Marginals
from ._infer import log_partition as log_partition
from ._infer import map_assignment as map_assignment
from ._infer import map_value as map_value
from ._infer import marginals as marginals
from ._mmap import MarginalMapResult as MarginalMapResult
from ._mmap import marginal_map as marginal_map
from ._model import Evidence as Evidence
from ._model import Factor as Factor
from ._model import FactorGraph as FactorGraph
from ._sample import sample as sample
from ._uai import parse_evidence as parse_evidence
from ._uai import parse_query as parse_query
from ._uai import parse_uai as parse_uai
from ._uai import read_evidence as read_evidence
from ._uai import read_query as read_query
from ._uai import read_uai as read_uai

__all__ = [
    "Evidence",
    "Factor",
    "FactorGraph",
    "MapResult",
    "MarginalMapResult",
    "Marginals",
    "log_partition",
    "map_assignment",
    "map_value",
    "marginal_map",
    "marginals",
    "parse_evidence",
    "parse_query",
    "parse_uai",
    "read_evidence",
    "read_query",
    "read_uai",
    "sample",
]
