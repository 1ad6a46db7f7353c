/* See board.h. */
#include "board.h"

#define SYST_CSR (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018u)
#define SCB_ICSR (*(volatile uint32_t *)0xE000ED04u)
#define ICSR_PENDSTSET (1u << 26)
#define SYST_MAX 0xFFFFFFu

#define SYS_WRITE0 0x04
#define SYS_EXIT 0x18
#define ADP_STOPPED_APPLICATION_EXIT 0x20026
#define ADP_STOPPED_RUN_TIME_ERROR 0x20023

#define STACK_PAINT 0x5AC4C0DEu

static volatile uint32_t wraps;

void SysTick_Handler(void)
{
    wraps++;
}

void board_init(void)
{
    SYST_CSR = 0;
    SYST_RVR = SYST_MAX;
    SYST_CVR = 0;
    /* CPU clock, interrupt on wrap, enabled. */
    SYST_CSR = 7;
    /* The counter starts at 0 and reloads on the first tick: count from there. */
    while (SYST_CVR == 0) {
    }
    wraps = 0;
}

uint64_t board_ticks(void)
{
    __asm volatile("cpsid i" ::: "memory");
    uint32_t v = SYST_CVR;
    uint32_t w = wraps;
    /* A wrap not yet counted: count it, and read after the reload. */
    if (SCB_ICSR & ICSR_PENDSTSET) {
        v = SYST_CVR;
        w++;
    }
    __asm volatile("cpsie i" ::: "memory");
    return ((uint64_t)w << 24) + (SYST_MAX - v);
}

uint64_t board_calibrate(uint64_t *insns)
{
    /* 2 instructions an iteration (subs, bne): 4,000,000 in all, and the loop's own setup
       is lost in that. */
    uint32_t n = 2000000;
    uint64_t t0 = board_ticks();
    __asm volatile("1: subs %0, %0, #1\n\tbne 1b" : "+r"(n)::"cc");
    uint64_t t1 = board_ticks();
    *insns = 4000000;
    return t1 - t0;
}

extern uint32_t _sstack[], _estack[];

/* Called at reset, on the reset handler's stack: paints everything below the current frame. */
void board_paint_stack(void)
{
    uint32_t *sp;
    __asm volatile("mov %0, sp" : "=r"(sp));
    for (uint32_t *p = _sstack; p < sp - 16; p++)
        *p = STACK_PAINT;
}

size_t board_stack_used(void)
{
    const uint32_t *p = _sstack;
    while (p < _estack && *p == STACK_PAINT)
        p++;
    return (size_t)((const char *)_estack - (const char *)p);
}

static int semihost(int op, const void *arg)
{
    register int r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

void board_puts(const char *s)
{
    semihost(SYS_WRITE0, s);
}

static char line[512];
static size_t line_len;

void board_line_str(const char *s)
{
    while (*s && line_len < sizeof line - 2)
        line[line_len++] = *s++;
}

void board_line_int(int64_t v)
{
    char digits[24];
    size_t n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        digits[n++] = '-';
    while (n && line_len < sizeof line - 2)
        line[line_len++] = digits[--n];
}

void board_line_end(void)
{
    line[line_len++] = '\n';
    line[line_len] = 0;
    board_puts(line);
    line_len = 0;
}

void board_print_run(size_t i, const int8_t *logits, size_t n, uint64_t ticks)
{
    board_line_str("logits ");
    board_line_int((int64_t)i);
    board_line_str(":");
    for (size_t j = 0; j < n; j++) {
        board_line_str(" ");
        board_line_int(logits[j]);
    }
    board_line_end();
    board_line_str("ticks run ");
    board_line_int((int64_t)i);
    board_line_str(" ");
    board_line_int((int64_t)ticks);
    board_line_end();
}

void board_print_calibration_and_stack(void)
{
    uint64_t insns;
    uint64_t ticks = board_calibrate(&insns);
    board_line_str("calibration ");
    board_line_int((int64_t)insns);
    board_line_str(" ");
    board_line_int((int64_t)ticks);
    board_line_end();
    board_line_str("stack ");
    board_line_int((int64_t)board_stack_used());
    board_line_end();
}

void board_exit(int code)
{
    /* 32-bit semihosting: r1 is the reason itself. */
    semihost(SYS_EXIT, (const void *)(uintptr_t)(code == 0 ? ADP_STOPPED_APPLICATION_EXIT
                                                           : ADP_STOPPED_RUN_TIME_ERROR));
    for (;;) {
    }
}
