/* Host port: the harness compiled natively (board "host") so device outputs can be compared
 * byte for byte with a reference build.  Ticks are CLOCK_MONOTONIC nanoseconds; the stack is
 * not measured. */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "serenity_port.h"

void serenity_port_init(void) {}

uint64_t serenity_port_ticks(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

const char *serenity_port_ticks_unit(void) { return "ns"; }

uint32_t serenity_port_stack_high_water(void) { return SERENITY_UNKNOWN; }

uint32_t serenity_port_stack_reserve(void) { return SERENITY_UNKNOWN; }

void serenity_port_putc(char c) { putchar(c); }

void serenity_port_flush(void) { fflush(stdout); }

void serenity_port_halt(int status) { exit(status); }
