/* Stand-in for the code generator's output, used by tests/test_micro.py only: the same
 * interface (model_run, MODEL_*_BYTES) as an emitted model. */
#ifndef MODEL_H
#define MODEL_H

#include <stdint.h>

#define MODEL_INPUT_BYTES 2048  /* 16 x 16 x 8, NHWC int8 */
#define MODEL_OUTPUT_BYTES 4096 /* 16 x 16 x 16, NHWC int8 */
#define MODEL_ARENA_BYTES 6688  /* padded input 18 x 18 x 8 + output 16 x 16 x 16 */

void model_run(const int8_t *in, int8_t *out);

#endif
