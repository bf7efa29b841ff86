"""Layout kernels a convolution library launches around its compute kernels, costed where
the kernel's own launch says which of the op's tensors it moves.

MIOpen transposes a convolution's tensors between NCHW and NHWC with
`batched_transpose_{A}x{B}_{type}` kernels: each thread block moves one A x B tile. The
tiles launched (blocks) x A x B is then the size of the tensor moved, rounded up to whole
tiles; among the op's recorded tensors, the one of that size (within the edge tiles' slack)
is the tensor. Such a kernel reads it and writes it once, in its dtype. The grid is taken
both ways (blocks, as CUDA reports it, or threads, as ROCm's tracer does), and the cost is
given only where the readings land on tensors of one size among the op's (its inputs, and a
forward convolution's output, whose size its cost computes): a kernel whose size
matches nothing keeps its reason ("which tensor this kernel moves is not recorded").
Checked by hand on the MI300X ResNet trace: 7,840 blocks of 32 x 32 = 8,028,160 elements =
the stem convolution's output [10, 64, 112, 112]; 128 blocks of 16 x 32 = 65,536 slots for
the filter [64, 64, 3, 3] (36,864: its 9 taps fill 9 of 16).
"""

from __future__ import annotations

import math
import re
from typing import Any

from tracekit.costs.cost import Cost
from tracekit.costs.dtypes import canonical, element_bytes

_TILE = re.compile(r"batched_transpose_(\d+)x(\d+)_")
EDGE_SLACK = 0.5  # the tensor fills at least this share of its tiles: a 3 x 3 filter's 9 taps fill 9 of a 16-wide tile
LAYOUT_TILES = "layout kernel: tiles launched x tile size = one of its op's tensors"


def layout_kernel_cost(name: str, grid: tuple[int, int, int], block: tuple[int, int, int], dims: Any, types: Any,
                       output: tuple[int, str] | None = None) -> Cost | None:
    """The cost of a tiled layout kernel from its launch and its op's tensors (its recorded
    inputs, and `output`: (elements, dtype) of a forward op's result, which the trace does not
    record as a tensor), or None."""
    m = _TILE.search(name[:512])
    if not m or not isinstance(dims, list) or not isinstance(types, list):
        return None
    if any(int(v) <= 0 for v in (*grid, *block)):
        return None  # a grid not recorded (-1) says nothing of the tiles launched
    tile = int(m.group(1)) * int(m.group(2))
    g, b = math.prod(int(v) for v in grid), math.prod(int(v) for v in block)  # Python ints: no overflow
    readings = {g * tile}  # grid in blocks
    if g % b == 0:
        readings.add(g // b * tile)  # grid in threads
    tensors = []
    for shape, type_name in zip(dims, types):
        dtype = canonical(type_name) if isinstance(type_name, str) else None
        if dtype and isinstance(shape, list) and shape and all(isinstance(d, int) and d > 0 for d in shape):
            tensors.append((math.prod(shape), dtype))
    if output is not None:
        tensors.append(output)
    matches = {(n, dtype) for n, dtype in tensors for launched in readings if EDGE_SLACK * launched <= n <= launched}
    sizes = {n for n, _ in matches}
    if len(sizes) != 1:
        return None
    n, dtype = sorted(matches)[0]
    nbytes = n * element_bytes(dtype)
    return Cost(0.0, float(nbytes), float(nbytes), "memory", dtype, LAYOUT_TILES)
