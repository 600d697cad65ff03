"""Linear-algebra ops: matmul, gemm, einsum, attention."""
