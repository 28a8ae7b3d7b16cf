/* A kernel that echoes what the launcher passed it, in the Triton-CPU calling convention.
 *
 * Triton signature: out (*i64), x32 (fp32), x16 (fp16), xb16 (bf16), i8, i16, i32, i64, u32.
 * Triton-CPU passes fp16/bf16/fp32 scalars as float and integers at their width, then program
 * ids x, y, z and grid x, y, z as uint32. Every program writes one record of 16 int64 at its
 * linear id (x + grid_x * (y + grid_y * z)): ids, grid, the float bits, the integers, and a
 * marker. The i64 is also stored as its low 32 bits (a trunc in the IR) and a zero high word.
 */
#include <stdint.h>
#include <string.h>

static int64_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (int64_t)u;
}

void echo_kernel(int64_t* out, float x32, float x16, float xb16, int8_t i8, int16_t i16, int32_t i32, int64_t i64,
                 uint32_t u32, uint32_t pid_x, uint32_t pid_y, uint32_t pid_z, uint32_t grid_x, uint32_t grid_y,
                 uint32_t grid_z) {
  int64_t* r = out + 16 * ((int64_t)pid_x + (int64_t)grid_x * ((int64_t)pid_y + (int64_t)grid_y * pid_z));
  r[0] = pid_x; r[1] = pid_y; r[2] = pid_z;
  r[3] = grid_x; r[4] = grid_y; r[5] = grid_z;
  r[6] = bits(x32); r[7] = bits(x16); r[8] = bits(xb16);
  r[9] = i8; r[10] = i16; r[11] = i32; r[12] = i64;
  const int32_t low[2] = {(int32_t)i64, 0};
  memcpy(&r[13], low, 8);
  r[14] = u32;
  r[15] = 0x7e57;
}
