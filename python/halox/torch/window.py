"""The geometry of the window layers (halo widths, the local cells an output block reads) and
their shared forward machinery: kept halo buffers, one plan per input shape."""

import torch
import halox

from ._common import _InputState, _as_tuple, _fail, _key_of, _package
from .functions import _HaloedWindow
from .grid import SpatialGrid


def _block_starts(extent, parts):
    """The ``parts + 1`` starts of ``extent`` in balanced blocks (halox's block distribution,
    the blocks of :meth:`SpatialGrid.split`)."""
    dist = halox.Distribution([extent], "float32", [parts])
    return [dist.part_start(0, q) for q in range(parts)] + [extent]


class _Window:
    """Halo widths and local slices of a windowed operator (kernel k, stride s, padding p,
    dilation d) whose input is split over ``parts`` with balanced blocks, and so is its output:
    a layer's output block is the next layer's input block. The geometry is halox's own
    (``halox.window_partition``, the rule of halox::ops::window_partition): with the padding
    stored as halo cells (reach "span"), a process's halo must reach every input cell, padding
    included, that its output block reads, and halox descriptors carry one width per side for
    all processes, so the widths are the maxima over the parts.

    A dimension in one part (and not periodic) needs no exchange: torch pads it itself
    (``pad``), exactly as the serial model does, and its halo is 0. Only split dimensions are
    padded by the halo exchange's boundary fill."""

    def __init__(self, what, size, parts, coords, k, s, p, d, periodic=False):
        self.in_size = tuple(size)
        self.halo = []
        self.local = []
        self.pad = []
        out = []
        for dim, (e, P, kk, ss, pp, dd) in enumerate(zip(size, parts, k, s, p, d)):
            try:
                (o,) = halox.window_output_shape([e], [kk], [ss], [pp], [pp], [dd])
            except halox.Error as err:
                _fail(f"{what}: spatial size {e} on dim {dim} is too small for kernel {kk} with "
                      f"padding {pp}, dilation {dd}; enlarge the input or the padding "
                      f"({err.message})")
            out.append(o)
            if P == 1 and not periodic:
                self.halo.append((0, 0))
                self.local.append(slice(0, e))
                self.pad.append(pp)
                continue
            self.pad.append(0)
            in_starts, out_starts = _block_starts(e, P), _block_starts(o, P)
            for q in range(P):
                if in_starts[q] == in_starts[q + 1] or out_starts[q] == out_starts[q + 1]:
                    hint = ("; a pooling window over the whole map is a global pooling: use "
                            "GlobalPoolToSample (parallelize does)") if o == 1 else ""
                    _fail(f"{what}: {P} parts along spatial dim {dim} leave a process without "
                          f"cells (input extent {e}, output extent {o}); use at most "
                          f"{min(e, o)} parts there{hint}")
            _, (lo_w, hi_w), need = halox.window_partition(
                e, kk, in_starts, ss, pp, pp, dd, out_starts=out_starts, reach="span")
            self.halo.append((lo_w, hi_w))
            need_lo, need_hi = need[coords[dim]]
            origin = in_starts[coords[dim]] - lo_w  # global index of local buffer position 0
            self.local.append(slice(need_lo - origin, need_hi - origin))
        self.out_size = tuple(out)
        self.pad = tuple(self.pad)
        #: True when no dimension is exchanged (one part, or windows that stay inside every
        #: block, as a 2x2 pooling of even blocks): the layer is torch's operator on the block.
        self.local_only = all(h == (0, 0) for h in self.halo) and not periodic

    def options(self, periodic=False):
        return [None, None] + [halox.DimOptions(lo, hi, periodic) for lo, hi in self.halo]


class _HaloBuffers:
    """A layer's haloed input buffers, kept from call to call (one set per plan): a forward
    writes the owned block into a free one and exchanges its halos there, so a steady step
    allocates nothing for it. A buffer is busy from the forward that filled it until that
    forward's backward has run, or its autograd graph is gone; a layer called again meanwhile
    (shared weights, a second forward before backward) takes another buffer."""

    def __init__(self):
        self._sets = {}

    def take(self, key, make):
        pool = self._sets.setdefault(key, [])
        for entry in pool:
            ctx = entry[1]() if entry[1] is not None else None
            if ctx is None or getattr(ctx, "done", False):
                entry[1] = None
                return entry
        entry = [make(), None]
        pool.append(entry)
        return entry

    def forget(self, key):
        self._sets.pop(key, None)

    def held_bytes(self):
        return sum(e[0].numel() * e[0].element_size() for pool in self._sets.values()
                   for e in pool)


