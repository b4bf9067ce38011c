"""The operators' window geometry as Python sees it (halox.window_*): the same rule as PyTorch's
convolution and pooling, the span with padding and the clipped footprint, and errors that name
the bad parameter. Local computations: every rank checks the same cases."""

import itertools

import pytest
import torch

import halox


def _cases():
    for e, k, s, p, d in itertools.product([1, 5, 8, 13], [1, 2, 3, 5], [1, 2, 3], [0, 1, 2],
                                           [1, 2]):
        if e + 2 * p >= d * (k - 1) + 1:
            yield e, k, s, p, d


def test_output_shape_is_torchs():
    for e, k, s, p, d in _cases():
        want = torch.nn.functional.conv1d(torch.zeros(1, 1, e), torch.zeros(1, 1, k), stride=s,
                                          padding=p, dilation=d).shape[-1]
        assert halox.window_output_shape([e], [k], [s], [p], [p], [d]) == (want,), (e, k, s, p, d)


def test_span_reaches_every_tap_and_footprint_clips_it():
    for e, k, s, p, d in _cases():
        (o,) = halox.window_output_shape([e], [k], [s], [p], [p], [d])
        for lo in range(o):
            for hi in range(lo + 1, o + 1):
                taps = [q * s - p + t * d for q in range(lo, hi) for t in range(k)]
                span = halox.window_input_span([lo], [hi], [e], [k], [s], [p], [p], [d])
                assert span == ((min(taps),), (max(taps) + 1,)), (e, k, s, p, d, lo, hi)
                (flo,), (fhi,) = halox.window_input_footprint([lo], [hi], [e], [k], [s], [p],
                                                              [p], [d])
                # The span clipped to the input (taps a stride or dilation skips count).
                clo, chi = max(0, min(taps)), min(e, max(taps) + 1)
                assert (flo, fhi) == ((clo, chi) if clo < chi else (0, 0)), (e, k, s, p, d)


def test_many_dimensions_and_defaults():
    assert halox.window_output_shape([9, 8], [3, 2]) == (7, 7)
    assert halox.window_input_span([1, 0], [3, 2], [9, 8], [3, 2], [2], [1]) == ((1, -1), (6, 3))


def test_bad_parameters_are_named():
    with pytest.raises(halox.Error, match="larger than the padded input"):
        halox.window_output_shape([2], [5])
    with pytest.raises(halox.Error, match="stride"):
        halox.window_output_shape([8], [3], [0])
    with pytest.raises(halox.Error, match="one entry per spatial dimension"):
        halox.window_input_span([0, 0], [1], [8], [3])
