"""An input declared the copy of another in its own layout (``copy_of``): the worker lays the
source's elements out at the copy's strides, with numpy or, on a board without it, plain Python."""

import array
import builtins

import pytest

from remote_agent.runners.gpu_memory import relayout


@pytest.mark.parametrize("numpy", [True, False])
def test_relayout_moves_each_element_to_its_strides(numpy, monkeypatch):
    if not numpy:
        real = builtins.__import__

        def no_numpy(name, *args, **kwargs):
            if name == "numpy":
                raise ImportError(name)
            return real(name, *args, **kwargs)

        monkeypatch.setattr(builtins, "__import__", no_numpy)
    raw = array.array("I", range(12)).tobytes()  # a 3 x 4 matrix, row-major
    m_major = array.array("I", relayout(raw, 4, [3, 4], [4, 1], [1, 3], 12)).tolist()
    assert m_major == [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]  # element (i, j) at i + 3 j
    # rows padded to 4 elements: what no index reaches stays zero; 2-byte elements move whole
    padded = array.array("H", relayout(array.array("H", range(6)).tobytes(), 2, [2, 3], [3, 1], [4, 1], 8))
    assert padded.tolist() == [0, 1, 2, 0, 3, 4, 5, 0]
