/* Bare-metal start-up for the RP2040 / RP2350 images: vector table, Reset_Handler, fault
 * handler and the optional image headers, with no code from any SDK.
 *
 * Reset_Handler paints every free RAM word between the end of .bss and the current stack
 * pointer (for the stack high-water scan in port_arm.c), copies .data from its load address
 * (a no-op in RAM-only images, where both coincide), zeroes .bss and calls main.  On ARMv8-M
 * it also sets MSPLIM to the end of .bss, so a stack overflow faults instead of silently
 * corrupting the arena.
 *
 * Build defines (from the board registry, micro/boards.py):
 *   SERENITY_RAM_ENTRY         RAM-only image (Pico UF2): the RP2040 bootrom enters a RAM
 *                              image at its lowest address, so a stub placed there loads
 *                              VTOR, SP and PC from the 256-byte aligned vector table.
 *   SERENITY_RP2350_IMAGE_DEF  the minimal IMAGE_DEF block (Arm, secure, executable, RP2350)
 *                              the RP2350 bootrom looks for in the first 4 KB of flash.
 */
#include <stdint.h>

#include "serenity_port.h"

extern uint32_t __data_load[], __data_start[], __data_end[], __bss_start[], __bss_end[];
extern uint32_t __ram_free_start[], __stack_top[];
extern int main(void);

void Reset_Handler(void);
void SysTick_Handler(void); /* port_arm.c */
static void fault_handler(void);

typedef union {
    void (*handler)(void);
    uint32_t *stack;
} vector_t;

__attribute__((used, section(".vectors"))) const vector_t serenity_vectors[16] = {
    {.stack = __stack_top},
    {.handler = Reset_Handler},
    {.handler = fault_handler},  /* NMI */
    {.handler = fault_handler},  /* HardFault */
    {.handler = fault_handler},  /* MemManage (v8-M) */
    {.handler = fault_handler},  /* BusFault (v8-M) */
    {.handler = fault_handler},  /* UsageFault (v8-M) */
    {.handler = fault_handler},  /* SecureFault (v8-M) */
    {0}, {0}, {0},
    {.handler = fault_handler},  /* SVCall */
    {.handler = fault_handler},  /* DebugMonitor (v8-M) */
    {0},
    {.handler = fault_handler},  /* PendSV */
    {.handler = SysTick_Handler},
};

#ifdef SERENITY_RP2350_IMAGE_DEF
/* Start marker, IMAGE_TYPE item (EXE | secure | Arm | RP2350), LAST item (1 word of items),
 * link to itself (a single-block loop), end marker. */
__attribute__((used, section(".image_def"))) const uint32_t serenity_image_def[5] = {
    0xFFFFDED3u, 0x10210142u, 0x000001FFu, 0x00000000u, 0xAB123579u};
#endif

#ifdef SERENITY_RAM_ENTRY
__attribute__((naked, used, section(".entry"))) void serenity_ram_entry(void) {
    __asm volatile(
        "ldr r0, =serenity_vectors\n"
        "ldr r1, =0xE000ED08\n" /* VTOR */
        "str r0, [r1]\n"
        "ldr r1, [r0]\n"
        "mov sp, r1\n"
        "ldr r1, [r0, #4]\n"
        "bx r1\n"
        ".ltorg\n");
}
#endif

void Reset_Handler(void) {
    volatile uint32_t *dst;
    const uint32_t *src = __data_load;
    uint32_t *sp;

#if defined(__ARM_ARCH_8M_MAIN__) || defined(__ARM_ARCH_8M_BASE__)
    __asm volatile("msr msplim, %0" : : "r"(__ram_free_start));
#endif
    __asm volatile("mov %0, sp" : "=r"(sp));
    for (dst = __ram_free_start; dst < sp;) *dst++ = SERENITY_STACK_PAINT;
    for (dst = __data_start; dst < __data_end;) *dst++ = *src++;
    for (dst = __bss_start; dst < __bss_end;) *dst++ = 0u;
    serenity_port_halt(main());
}

static void fault_handler(void) {
    static const char msg[] = "SERENITY-FAULT\n";
    const char *c;
    for (c = msg; *c; c++) serenity_port_putc(*c);
    serenity_port_halt(2);
}
