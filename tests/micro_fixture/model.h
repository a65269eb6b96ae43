/* Stand-in for the code generator's output, used by tests/test_micro.py only: the same
 * interface (model_input/model_output/model_run, MODEL_*) as an emitted model. */
#ifndef MODEL_H
#define MODEL_H

#include <stdint.h>

#define MODEL_NUM_INPUTS 1
#define MODEL_NUM_OUTPUTS 1
#define MODEL_INPUT0_BYTES 2048  /* 16 x 16 x 8, NHWC int8, in the output's place */
#define MODEL_OUTPUT0_BYTES 4096 /* 16 x 16 x 16, NHWC int8 */
#define MODEL_ARENA_BYTES 6688   /* padded input 18 x 18 x 8 + output 16 x 16 x 16 */

extern const uint32_t model_input_bytes[MODEL_NUM_INPUTS];
extern const uint32_t model_output_bytes[MODEL_NUM_OUTPUTS];
void *model_input(int i);
void *model_output(int i);
void model_run(void);

#endif
