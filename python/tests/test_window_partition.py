"""The window layers' geometry from C++ (halox.window_partition, halox::ops::window_partition)
against the derivation halox.torch used before, in Python, over many random windows and
partitions: the same halo widths, local slices, padding, output sizes and errors. Local
computations: every rank checks the same cases."""

import itertools
import random

import pytest

pytest.importorskip("torch")

import halox  # noqa: E402
from halox.torch.window import _Window  # noqa: E402


def _fail(msg):
    raise halox.Error(msg)


def reference_window(what, size, parts, coords, k, s, p, d, periodic=False):
    """halox.torch's geometry as it was derived in Python: balanced input and output blocks, the
    span of every part's output block (padding included), the widths the maxima over the parts.
    Returns (halo, local, pad, out_size, local_only)."""
    halo, local, pads, out = [], [], [], []
    for dim, (e, P, kk, ss, pp, dd) in enumerate(zip(size, parts, k, s, p, d)):
        win = ([kk], [ss], [pp], [pp], [dd])
        try:
            (o,) = halox.window_output_shape([e], *win)
        except halox.Error as err:
            _fail(f"{what}: spatial size {e} on dim {dim} is too small for kernel {kk} with "
                  f"padding {pp}, dilation {dd}; enlarge the input or the padding "
                  f"({err.message})")
        out.append(o)
        if P == 1 and not periodic:
            halo.append((0, 0))
            local.append(slice(0, e))
            pads.append(pp)
            continue
        pads.append(0)
        din = halox.Distribution([e], "float32", [P])
        dout = halox.Distribution([o], "float32", [P])
        lo_w = hi_w = 0
        needs = []
        for q in range(P):
            ilo, isz = din.part_start(0, q), din.part_size(0, q)
            olo, osz = dout.part_start(0, q), dout.part_size(0, q)
            if isz == 0 or osz == 0:
                hint = ("; a pooling window over the whole map is a global pooling: use "
                        "GlobalPoolToSample (parallelize does)") if o == 1 else ""
                _fail(f"{what}: {P} parts along spatial dim {dim} leave a process without "
                      f"cells (input extent {e}, output extent {o}); use at most "
                      f"{min(e, o)} parts there{hint}")
            (need_lo,), (need_hi,) = halox.window_input_span([olo], [olo + osz], [e], *win)
            lo_w = max(lo_w, ilo - need_lo)
            hi_w = max(hi_w, need_hi - (ilo + isz))
            needs.append((ilo, need_lo, need_hi))
        halo.append((lo_w, hi_w))
        ilo, need_lo, need_hi = needs[coords[dim]]
        origin = ilo - lo_w
        local.append(slice(need_lo - origin, need_hi - origin))
    local_only = all(h == (0, 0) for h in halo) and not periodic
    return halo, local, tuple(pads), tuple(out), local_only


def outcome(make):
    try:
        return make()
    except halox.Error as e:
        return ("error", str(e))


def both(size, parts, coords, k, s, p, d, periodic):
    args = ("DistConv2d", size, parts, coords, k, s, p, d, periodic)

    def new():
        w = _Window(*args)
        return w.halo, w.local, w.pad, w.out_size, w.local_only

    return outcome(lambda: reference_window(*args)), outcome(new)


def random_case(rng, ndim):
    dims = []
    for _ in range(ndim):
        e, kk, ss, pp, dd = (rng.randint(1, 30), rng.randint(1, 7), rng.randint(1, 4),
                             rng.randint(0, 4), rng.randint(1, 3))
        dims.append((e, rng.randint(1, 6), kk, ss, pp, dd))
    return [tuple(c[i] for c in dims) for i in range(6)]


def test_random_windows_and_partitions_match_the_python_derivation():
    rng = random.Random(2024)
    checked = errors = 0
    for _ in range(4000):
        size, parts, k, s, p, d = random_case(rng, 1)
        periodic = rng.random() < 0.2
        for q in range(parts[0]):  # every process of the split
            old, new = both(size, parts, (q,), k, s, p, d, periodic)
            assert new == old, (size, parts, q, k, s, p, d, periodic)
            checked += 1
            errors += old[0] == "error"
    for _ in range(600):
        ndim = rng.randint(2, 3)
        size, parts, k, s, p, d = random_case(rng, ndim)
        coords = tuple(rng.randrange(n) for n in parts)
        periodic = rng.random() < 0.2
        old, new = both(size, parts, coords, k, s, p, d, periodic)
        assert new == old, (size, parts, coords, k, s, p, d, periodic)
        checked += 1
    # Both outcomes occur: layers that build and geometry errors.
    assert checked > 10000 and 0 < errors < checked / 2, (checked, errors)


def test_the_layer_shapes_of_the_suites_match():
    """Every small window the torch suites build (kernels to 5, strides to 3, padding to 2,
    dilation to 2) on inputs of 4 to 16 cells over 1 to 4 processes, at every process."""
    for e, P, kk, ss, pp, dd in itertools.product(range(4, 17), range(1, 5), range(1, 6),
                                                  range(1, 4), range(3), range(1, 3)):
        for periodic in (False, True):
            for q in range(P):
                old, new = both((e,), (P,), (q,), (kk,), (ss,), (pp,), (dd,), periodic)
                assert new == old, (e, P, q, kk, ss, pp, dd, periodic)


def test_window_partition_binding():
    # A 3-tap "same" convolution of 10 cells over 4 balanced blocks.
    starts = [0, 3, 6, 8, 10]
    out, halo, need = halox.window_partition(10, 3, starts, 1, 1, 1, out_starts=starts,
                                             reach="span")
    assert out == tuple(starts) and halo == (1, 1)
    assert need == ((-1, 4), (2, 7), (5, 9), (7, 11))
    # The default reach clips to the input, as halox::ops's distributed operators need it.
    _, halo, need = halox.window_partition(10, 3, starts, pad_lo=1, pad_hi=1)
    assert halo == (1, 1) and need[0] == (0, 4) and need[-1] == (7, 10)
    with pytest.raises(halox.Error, match="reach='x'"):
        halox.window_partition(10, 3, starts, reach="x")
    with pytest.raises(halox.Error, match="input starts"):
        halox.window_partition(10, 3, [0, 4, 9])


def test_anchor_rule_is_not_the_balanced_output_blocks():
    """Without output starts, outputs go to the process owning their anchor (halox::ops's rule);
    halox.torch passes balanced output blocks instead, so that a layer's output block is the
    next layer's input block (SpatialGrid.split). The two differ, e.g. for a 2x2 pooling of 7
    cells over 3 processes."""
    starts = [0, 3, 5, 7]
    anchored, _, _ = halox.window_partition(7, 2, starts, 2)
    assert anchored == (0, 2, 3, 3)
    balanced = [halox.Distribution([3], "float32", [3]).part_start(0, q) for q in range(3)] + [3]
    assert tuple(balanced) == (0, 1, 2, 3)
