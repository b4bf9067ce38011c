"""Batch normalisation whose training statistics cover the whole spatial split."""

import torch
import torch.nn.functional as F

from ._common import _fail
from .grid import SpatialGrid


class _SpatialBatchNorm(torch.autograd.Function):
    """Batch-norm training step over the whole spatial split: sums of the values shifted by a
    pivot per channel give this process's per-channel mean and M2, one all-gather of one small float64 tensor (count,
    means, M2s of every process) on the tensor's device brings every process's, and they are
    merged as halox's C++ batch norm merges them (Chan et al.'s pairwise formula, which does
    not cancel when the mean is large against the spread; in closed form: every process's
    deviation from the merged mean). torch's batch_norm then normalises with the merged
    moments. Backward: the two per-channel sums the input gradient needs (of dy, and of
    dy * (x - mean)) are added over the processes in one all-reduce; the weight and bias
    gradients are this process's parts, which sync_grads adds up.

    A process whose input has the wrong channel count still takes part in the all-gather (its
    count is -1), so that every process raises instead of waiting."""

    @staticmethod
    def forward(ctx, x, weight, bias, layer):
        grid = layer.grid
        c = layer.num_features
        send, recv = layer._stats_buffers(x.device)
        problem = layer._channel_problem(x)
        if problem is not None:
            send.zero_()
            send[0] = -1.0
        else:
            n = x.numel() // c if c else 0
            send[0] = float(n)
            if n:
                # Sums of the values shifted by one of them per channel (a pivot within the
                # data's spread, so that the sum of squares does not cancel the way plain
                # sums do when the mean is large against the spread); two plain reductions run
                # about twice as fast as torch.var_mean's Welford pass here.
                dims = [0] + list(range(2, x.dim()))
                pivot = x.detach()[(0, slice(None)) + (0,) * (x.dim() - 2)]
                d = x.detach() - pivot.reshape([1, c] + [1] * (x.dim() - 2))
                s1 = d.sum(dims).double()
                s2 = d.square_().sum(dims).double()
                del d
                send[1:1 + c].copy_(pivot).add_(s1 / n)
                send[1 + c:].copy_(s2).sub_(s1 * s1 / n).clamp_(min=0)
            else:
                send[1:].zero_()
        grid.collectives.allgather_(send, recv)
        counts = recv[:, 0]
        total = counts.sum()
        if problem is not None:
            _fail(f"{type(layer).__name__}: {problem}")
        if recv.is_cuda:
            # Reading the counts on the host would wait for the device; a device-side assert
            # stops the step instead, in stream order.
            torch._assert_async((counts >= 0).all() & (total > 0))
        else:
            bad = [r for r, v in enumerate(counts.tolist()) if v < 0]
            if bad:
                _fail(f"{type(layer).__name__}: rank(s) {bad} passed an input with the wrong "
                      "channel count (see the error there)")
            if float(total) == 0:
                _fail(f"{type(layer).__name__}: no process holds a value to normalise (empty "
                      "mini-batch)")
        w = counts.unsqueeze(1)
        mean = (w * recv[:, 1:1 + c]).sum(0) / total
        dev = recv[:, 1:1 + c] - mean
        m2 = recv[:, 1 + c:].sum(0) + (w * dev * dev).sum(0)
        var = m2 / total
        if layer.track_running_stats:
            with torch.no_grad():
                layer.num_batches_tracked += 1
                m = (1.0 / float(layer.num_batches_tracked) if layer.momentum is None
                     else layer.momentum)
                unbiased = var * (total / torch.clamp(total - 1.0, min=1.0))
                layer.running_mean.mul_(1 - m).add_(mean.to(layer.running_mean.dtype), alpha=m)
                layer.running_var.mul_(1 - m).add_(unbiased.to(layer.running_var.dtype), alpha=m)
        mean_t, var_t = mean.to(x.dtype), var.to(x.dtype)
        y = F.batch_norm(x.detach(), mean_t, var_t, None if weight is None else weight.detach(),
                         None if bias is None else bias.detach(), False, 0.0, layer.eps)
        ctx.save_for_backward(x, weight, mean_t, torch.rsqrt(var_t + layer.eps))
        ctx.layer = layer
        ctx.count = total
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        x, weight, mean, invstd = ctx.saved_tensors
        layer = ctx.layer
        eps = layer.eps
        shape = [1, x.shape[1]] + [1] * (x.dim() - 2)
        # Torch's own backward in evaluation mode, given the global statistics, yields this
        # process's sum(dy) (the bias gradient) and sum(dy * xhat) (the weight gradient) in one
        # fused pass; sum(dy * (x - mean)) is the latter over invstd.
        w = weight if weight is not None else torch.ones_like(invstd)
        _, gw_local, gb_local = torch.ops.aten.native_batch_norm_backward(
            g, x, w, mean, 1.0 / (invstd * invstd) - eps, None, None, False, eps,
            [False, True, True])
        sums = torch.stack([gb_local.double(), gw_local.double() / invstd.double()])
        layer.grid.collectives.allreduce_(sums)
        m = ctx.count
        sum_g = sums[0].to(x.dtype)
        sum_gxmu = sums[1].to(x.dtype)
        scale = invstd if weight is None else weight * invstd
        # dx = w*invstd * (g - sum(g)/M - (x - mean) * invstd^2 * sum(g*(x - mean))/M)
        #    = g * a + x * b + c, per channel
        b = -scale * invstd * invstd * sum_gxmu / m.to(x.dtype)
        shift = -scale * sum_g / m.to(x.dtype) - mean * b
        dx = torch.addcmul(shift.reshape(shape), x, b.reshape(shape))
        dx.addcmul_(g, scale.reshape(shape))
        gw = gw_local if weight is not None else None
        gb = gb_local if ctx.has_bias else None
        return dx, gw, gb, None


