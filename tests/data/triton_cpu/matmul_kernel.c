/* A matmul in the Triton-CPU calling convention, for tests of the IR import path.
 *
 * What Triton-CPU emits for the tutorial matmul (fp32, row-major, unit inner strides) takes
 * these arguments: a, b, c, M, N, K, stride_am, stride_bk, stride_cm (the strides equal to 1
 * were specialized away), then program ids x, y, z and grid x, y, z as uint32. The block
 * sizes are compile-time constants, like tl.constexpr: -DBLOCK_M=.. -DBLOCK_N=.. -DBLOCK_K=..
 * -DGROUP_M=... The grid is 1D: cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N) programs, swizzled by
 * GROUP_M as in the Triton tutorial. Compiled with clang -S -emit-llvm into the .llir.
 */
#include <stdint.h>

#ifndef BLOCK_M
#error "define BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M"
#endif

void matmul_kernel(const float* restrict a, const float* restrict b, float* restrict c, int32_t M, int32_t N,
                   int32_t K, int32_t stride_am, int32_t stride_bk, int32_t stride_cm, uint32_t pid_x,
                   uint32_t pid_y, uint32_t pid_z, uint32_t grid_x, uint32_t grid_y, uint32_t grid_z) {
  (void)pid_y; (void)pid_z; (void)grid_x; (void)grid_y; (void)grid_z;
  const int32_t grid_m = (M + BLOCK_M - 1) / BLOCK_M, grid_n = (N + BLOCK_N - 1) / BLOCK_N;
  const int32_t pid = (int32_t)pid_x, width = GROUP_M * grid_n;
  const int32_t first_m = (pid / width) * GROUP_M;
  const int32_t group_size = grid_m - first_m < GROUP_M ? grid_m - first_m : GROUP_M;
  const int32_t m0 = (first_m + pid % group_size) * BLOCK_M;
  const int32_t n0 = ((pid % width) / group_size) * BLOCK_N;
  float acc[BLOCK_M][BLOCK_N];
  for (int i = 0; i < BLOCK_M; i++)
    for (int j = 0; j < BLOCK_N; j++) acc[i][j] = 0.0f;
  if (m0 + BLOCK_M <= M && n0 + BLOCK_N <= N) {  /* a whole tile: no masks, vector loads */
    for (int32_t k = 0; k < K; k++)
      for (int i = 0; i < BLOCK_M; i++) {
        const float av = a[(int64_t)(m0 + i) * stride_am + k];
        const float* brow = b + (int64_t)k * stride_bk + n0;
        for (int j = 0; j < BLOCK_N; j++) acc[i][j] += av * brow[j];
      }
    for (int i = 0; i < BLOCK_M; i++)
      for (int j = 0; j < BLOCK_N; j++) c[(int64_t)(m0 + i) * stride_cm + n0 + j] = acc[i][j];
    return;
  }
  for (int32_t k = 0; k < K; k++)  /* an edge tile: masked */
    for (int i = 0; i < BLOCK_M; i++) {
      if (m0 + i >= M) break;
      const float av = a[(int64_t)(m0 + i) * stride_am + k];
      for (int j = 0; j < BLOCK_N && n0 + j < N; j++) acc[i][j] += av * b[(int64_t)k * stride_bk + n0 + j];
    }
  for (int i = 0; i < BLOCK_M && m0 + i < M; i++)
    for (int j = 0; j < BLOCK_N && n0 + j < N; j++) c[(int64_t)(m0 + i) * stride_cm + n0 + j] = acc[i][j];
}
