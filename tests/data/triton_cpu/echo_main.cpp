// Calls harness_launch (the rendered launcher) with known scalars on a 3 x 2 x 2 grid and
// prints every program's record: "rec pid_x pid_y pid_z grid_x grid_y grid_z bits... ints...".
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" void harness_launch(uint32_t grid_x, uint32_t grid_y, uint32_t grid_z, void* out, float x32, float x16,
                               float xb16, int8_t i8, int16_t i16, int32_t i32, int64_t i64, uint32_t u32);

int main() {
  const uint32_t gx = 3, gy = 2, gz = 2, n = gx * gy * gz;
  int64_t* out = (int64_t*)calloc(16 * n, sizeof(int64_t));
  // fp16 and bf16 values travel as float: 0.1 as fp16 is 0.0999755859375, as bf16 0.10009765625
  harness_launch(gx, gy, gz, out, 3.14159274f, 0.0999755859375f, 0.10009765625f, (int8_t)-7, (int16_t)-300,
                 (int32_t)-123456789, (int64_t)-5000000000123LL, 4000000000u);
  for (uint32_t i = 0; i < n; i++) {
    printf("rec");
    for (int j = 0; j < 16; j++) printf(" %lld", (long long)out[16 * i + j]);
    printf("\n");
  }
  free(out);
  return 0;
}
