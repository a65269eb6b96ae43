/* Pico SDK port of the measurement harness (main.c), for real Pico and Pico 2 boards.
 *
 * Console: stdio over USB CDC. serenity_port_init waits until the host opens the serial
 * port, so the report is never printed into the void; the model then runs once.
 * Counter: SysTick on the processor clock (CPU cycles; flash wait states included, unlike the
 * emulators), widened to 64 bits by a SysTick exception handler counting wraps.
 * Stack: the SDK's main stack lies between __StackBottom and __StackTop (PICO_STACK_SIZE,
 * 2 KB by default); it is painted below the caller's frame and scanned after model_run. A
 * reported high-water equal to stack_reserve means the stack reached (or passed) the bottom.
 */
#include <stdio.h>

#include "hardware/exception.h"
#include "hardware/structs/systick.h"
#include "pico/stdio_usb.h"
#include "pico/stdlib.h"

#include "serenity_port.h"

#define SYST_MAX 0x00FFFFFFu
#define PAINT_MARGIN_WORDS 16u /* keep clear of this function's own frame */

extern uint32_t __StackBottom[], __StackTop[];

static volatile uint32_t systick_wraps;

static void systick_wrap(void) { systick_wraps++; }

void serenity_port_init(void) {
    volatile uint32_t *p;
    uint32_t *sp;

    stdio_init_all();
    while (!stdio_usb_connected()) sleep_ms(50);
    sleep_ms(250); /* let the host finish setting up the port */

    __asm volatile("mov %0, sp" : "=r"(sp));
    for (p = __StackBottom; p < sp - PAINT_MARGIN_WORDS;) *p++ = SERENITY_STACK_PAINT;

    exception_set_exclusive_handler(SYSTICK_EXCEPTION, systick_wrap);
    systick_hw->rvr = SYST_MAX;
    systick_hw->cvr = 0u;
    systick_hw->csr = 7u; /* enabled, wrap interrupt, processor clock */
}

uint64_t serenity_port_ticks(void) {
    uint32_t wraps, count;
    do {
        wraps = systick_wraps;
        count = systick_hw->cvr;
    } while (wraps != systick_wraps);
    return ((uint64_t)wraps << 24) + (SYST_MAX - count);
}

const char *serenity_port_ticks_unit(void) { return "cpu_clock"; }

uint32_t serenity_port_stack_high_water(void) {
    const uint32_t *p = __StackBottom;
    while (p < __StackTop && *p == SERENITY_STACK_PAINT) p++;
    return (uint32_t)((uintptr_t)__StackTop - (uintptr_t)p);
}

uint32_t serenity_port_stack_reserve(void) {
    return (uint32_t)((uintptr_t)__StackTop - (uintptr_t)__StackBottom);
}

void serenity_port_putc(char c) { putchar_raw(c); }

void serenity_port_flush(void) { stdio_flush(); }

void serenity_port_halt(int status) {
    (void)status; /* the report already says everything; keep USB alive for the host */
    for (;;) sleep_ms(1000);
}
