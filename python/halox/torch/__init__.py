"""PyTorch on halox: autograd functions and spatially parallel layers.

A spatially parallel model splits the spatial dimensions (H, W or D, H, W) of NCHW / NCDHW
activations over a :class:`SpatialGrid` of processes; every process holds the whole mini-batch
and all channels of its spatial block. Window layers (:class:`DistConv2d`,
:class:`DistMaxPool2d`, ...) fetch the neighbour cells their windows reach with a halo exchange
and then run torch's own operator on the haloed block, so the local math is PyTorch's.
Batch norm (:class:`DistBatchNorm2d`, ...) takes its statistics over the whole spatial split.
:class:`SpatialToSample` moves activations to a sample-parallel layout (each process a slice of
the mini-batch, whole images) for the rest of a model.

Parameters stay ordinary ``torch.nn.Parameter`` objects (the layers subclass ``torch.nn.Conv2d``
and friends, so their ``state_dict`` keys match the serial model's). Every process computes its
own part of the gradients: call :func:`sync_grads` after ``backward()`` and before the optimiser
step, and :func:`sync_params` once after building the model.

Everything here is collective over the grid's communicator: every process must run the same
layers in the same order, forward and backward.

The package's modules: ``grid`` (:class:`SpatialGrid` and the reductions), ``functions`` (the
autograd functions), ``window`` (the window layers' geometry and halo buffers), ``layers``
(convolution and pooling), ``batch_norm``, ``to_sample`` (:class:`SpatialToSample`,
:class:`GlobalPoolToSample`) and ``model`` (:func:`parallelize`, :func:`sync_params`,
:func:`sync_grads`, :func:`print`). Everything public is exported here; import it from
``halox.torch``.
"""

# The modules the single-module halox.torch imported stay reachable under the same names.
import builtins  # noqa: F401
import math  # noqa: F401
import os
import weakref  # noqa: F401

import numpy as np  # noqa: F401
import torch  # noqa: F401
import torch.nn.functional as F  # noqa: F401
import halox  # noqa: F401

#: Backend of the plans the layers build when none is given. Layers build their plans lazily,
#: inside the first forward pass of each batch shape, so measuring every candidate there
#: ("auto") would stall that step; point-to-point packing is the dependable default. Set it to
#: "auto" (or pass backend= to a layer) to let halox measure.
DEFAULT_BACKEND = "mpi_pack"

#: How the layers check their inputs across the processes. "shape" (default): collectively
#: once per new input shape (batch, channels, dtype, device) of a layer, when its plan is
#: chosen; after that each process checks its own input, and a process whose input is wrong
#: tells its peers through the plan (they raise halox.Error with code "peer_failed"), so a
#: steady training step runs no collective besides the exchanges and reductions themselves.
#: "always": one collective agreement per layer call (and the plans' own collective buffer
#: checks), for debugging. The environment variable HALOX_TORCH_CHECKS sets the default.
CHECKS = os.environ.get("HALOX_TORCH_CHECKS", "shape")

from ._common import _agree  # noqa: E402,F401  (looked up here at call time: see _package)
from .batch_norm import DistBatchNorm2d, DistBatchNorm3d  # noqa: E402
from .functions import all_reduce_sum, halo_exchange, redistribute  # noqa: E402
from .grid import SpatialGrid  # noqa: E402
from .layers import (  # noqa: E402
    DistAvgPool2d,
    DistAvgPool3d,
    DistConv2d,
    DistConv3d,
    DistMaxPool2d,
    DistMaxPool3d,
)
from .model import parallelize, print, sync_grads, sync_params  # noqa: E402,A004
from .to_sample import GlobalPoolToSample, SpatialToSample  # noqa: E402

__all__ = [
    "CHECKS",
    "DEFAULT_BACKEND",
    "SpatialGrid",
    "halo_exchange",
    "redistribute",
    "all_reduce_sum",
    "DistConv2d",
    "DistConv3d",
    "DistMaxPool2d",
    "DistMaxPool3d",
    "DistAvgPool2d",
    "DistAvgPool3d",
    "DistBatchNorm2d",
    "DistBatchNorm3d",
    "SpatialToSample",
    "GlobalPoolToSample",
    "parallelize",
    "sync_params",
    "sync_grads",
    "print",
]
