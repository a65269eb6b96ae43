/* Portable measurement harness, the same source on every target.
 *
 * Writes the embedded inputs (input.c) where the model keeps them, in its arena
 * (model_input(i)), runs model_run() and reads the outputs in place (model_output(i)): no
 * input or output buffer of its own. A streamed input (patch plans) is read by model_run
 * itself, part by part, through model_read_input, from the embedded bytes. Then it reports, as text lines between SERENITY-BEGIN
 * and SERENITY-END on the port's console:
 *   outputs=<M>             MODEL_NUM_OUTPUTS
 *   output<k>=<hex>         the model_output_bytes[k] bytes of output k, for k < M
 *   output_bytes=<n>        their total
 *   checksum=0x<fnv1a32>    over all output bytes in order, so a garbled transfer is detected
 *   ticks=<n> ticks_unit=<cpu_clock|ns>   counter spent in model_run
 *   stack_high_water=<bytes> stack_reserve=<bytes>   (omitted where not measurable)
 *   arena_bytes=<n> arena_touched=<n>
 * Measurements are taken right after model_run returns, before any reporting code runs, so
 * the report's own stack and the console never count.
 *
 * The arena is painted before the inputs are written and the bytes that differ after model_run
 * are counted (the inputs included); a byte the model rewrites with the paint value itself is
 * not counted (a lower bound).  The paint also means model_run must not rely on a zeroed
 * arena, as a second call could not either.
 */
#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "serenity_port.h"

#define SERENITY_ARENA_PAINT 0xA5u

extern const uint8_t *const serenity_inputs[MODEL_NUM_INPUTS]; /* input.c */
extern uint8_t *const serenity_arena;                           /* arena_probe.c */
extern const uint32_t serenity_arena_size;                      /* arena_probe.c */

volatile serenity_result_t serenity_result;

static void put_str(const char *s) {
    while (*s) serenity_port_putc(*s++);
}

static void put_dec(uint64_t v) {
    char buf[21];
    int n = 0;
    do {
        buf[n++] = (char)('0' + (int)(v % 10u));
        v /= 10u;
    } while (v);
    while (n) serenity_port_putc(buf[--n]);
}

static void put_hex_byte(uint8_t b) {
    static const char digits[] = "0123456789abcdef";
    serenity_port_putc(digits[b >> 4]);
    serenity_port_putc(digits[b & 15u]);
}

static void put_field(const char *key, uint64_t value) {
    put_str(key);
    serenity_port_putc('=');
    put_dec(value);
    serenity_port_putc('\n');
}

static void report(void) {
    uint32_t i, total = 0;
    int k;
    put_str("SERENITY-BEGIN\n");
    put_field("outputs", MODEL_NUM_OUTPUTS);
    for (k = 0; k < MODEL_NUM_OUTPUTS; k++) {
        const uint8_t *out = (const uint8_t *)model_output(k);
        put_str("output");
        put_dec((uint64_t)k);
        serenity_port_putc('=');
        for (i = 0; i < model_output_bytes[k]; i++) {
            put_hex_byte(out[i]);
            if ((i & 63u) == 63u) serenity_port_flush();
        }
        serenity_port_putc('\n');
        total += model_output_bytes[k];
    }
    put_str("checksum=0x");
    for (i = 0; i < 4; i++) put_hex_byte((uint8_t)(serenity_result.checksum >> (24 - 8 * i)));
    serenity_port_putc('\n');
    put_field("output_bytes", total);
    put_field("ticks", serenity_result.ticks);
    put_str("ticks_unit=");
    put_str(serenity_port_ticks_unit());
    serenity_port_putc('\n');
    if (serenity_result.stack_high_water != SERENITY_UNKNOWN) {
        put_field("stack_high_water", serenity_result.stack_high_water);
        put_field("stack_reserve", serenity_result.stack_reserve);
    }
    put_field("arena_bytes", serenity_result.arena_bytes);
    put_field("arena_touched", serenity_result.arena_touched);
    put_str("SERENITY-END\n");
    serenity_port_flush();
}

#ifdef MODEL_STREAMS_INPUT
/* The embedded input plays the sensor a streamed input comes from. */
void model_read_input(int i, uint32_t offset, void *dst, uint32_t bytes) {
    const uint8_t *src = serenity_inputs[i] + offset;
    uint8_t *out = (uint8_t *)dst;
    uint32_t n;
    for (n = 0; n < bytes; n++) out[n] = src[n];
}
#endif

int main(void) {
    uint32_t i, touched = 0, hash = 2166136261u;
    uint64_t t0, t1;
    int k;

    serenity_port_init();
    for (i = 0; i < serenity_arena_size; i++) serenity_arena[i] = SERENITY_ARENA_PAINT;
    for (k = 0; k < MODEL_NUM_INPUTS; k++) {   /* where the plan puts input k */
        uint8_t *in = (uint8_t *)model_input(k);
        if (!in) continue;                         /* streamed: model_read_input */
        for (i = 0; i < model_input_bytes[k]; i++) in[i] = serenity_inputs[k][i];
    }

    t0 = serenity_port_ticks();
    SERENITY_MARK_START();
    model_run();
    SERENITY_MARK_END();
    t1 = serenity_port_ticks();

    serenity_result.stack_high_water = serenity_port_stack_high_water();
    for (i = 0; i < serenity_arena_size; i++) touched += serenity_arena[i] != SERENITY_ARENA_PAINT;
    for (k = 0; k < MODEL_NUM_OUTPUTS; k++) {   /* read in place */
        const uint8_t *out = (const uint8_t *)model_output(k);
        for (i = 0; i < model_output_bytes[k]; i++) hash = (hash ^ out[i]) * 16777619u;
    }   /* FNV-1a 32 */
    serenity_result.ticks = t1 - t0;
    serenity_result.stack_reserve = serenity_port_stack_reserve();
    serenity_result.arena_bytes = serenity_arena_size;
    serenity_result.arena_touched = touched;
    serenity_result.checksum = hash;
    serenity_result.status = 1;

    report();
    serenity_port_halt(0);
}
