/* Bare-metal port for the RP2040 (Pico) and RP2350 (Pico 2) images and their emulators.
 *
 * Counter: SysTick on the processor clock, widened to 64 bits by counting wraps in
 * SysTick_Handler.  On a board that is CPU cycles; under QEMU -icount it advances with the
 * instruction count (the runner converts it to instructions, never calling it cycles).
 *
 * Stack: startup.c paints all free RAM between the end of .bss and the initial stack pointer;
 * the high-water mark is the distance from the top of the stack to the lowest word no longer
 * holding the paint.
 *
 * Console, chosen by the board's build defines:
 *   SERENITY_CONSOLE_RP2040_UART  UART0 on GP0 at 115200 8N1, clocked from the 12 MHz crystal
 *                                 (also what rp2040js's mcu.uart[0].onByte sees);
 *   SERENITY_CONSOLE_SEMIHOSTING  Arm semihosting SYS_WRITE0 (QEMU prints it on stderr);
 *   neither                       results stay in `serenity_result` for a debugger.
 * Halt: BKPT #3 with the status in r0 for rp2040js (SERENITY_BKPT_MARKERS), semihosting
 * SYS_EXIT_EXTENDED for QEMU, otherwise a WFI loop.
 */
#include <stdint.h>

#include "serenity_port.h"

#define REG(addr) (*(volatile uint32_t *)(addr))

#define SYST_CSR REG(0xE000E010u)
#define SYST_RVR REG(0xE000E014u)
#define SYST_CVR REG(0xE000E018u)
#define SYST_MAX 0x00FFFFFFu

extern uint32_t __ram_free_start[], __stack_top[], __serenity_stack_reserve[];

static volatile uint32_t systick_wraps;

void SysTick_Handler(void) { systick_wraps++; }

#if defined(SERENITY_CONSOLE_RP2040_UART)

#define RESETS_RESET REG(0x4000C000u)
#define RESETS_DONE REG(0x4000C008u)
#define RESET_IO_BANK0 (1u << 5)
#define RESET_PADS_BANK0 (1u << 8)
#define RESET_UART0 (1u << 22)
#define XOSC_CTRL REG(0x40024000u)
#define XOSC_STATUS REG(0x40024004u)
#define XOSC_STARTUP REG(0x4002400Cu)
#define CLK_REF_CTRL REG(0x40008030u)
#define CLK_REF_SELECTED REG(0x40008038u)
#define CLK_SYS_CTRL REG(0x4000803Cu)
#define CLK_SYS_SELECTED REG(0x40008044u)
#define CLK_PERI_CTRL REG(0x40008048u)
#define GPIO0_CTRL REG(0x40014004u)
#define UART0_DR REG(0x40034000u)
#define UART0_FR REG(0x40034018u)
#define UART0_IBRD REG(0x40034024u)
#define UART0_FBRD REG(0x40034028u)
#define UART0_LCR_H REG(0x4003402Cu)
#define UART0_CR REG(0x40034030u)
#define UART_FR_BUSY (1u << 3)
#define UART_FR_TXFF (1u << 5)

static void console_init(void) {
    const uint32_t blocks = RESET_IO_BANK0 | RESET_PADS_BANK0 | RESET_UART0;
    /* 12 MHz crystal: range 1-15 MHz, start-up delay of ~1 ms in units of 256 cycles. */
    XOSC_CTRL = 0xAA0u;
    XOSC_STARTUP = 47u;
    XOSC_CTRL = (0xFABu << 12) | 0xAA0u;
    while (!(XOSC_STATUS & 0x80000000u)) {}
    CLK_SYS_CTRL = 0u; /* clk_sys from clk_ref (glitchless) ... */
    while (CLK_SYS_SELECTED != 1u) {}
    CLK_REF_CTRL = 2u; /* ... and clk_ref from the crystal: clk_sys = 12 MHz */
    while (CLK_REF_SELECTED != (1u << 2)) {}
    CLK_PERI_CTRL = 0u;       /* stop clk_peri before changing its source ... */
    CLK_PERI_CTRL = 1u << 11; /* ... then enable it from clk_sys */
    RESETS_RESET &= ~blocks;
    while ((RESETS_DONE & blocks) != blocks) {}
    GPIO0_CTRL = 2u; /* GP0 = UART0 TX */
    UART0_IBRD = 6u; /* 12e6 / (16 * 115200) = 6 + 33/64 */
    UART0_FBRD = 33u;
    UART0_LCR_H = (3u << 5) | (1u << 4); /* 8 data bits, FIFOs on */
    UART0_CR = (1u << 0) | (1u << 8);    /* UART enabled, transmit enabled */
}

void serenity_port_putc(char c) {
    while (UART0_FR & UART_FR_TXFF) {}
    UART0_DR = (uint8_t)c;
}

void serenity_port_flush(void) {
    while (UART0_FR & UART_FR_BUSY) {}
}

#elif defined(SERENITY_CONSOLE_SEMIHOSTING)

#define SYS_WRITE0 0x04
#define SYS_EXIT_EXTENDED 0x20
#define ADP_STOPPED_APPLICATION_EXIT 0x20026u

static char line[128];
static uint32_t line_len;

static int semihost(int op, const void *arg) {
    register int r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm volatile("bkpt #0xAB" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

static void console_init(void) {}

void serenity_port_flush(void) {
    if (!line_len) return;
    line[line_len] = '\0';
    semihost(SYS_WRITE0, line);
    line_len = 0;
}

void serenity_port_putc(char c) {
    line[line_len++] = c;
    if (c == '\n' || line_len == sizeof(line) - 1) serenity_port_flush();
}

#else

static void console_init(void) {}
void serenity_port_putc(char c) { (void)c; }
void serenity_port_flush(void) {}

#endif

void serenity_port_init(void) {
    console_init();
    SYST_RVR = SYST_MAX;
    SYST_CVR = 0u;
    SYST_CSR = 7u; /* enabled, wrap interrupt, processor clock */
}

uint64_t serenity_port_ticks(void) {
    uint32_t wraps, count;
    do {
        wraps = systick_wraps;
        count = SYST_CVR;
    } while (wraps != systick_wraps);
    return ((uint64_t)wraps << 24) + (SYST_MAX - count);
}

const char *serenity_port_ticks_unit(void) { return "cpu_clock"; }

uint32_t serenity_port_stack_high_water(void) {
    const uint32_t *p = __ram_free_start;
    while (p < __stack_top && *p == SERENITY_STACK_PAINT) p++;
    return (uint32_t)((uintptr_t)__stack_top - (uintptr_t)p);
}

uint32_t serenity_port_stack_reserve(void) { return (uint32_t)(uintptr_t)__serenity_stack_reserve; }

void serenity_port_halt(int status) {
    serenity_port_flush();
#if defined(SERENITY_BKPT_MARKERS)
    {
        register int r0 __asm__("r0") = status;
        __asm volatile("bkpt #3" : : "r"(r0) : "memory");
    }
#elif defined(SERENITY_CONSOLE_SEMIHOSTING)
    {
        const uint32_t block[2] = {ADP_STOPPED_APPLICATION_EXIT, (uint32_t)status};
        semihost(SYS_EXIT_EXTENDED, block);
    }
#else
    (void)status;
#endif
    for (;;) __asm volatile("wfi");
}
