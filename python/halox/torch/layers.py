"""The spatially parallel window layers: convolution, max and average pooling."""

import math

import torch
import torch.nn.functional as F

from ._common import _as_tuple, _fail
from .window import _HaloedWindowMixin


class _DistConvNd(_HaloedWindowMixin):
    _conv = None

    def _setup(self, grid, input_size, backend):
        if isinstance(self.padding, str):
            _fail(f"{type(self).__name__}: padding='{self.padding}' is not supported; give the "
                  "padding as integers")
        if self.padding_mode not in ("zeros", "circular"):
            _fail(f"{type(self).__name__}: padding_mode='{self.padding_mode}' is not supported; "
                  "use 'zeros' or 'circular'")
        circular = self.padding_mode == "circular"
        if circular and any(p != (k - 1) * d // 2 or s != 1 for p, k, d, s in
                            zip(self.padding, self.kernel_size, self.dilation, self.stride)):
            _fail(f"{type(self).__name__}: circular padding is supported for stride 1 and "
                  "'same' padding ((kernel-1)*dilation/2) only")
        self._init_dist(type(self).__name__, grid, input_size, self.kernel_size, self.stride,
                        self.padding, self.dilation, periodic=circular, backend=backend)

    def forward(self, x):
        """The convolution of this process's output block. ``x`` is its spatial block of the
        input (``SpatialGrid.local_slices``), N x C x the block's spatial shape; the result is
        its block of the output (``output_size`` globally). Collective over the grid."""
        xs, pad = self._haloed(x)
        return self._conv(xs, self.weight, self.bias, self.stride, pad, self.dilation, self.groups)

    @classmethod
    def from_module(cls, conv, grid, input_size, backend=None):
        """A distributed layer sharing ``conv``'s parameters (the same Parameter objects)."""
        m = cls(conv.in_channels, conv.out_channels, conv.kernel_size, stride=conv.stride,
                padding=conv.padding, dilation=conv.dilation, groups=conv.groups,
                bias=conv.bias is not None, padding_mode=conv.padding_mode, grid=grid,
                input_size=input_size, backend=backend, device=conv.weight.device,
                dtype=conv.weight.dtype)
        m.weight = conv.weight
        m.bias = conv.bias
        return m


class DistConv2d(_DistConvNd, torch.nn.Conv2d):
    """``torch.nn.Conv2d`` on an NCHW tensor split over a :class:`SpatialGrid`: input and output
    are this process's spatial blocks (balanced blocks of ``input_size`` and ``output_size``).
    Halo widths follow from kernel, stride, padding and dilation; padding is zeros (a constant
    halo fill) or circular (periodic halos)."""

    _conv = staticmethod(F.conv2d)

    def __init__(self, *args, grid, input_size, backend=None, **kw):
        torch.nn.Conv2d.__init__(self, *args, **kw)
        self._setup(grid, input_size, backend)


class DistConv3d(_DistConvNd, torch.nn.Conv3d):
    """``torch.nn.Conv3d`` on an NCDHW tensor split over a :class:`SpatialGrid` (see
    :class:`DistConv2d`)."""

    _conv = staticmethod(F.conv3d)

    def __init__(self, *args, grid, input_size, backend=None, **kw):
        torch.nn.Conv3d.__init__(self, *args, **kw)
        self._setup(grid, input_size, backend)


class _DistPoolNd(_HaloedWindowMixin):
    def _setup_pool(self, n, grid, input_size, backend, fill):
        if getattr(self, "ceil_mode", False):
            _fail(f"{type(self).__name__}: ceil_mode=True is not supported; pad the input instead")
        if getattr(self, "return_indices", False):
            _fail(f"{type(self).__name__}: return_indices=True is not supported")
        k = _as_tuple(self.kernel_size, n, "kernel_size")
        s = _as_tuple(self.stride if self.stride is not None else self.kernel_size, n, "stride")
        p = _as_tuple(self.padding, n, "padding")
        d = _as_tuple(getattr(self, "dilation", 1), n, "dilation")
        self._k, self._s, self._d = k, s, d
        self._init_dist(type(self).__name__, grid, input_size, k, s, p, d, fill=fill,
                        backend=backend)


class _DistMaxPoolNd(_DistPoolNd):
    # Max pooling pads with -inf: a padded cell never wins.
    def forward(self, x):
        """Max pooling of this process's output block from its spatial block ``x`` of the
        input (``SpatialGrid.local_slices``). Collective over the grid."""
        xs, pad = self._haloed(x)
        return self._pool(xs, self._k, self._s, pad, self._d)


class DistMaxPool2d(_DistMaxPoolNd, torch.nn.MaxPool2d):
    """``torch.nn.MaxPool2d`` on a spatially split NCHW tensor; windows may reach cells several
    processes away."""

    _pool = staticmethod(F.max_pool2d)

    def __init__(self, *args, grid, input_size, backend=None, **kw):
        torch.nn.MaxPool2d.__init__(self, *args, **kw)
        self._setup_pool(2, grid, input_size, backend, -math.inf)


class DistMaxPool3d(_DistMaxPoolNd, torch.nn.MaxPool3d):
    """``torch.nn.MaxPool3d`` on a spatially split NCDHW tensor."""

    _pool = staticmethod(F.max_pool3d)

    def __init__(self, *args, grid, input_size, backend=None, **kw):
        torch.nn.MaxPool3d.__init__(self, *args, **kw)
        self._setup_pool(3, grid, input_size, backend, -math.inf)


class _DistAvgPoolNd(_DistPoolNd):
    def _check_avg(self):
        if not self.count_include_pad and any(v > 0 for v in _as_tuple(self.padding, self.grid.ndim,
                                                                         "padding")):
            _fail(f"{type(self).__name__}: count_include_pad=False with padding is not supported; "
                  "use count_include_pad=True or no padding")

    def forward(self, x):
        """Average pooling of this process's output block from its spatial block ``x`` of the
        input (``SpatialGrid.local_slices``). Collective over the grid."""
        xs, pad = self._haloed(x)
        return self._pool(xs, self._k, self._s, pad, False, True, self.divisor_override)


class DistAvgPool2d(_DistAvgPoolNd, torch.nn.AvgPool2d):
    """``torch.nn.AvgPool2d`` on a spatially split NCHW tensor (zero padding counted, as with
    count_include_pad=True)."""

    _pool = staticmethod(F.avg_pool2d)

    def __init__(self, *args, grid, input_size, backend=None, **kw):
        torch.nn.AvgPool2d.__init__(self, *args, **kw)
        self._setup_pool(2, grid, input_size, backend, 0.0)
        self._check_avg()


class DistAvgPool3d(_DistAvgPoolNd, torch.nn.AvgPool3d):
    """``torch.nn.AvgPool3d`` on a spatially split NCDHW tensor."""

    _pool = staticmethod(F.avg_pool3d)

    def __init__(self, *args, grid, input_size, backend=None, **kw):
        torch.nn.AvgPool3d.__init__(self, *args, **kw)
        self._setup_pool(3, grid, input_size, backend, 0.0)
        self._check_avg()
