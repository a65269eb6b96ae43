/* Compiles the emitted model.c inside this translation unit, so the harness can reach the
 * model's file-local `static uint8_t arena[MODEL_ARENA_BYTES]` without changing the model:
 * build model.c through this file, never on its own. */
#include "model.c"

uint8_t *const serenity_arena = (uint8_t *)arena;
const uint32_t serenity_arena_size = (uint32_t)sizeof(arena);
