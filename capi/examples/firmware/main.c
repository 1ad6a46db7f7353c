/* octet through its C API on a Cortex-M4F (QEMU mps2-an386): parses the embedded model,
   prepares it from its packed image (the weights the Cortex-M kernels read in their own order,
   written by `octet pack`, kept in flash), runs each embedded image and prints its logits and
   the SysTick ticks of the run, over semihosting. capi/run_examples.sh compares the logits
   with the host runtime's. */
#include <stdint.h>

#include "board.h"
#include "model_info.h"
#include "octet.h"

extern const uint8_t ex_model[], ex_model_end[], ex_images[], ex_images_end[];

/* The working arena, sized from the model on the host for this target's kernels
   (model_info.h; checked below: exactly what the library asks for here). */
static uint8_t arena[EX_ARENA_BYTES];

#if EX_PACKED_IMAGE
extern const uint8_t ex_image[], ex_image_end[];
/* The prepared ops' table (the packed weights stay in the image, in flash). */
static uint8_t table[EX_TABLE_BYTES];
#endif

static int fail(const char *what, OctetStatus s)
{
    board_line_str(what);
    board_line_str(": ");
    board_line_str(octet_status_message(s));
    board_line_end();
    return 1;
}

int main(void)
{
    board_init();
    OctetModel model;
    uint64_t t0 = board_ticks();
    OctetStatus s = octet_model_parse(&model, ex_model, (size_t)(ex_model_end - ex_model));
    uint64_t t_parse = board_ticks() - t0;
    if (s != OCTET_STATUS_OK)
        return fail("octet_model_parse", s);

    size_t n_in = octet_model_input_len(&model), n_out = octet_model_output_len(&model);
    size_t need = octet_model_arena_bytes(&model, 1);
    size_t n_images = (size_t)(ex_images_end - ex_images) / n_in;
    if (n_in != EX_INPUT_LEN || n_out != EX_OUTPUT_LEN || n_images != EX_IMAGES ||
        need != sizeof arena) {
        board_line_str("model_info.h does not describe the embedded model and images: "
                       "regenerate it with make_inputs (arena needed: ");
        board_line_int((int64_t)need);
        board_line_str(")");
        board_line_end();
        return 1;
    }

#if EX_PACKED_IMAGE
    t0 = board_ticks();
    s = octet_model_prepare_image(&model, table, sizeof table, ex_image,
                                  (size_t)(ex_image_end - ex_image));
    uint64_t t_prepare = board_ticks() - t0;
    if (s != OCTET_STATUS_OK)
        return fail("octet_model_prepare_image", s);
    board_line_str("ticks prepare ");
    board_line_int((int64_t)t_prepare);
    board_line_end();
#endif

    int8_t logits[EX_OUTPUT_LEN];
    for (size_t i = 0; i < n_images; i++) {
        t0 = board_ticks();
        s = octet_model_run(&model, ex_images + i * n_in, n_in, arena, sizeof arena, logits,
                            sizeof logits);
        uint64_t t_run = board_ticks() - t0;
        if (s != OCTET_STATUS_OK)
            return fail("octet_model_run", s);
        board_print_run(i, logits, n_out, t_run);
    }

    board_line_str("ticks parse ");
    board_line_int((int64_t)t_parse);
    board_line_end();
    board_print_calibration_and_stack();
    return 0;
}
