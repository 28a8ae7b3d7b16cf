"""bench/cublaslt_ceiling.py's operands: row-major C = A @ B given to column-major cuBLASLt as
C^T = B^T A^T, for every stored layout of A and B."""

import numpy as np
import pytest

from bench.cublaslt_ceiling import transposed_operand


def as_cublas_sees_it(storage, op, rows, cols, ld):
    """The op(X) cuBLAS computes with: X is rows x cols, column-major with leading dimension ld,
    over the flat storage."""
    x = np.array([[storage[i + j * ld] for j in range(cols)] for i in range(rows)])
    return x if op == 0 else x.T


def logical(stored, transposed):
    """The logical matrix and its element strides, as torch gives them for a stored matrix or its
    .t() view."""
    t = stored.T if transposed else stored
    return t, tuple(s // stored.itemsize for s in t.strides)


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_each_operand_reads_as_its_transpose_and_the_product_is_right(layout):
    rng = np.random.default_rng(0)
    M, N, K = 3, 5, 4
    a_store = rng.integers(-4, 5, (K, M) if layout[0] == "T" else (M, K))
    b_store = rng.integers(-4, 5, (N, K) if layout[1] == "T" else (K, N))
    a, a_strides = logical(a_store, layout[0] == "T")
    b, b_strides = logical(b_store, layout[1] == "T")
    op_a = as_cublas_sees_it(b_store.ravel(), *transposed_operand(b_strides, N, K))
    op_b = as_cublas_sees_it(a_store.ravel(), *transposed_operand(a_strides, K, M))
    assert (op_a == b.T).all() and (op_b == a.T).all()
    assert ((op_a @ op_b).T == a @ b).all()


def test_a_matrix_whose_rows_are_contiguous_is_not_transposed():
    assert transposed_operand((7, 1), 4, 9) == (0, 4, 9, 7)
    assert transposed_operand((1, 7), 4, 9) == (1, 9, 4, 7)
