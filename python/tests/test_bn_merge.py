"""halox.bn_merge_stats: the batch-norm statistics merge of halox's C++ operators, which
halox.torch's distributed batch norm uses. Local computations: every rank checks the same cases."""

import numpy as np
import pytest

import halox


def _part(x):
    """(count, mean, m2) per channel of x [N, C, ...]."""
    c = x.shape[1]
    v = np.moveaxis(x, 1, 0).reshape(c, -1)
    n = v.shape[1]
    if n == 0:
        return 0, np.zeros(c), np.zeros(c)
    mean = v.mean(axis=1)
    return n, mean, ((v - mean[:, None]) ** 2).sum(axis=1)


@pytest.mark.parametrize("offset", [0.0, 1e6])
def test_merge_of_any_split_is_the_whole(offset):
    rng = np.random.default_rng(7)
    x = offset + rng.standard_normal((6, 3, 5, 4))
    whole_mean, whole_var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    for cuts in ([], [1], [2, 2], [0, 3, 3], [1, 5, 6]):  # splits over N, empty parts included
        parts = [_part(p) for p in np.split(x, cuts, axis=0)]
        n, mean, m2 = halox.bn_merge_stats(parts)
        assert n == x.size // 3
        np.testing.assert_allclose(mean, whole_mean, rtol=1e-14, atol=1e-9)
        # Chan's pairwise merge keeps the variance accurate even at a mean of 1e6.
        np.testing.assert_allclose(m2 / n, whole_var, rtol=1e-9)


def test_empty_input_merges_to_nothing():
    n, mean, m2 = halox.bn_merge_stats([(0, np.zeros(2), np.zeros(2))])
    assert n == 0 and len(mean) == 0 and len(m2) == 0
    assert halox.bn_merge_stats([])[0] == 0


def test_bad_parts_name_the_part_and_the_fix():
    with pytest.raises(halox.Error, match="part 1 has 2 entries; pass .count, mean, m2."):
        halox.bn_merge_stats([(1, np.zeros(2), np.zeros(2)), (1, np.zeros(2))])
    with pytest.raises(halox.Error, match="part 0 has count -3"):
        halox.bn_merge_stats([(-3, np.zeros(2), np.zeros(2))])
    with pytest.raises(halox.Error, match="2 and 3 channels cannot be merged"):
        halox.bn_merge_stats([(1, np.zeros(2), np.zeros(2)), (1, np.zeros(3), np.zeros(3))])
    with pytest.raises(halox.Error, match="part 0's mean has 2 dimensions"):
        halox.bn_merge_stats([(1, np.zeros((2, 2)), np.zeros(2))])