class _HaloedWindowMixin:
    """Shared forward machinery: the owned block into a kept halo buffer, exchange, the cells
    the local output block reads."""

    def _init_dist(self, what, grid, input_size, k, s, p, d, periodic=False, fill=0.0,
                   backend=None):
        if not isinstance(grid, SpatialGrid):
            _fail(f"{what}: grid must be a halox.torch.SpatialGrid, got {type(grid).__name__}")
        input_size = _as_tuple(input_size, grid.ndim, "input_size")
        self.grid = grid
        self.input_size = input_size
        self._what = what
        self._window = _Window(what, input_size, grid.parts, grid.coords, k, s, p, d, periodic)
        self.output_size = self._window.out_size
        self._periodic = periodic
        self._fill = fill
        self._backend = backend
        self._plans = {}
        self._state = _InputState(what, grid.comm)
        self._halo_bufs = _HaloBuffers()
        self._owned = tuple(hi - lo for lo, hi in grid.split(input_size))
        self._window_slices = (slice(None), slice(None)) + tuple(self._window.local)
        # Whether the window is the whole halo buffer (then a gradient of the window is one of
        # the buffer).
        self._window_full = all(
            sl.start == 0 and sl.stop == own + lo + hi
            for sl, own, (lo, hi) in zip(self._window.local, self._owned, self._window.halo))
        self._token = torch.zeros((), requires_grad=True)
        self._relu_in = False

    @property
    def exchanges(self):
        """Whether the layer exchanges halos (False: torch's operator on the block as it is)."""
        return not self._window.local_only

    def fuse_input_relu(self):
        """Makes the layer apply a ReLU to its input, written straight into its halo buffer
        (parallelize does this for a ReLU followed by an exchanging layer): the ReLU's output
        is then held once, in the buffer, instead of once by the ReLU and once in the buffer."""
        self._relu_in = True
        return self

    def _problem(self, x):
        nsp = self.grid.ndim
        if x.dim() != nsp + 2:
            return f"expected an N x C x {nsp}-d spatial block, got a {x.dim()}-d tensor"
        if tuple(x.shape[2:]) != self._owned:
            return (f"its block has spatial shape {tuple(x.shape[2:])} but it owns "
                    f"{self._owned} of input_size {self.input_size}; pass each rank its "
                    "block (SpatialGrid.local_slices)")
        return None

    def _build_plan(self, key):
        desc = halox.TensorDesc(self.grid.grid, [key[0], key[1], *self.input_size], key[2],
                                self._window.options(self._periodic))
        # A new plan per key: buffers of the key's old plan (if any) are dropped with it.
        self._halo_bufs.forget(key)
        return halox.HaloPlan(desc, backend=self._backend or _package().DEFAULT_BACKEND,
                              boundary="untouched" if self._periodic else "constant",
                              fill_value=self._fill,
                              memory="device" if key[3] == "cuda" else "host")

    def _haloed(self, x):
        """The cells this process's output block reads (with the halos), and the padding torch
        adds itself (dimensions in one part)."""
        problem = self._problem(x)
        if self._window.local_only:
            # Nothing to exchange or agree on: torch pads the dimensions in one part like the
            # serial model. A wrong block is this process's error alone here; the next layer
            # that exchanges tells the peers.
            if problem is not None:
                _fail(f"{self._what}: {problem}")
            if self._relu_in:
                x = torch.relu(x)
            # Slicing would add a node to the graph whose backward copies the whole gradient.
            return (x if self._window_full else x[self._window_slices]), self._window.pad
        key = _key_of(x) if x.dim() >= 2 else None
        self._state.settle(key, problem, self._plans, self._build_plan)
        return _HaloedWindow.apply(x, self._token, self, key), self._window.pad

    def halo_plan(self, batch, channels, dtype=torch.float32, device="cpu"):
        """The plan used for inputs of this batch size, channel count, dtype and device type
        (None before the first forward with them, or when no dimension is exchanged)."""
        return self._plans.get((batch, channels, str(dtype).replace("torch.", ""),
                                torch.device(device).type))

    def extra_repr(self):
        """torch's description of the layer, plus ``relu_in=True`` when it applies a fused
        ReLU to its input (:meth:`fuse_input_relu`)."""
        extra = super().extra_repr()
        return extra + (", relu_in=True" if self._relu_in else "")

    def halo_buffer_bytes(self):
        """Bytes of the halo buffers this layer keeps between calls."""
        return self._halo_bufs.held_bytes()
