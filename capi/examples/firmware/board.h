/* The bare-metal board of the C examples and the CMSIS-NN peer: QEMU mps2-an386 (Cortex-M4F).
   Output and exit through semihosting; time as SysTick ticks of the CPU clock, extended past
   24 bits by a wrap counter (under `-icount shift=0` a tick is a fixed number of instructions:
   board_calibrate measures it). */
#ifndef BOARD_H
#define BOARD_H

#include <stddef.h>
#include <stdint.h>

/* Starts SysTick. */
void board_init(void);
/* CPU-clock ticks since board_init. */
uint64_t board_ticks(void);
/* Ticks of a loop of exactly *insns instructions (the caller divides). */
uint64_t board_calibrate(uint64_t *insns);
/* Bytes of the stack used so far (the stack is painted at reset). */
size_t board_stack_used(void);

/* Writes a NUL-terminated string to the host. */
void board_puts(const char *s);
/* A line buffer: appends, then board_line_end writes it with a newline. */
void board_line_str(const char *s);
void board_line_int(int64_t v);
void board_line_end(void);
/* The lines both firmwares print (capi/run_examples.sh and bench/mcu_peer.sh read them):
   "logits I: L0 L1 …" and "ticks run I T" for image i; "calibration INSNS TICKS" (of
   board_calibrate) and "stack BYTES" at the end. */
void board_print_run(size_t i, const int8_t *logits, size_t n, uint64_t ticks);
void board_print_calibration_and_stack(void);

/* Ends the program: QEMU exits with 0 for 0, 1 otherwise. */
__attribute__((noreturn)) void board_exit(int code);

#endif