class _DistBatchNorm:
    """Batch norm whose training statistics cover the whole spatial split (see
    _SpatialBatchNorm); evaluation with running statistics communicates nothing, and on a grid
    of one process it is torch's own batch norm."""

    def _setup_bn(self, grid):
        if not isinstance(grid, SpatialGrid):
            _fail(f"{type(self).__name__}: grid must be a halox.torch.SpatialGrid")
        self.grid = grid
        self._stats = {}

    def _channel_problem(self, x):
        if x.shape[1] == self.num_features:
            return None
        return (f"its input has {x.shape[1]} channels but the layer normalises "
                f"{self.num_features} (num_features)")

    def _stats_buffers(self, device):
        """The all-gather's send and receive tensors (float64, on ``device``), kept."""
        bufs = self._stats.get(device)
        if bufs is None:
            per = 1 + 2 * self.num_features
            bufs = (torch.zeros(per, dtype=torch.float64, device=device),
                    torch.zeros(self.grid.size, per, dtype=torch.float64, device=device))
            self._stats[device] = bufs
        return bufs

    def forward(self, x):
        """Normalises this process's spatial block ``x``. In training (or without running
        statistics) the mean and variance cover every process's block, gathered in one
        collective; in evaluation with running statistics nothing is communicated."""
        self._check_input_dim(x)
        if self.grid.size == 1 and self._channel_problem(x) is not None:
            _fail(f"{type(self).__name__}: {self._channel_problem(x)}")
        use_batch = self.training or not self.track_running_stats
        if not use_batch or self.grid.size == 1:
            return torch.nn.modules.batchnorm._BatchNorm.forward(self, x)
        # Training, or evaluation without running statistics (then track_running_stats is
        # False and nothing is updated).
        return _SpatialBatchNorm.apply(x, self.weight, self.bias, self)


class DistBatchNorm2d(_DistBatchNorm, torch.nn.BatchNorm2d):
    """``torch.nn.BatchNorm2d`` with statistics over N, H and W of the whole spatial split."""

    def __init__(self, *args, grid, **kw):
        torch.nn.BatchNorm2d.__init__(self, *args, **kw)
        self._setup_bn(grid)


class DistBatchNorm3d(_DistBatchNorm, torch.nn.BatchNorm3d):
    """``torch.nn.BatchNorm3d`` with statistics over N, D, H and W of the whole spatial split."""

    def __init__(self, *args, grid, **kw):
        torch.nn.BatchNorm3d.__init__(self, *args, **kw)
        self._setup_bn(grid)
