/* The porting layer between the portable measurement harness (main.c) and a target.
 *
 * Implementations: port_arm.c (bare-metal RP2040/RP2350 images and their emulators),
 * port_host.c (native build for byte-for-byte comparison) and pico_sdk/port_pico_sdk.c
 * (real boards through the Raspberry Pi Pico SDK).  Nothing here allocates memory.
 */
#ifndef SERENITY_PORT_H
#define SERENITY_PORT_H

#include <stdint.h>

/* Where the harness leaves its measurements; also readable with a debugger on a board that
 * has no console (symbol `serenity_result`). */
typedef struct {
    uint32_t status;            /* 0 while running, 1 when the report is complete */
    uint32_t checksum;          /* FNV-1a 32 over the output bytes */
    uint32_t stack_high_water;  /* bytes of stack ever used, SERENITY_UNKNOWN on the host */
    uint32_t stack_reserve;     /* bytes the image reserves for the stack */
    uint32_t arena_bytes;       /* sizeof(arena) */
    uint32_t arena_touched;     /* arena bytes that differ from the paint after model_run */
    uint64_t ticks;             /* serenity_port_ticks() spent in model_run */
} serenity_result_t;

#define SERENITY_UNKNOWN 0xFFFFFFFFu
/* Word that bare-metal Reset_Handler paints the free RAM and stack with (port_arm.c scans it). */
#define SERENITY_STACK_PAINT 0xC5C5C5C5u

/* Brings up the console and the tick counter. */
void serenity_port_init(void);
/* A free-running counter: CPU clock cycles (SysTick) on ARM, nanoseconds on the host. */
uint64_t serenity_port_ticks(void);
/* Name of the counter's unit as printed in the report ("cpu_clock" or "ns"). */
const char *serenity_port_ticks_unit(void);
/* Deepest stack use since reset, from the painted stack; SERENITY_UNKNOWN if not measured. */
uint32_t serenity_port_stack_high_water(void);
uint32_t serenity_port_stack_reserve(void);
void serenity_port_putc(char c);
/* Pushes out buffered console bytes. */
void serenity_port_flush(void);
/* Stops the program for good with `status` (0 = success). */
void serenity_port_halt(int status) __attribute__((noreturn));

/* Markers around model_run.  Only rp2040js builds define SERENITY_BKPT_MARKERS: the runner
 * reads the emulated cycle counter on them.  A BKPT without an attached debugger faults on a
 * real core (and is the semihosting trap in QEMU), so no other build has them. */
#ifdef SERENITY_BKPT_MARKERS
#define SERENITY_MARK_START() __asm volatile("bkpt #1" ::: "memory")
#define SERENITY_MARK_END() __asm volatile("bkpt #2" ::: "memory")
#else
#define SERENITY_MARK_START() ((void)0)
#define SERENITY_MARK_END() ((void)0)
#endif

#endif /* SERENITY_PORT_H */
