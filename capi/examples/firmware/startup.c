/* Reset and exception handlers of the Cortex-M4F examples (QEMU mps2-an386). */
#include <stdint.h>
#include <string.h>

#include "board.h"

extern uint32_t _sidata[], _sdata[], _edata[], _sbss[], _ebss[], _estack[];
extern int main(void);
void board_paint_stack(void);
void SysTick_Handler(void);

#define SCB_CPACR (*(volatile uint32_t *)0xE000ED88u)
#define SCB_CFSR (*(volatile uint32_t *)0xE000ED28u)

__attribute__((noreturn)) void Reset_Handler(void)
{
    /* The FPU first: code built for the hard-float ABI may use it anywhere (CP10, CP11). */
    SCB_CPACR |= 0xFu << 20;
    __asm volatile("dsb\n\tisb" ::: "memory");
    memcpy(_sdata, _sidata, (size_t)((char *)_edata - (char *)_sdata));
    memset(_sbss, 0, (size_t)((char *)_ebss - (char *)_sbss));
    board_paint_stack();
    board_exit(main());
}

static __attribute__((noreturn)) void Fault_Handler(void)
{
    /* A panic in the Rust library ends in `udf` (a UsageFault escalated to HardFault). */
    board_line_str("fault: CFSR = ");
    board_line_int(SCB_CFSR);
    board_line_str(" (a panic of the octet library traps with udf; see the CFSR bits in the "
                   "Cortex-M4 manual)");
    board_line_end();
    board_exit(1);
}

struct vector_table {
    uint32_t *initial_sp;
    void (*handler[15])(void);
};

__attribute__((section(".vectors"), used)) static const struct vector_table vectors = {
    _estack,
    {
        Reset_Handler, Fault_Handler, Fault_Handler, Fault_Handler, Fault_Handler,
        Fault_Handler, 0, 0, 0, 0, Fault_Handler, Fault_Handler, 0, Fault_Handler,
        SysTick_Handler,
    },
};
