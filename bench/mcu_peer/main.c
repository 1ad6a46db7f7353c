/* The CMSIS-NN peer on a Cortex-M4F (QEMU mps2-an386): the .o8 model's ops (peer_model.h) run
   with CMSIS-NN's s8 kernels, on the embedded images. Prints each image's logits, the SysTick
   ticks of each whole inference and, in a second pass, of each op, over semihosting (the same
   board code and counting as octet's firmware example). */
#include <string.h>

#include "arm_nnfunctions.h"
#include "board.h"
#include "peer_model.h"

#if !defined(ARM_MATH_DSP) || defined(ARM_MATH_MVEI)
#error "build for Cortex-M4 with DSP (-mcpu=cortex-m4): the peer measures CMSIS-NN's DSP paths"
#endif
#if !defined(CMSIS_NN_USE_SINGLE_ROUNDING)
#error "define CMSIS_NN_USE_SINGLE_ROUNDING: octet's requantization rounds once"
#endif

extern const uint8_t ex_images[], ex_images_end[];

#define INPUT_LEN (PEER_INPUT_C * PEER_INPUT_H * PEER_INPUT_W)

/* Ping-pong activation buffers and the kernels' scratch. */
static int8_t act[2][PEER_MAX_TENSOR_BYTES] __attribute__((aligned(4)));
static int16_t scratch[(PEER_SCRATCH_BYTES + 1) / 2] __attribute__((aligned(4)));

static arm_cmsis_nn_status run_op(const struct peer_op *op, const int8_t *in, int8_t *out)
{
    cmsis_nn_context ctx = {scratch, (int32_t)sizeof scratch};
    const cmsis_nn_dims in_dims = {1, op->in.h, op->in.w, op->in.c};
    const cmsis_nn_dims out_dims = {1, op->out.h, op->out.w, op->out.c};
    const cmsis_nn_dims bias_dims = {1, 1, 1, op->out.c};
    const cmsis_nn_activation clamp = {op->act_min, op->act_max};
    /* CMSIS-NN takes non-const multiplier/shift pointers; it only reads them. */
    int32_t *mult = (int32_t *)(uintptr_t)op->multiplier;
    int32_t *shift = (int32_t *)(uintptr_t)op->shift;
    switch (op->kind) {
    case PEER_CONV: {
        const cmsis_nn_conv_params p = {
            .input_offset = op->input_offset,
            .output_offset = op->output_offset,
            .stride = {.w = op->stride, .h = op->stride},
            .padding = {.w = op->pad, .h = op->pad},
            .dilation = {.w = 1, .h = 1},
            .activation = clamp,
        };
        const cmsis_nn_per_channel_quant_params q = {mult, shift};
        const cmsis_nn_dims filter = {op->out.c, op->kernel_h, op->kernel_w, op->in.c};
        return arm_convolve_wrapper_s8(&ctx, &p, &q, &in_dims, in, &filter, op->weights,
                                       &bias_dims, op->bias, &out_dims, out);
    }
    case PEER_FC: {
        const int32_t k = op->in.c * op->in.h * op->in.w;
        const cmsis_nn_fc_params p = {
            .input_offset = op->input_offset,
            .filter_offset = 0,
            .output_offset = op->output_offset,
            .activation = clamp,
        };
        const cmsis_nn_quant_params q = {mult, shift, 1};
        const cmsis_nn_dims fc_in = {1, 1, 1, k};
        const cmsis_nn_dims filter = {k, 1, 1, op->out.c};
        const cmsis_nn_dims fc_out = {1, 1, 1, op->out.c};
        return arm_fully_connected_wrapper_s8(&ctx, &p, &q, &fc_in, in, &filter, op->weights,
                                              &bias_dims, op->bias, &fc_out, out);
    }
    case PEER_MAX_POOL: {
        const cmsis_nn_pool_params p = {
            .stride = {.w = op->stride, .h = op->stride},
            .padding = {.w = 0, .h = 0},
            .activation = clamp,
        };
        const cmsis_nn_dims filter = {1, op->kernel_h, op->kernel_w, 1};
        return arm_max_pool_s8(&ctx, &p, &in_dims, in, &filter, &out_dims, out);
    }
    }
    return ARM_CMSIS_NN_ARG_ERROR;
}

static int failed(size_t op, arm_cmsis_nn_status s)
{
    board_line_str("CMSIS-NN refused op ");
    board_line_int((int64_t)op);
    board_line_str(" (");
    board_line_str(peer_ops[op].name);
    board_line_str("): status ");
    board_line_int(s);
    board_line_end();
    return 1;
}

/* One image: planar u8 pixels to the HWC int8 input (q = pixel - 128, as octet's runtime
   loads it), then the ops. With `ticks`, the ticks of the input step (ticks[0]) and of each op
   (ticks[1 + j]). Returns the failing op + 1, or 0. */
static size_t infer(const uint8_t *img, int8_t *logits, arm_cmsis_nn_status *st, uint64_t *ticks)
{
    uint64_t t = ticks ? board_ticks() : 0;
    const size_t hw = (size_t)PEER_INPUT_H * PEER_INPUT_W;
    int8_t *x = act[0];
    for (size_t p = 0; p < hw; p++)
        for (size_t c = 0; c < PEER_INPUT_C; c++)
            x[p * PEER_INPUT_C + c] = (int8_t)(img[c * hw + p] ^ 0x80);
    if (ticks) {
        uint64_t now = board_ticks();
        ticks[0] = now - t;
        t = now;
    }
    for (size_t j = 0; j < PEER_N_OPS; j++) {
        int8_t *y = act[(j + 1) & 1];
        *st = run_op(&peer_ops[j], x, y);
        if (*st != ARM_CMSIS_NN_SUCCESS)
            return j + 1;
        x = y;
        if (ticks) {
            uint64_t now = board_ticks();
            ticks[1 + j] = now - t;
            t = now;
        }
    }
    memcpy(logits, x, PEER_OUTPUT_LEN);
    return 0;
}

int main(void)
{
    board_init();
    for (size_t j = 0; j < PEER_N_OPS; j++) {
        const struct peer_op *op = &peer_ops[j];
        if (op->kind != PEER_CONV)
            continue;
        const cmsis_nn_conv_params p = {
            .stride = {.w = op->stride, .h = op->stride},
            .padding = {.w = op->pad, .h = op->pad},
            .dilation = {.w = 1, .h = 1},
        };
        const cmsis_nn_dims in = {1, op->in.h, op->in.w, op->in.c};
        const cmsis_nn_dims f = {op->out.c, op->kernel_h, op->kernel_w, op->in.c};
        const cmsis_nn_dims out = {1, op->out.h, op->out.w, op->out.c};
        int32_t need = arm_convolve_wrapper_s8_get_buffer_size(&p, &in, &f, &out);
        if (need > (int32_t)sizeof scratch) {
            board_line_str("scratch too small for op ");
            board_line_int((int64_t)j);
            board_line_str(": needs ");
            board_line_int(need);
            board_line_str(" bytes; raise PEER_SCRATCH_BYTES in make_inputs' peer header");
            board_line_end();
            return 1;
        }
    }

    const size_t n_images = (size_t)(ex_images_end - ex_images) / INPUT_LEN;
    int8_t logits[PEER_OUTPUT_LEN];
    arm_cmsis_nn_status st;
    for (size_t i = 0; i < n_images; i++) {
        uint64_t t0 = board_ticks();
        size_t bad = infer(ex_images + i * INPUT_LEN, logits, &st, NULL);
        uint64_t t_run = board_ticks() - t0;
        if (bad)
            return failed(bad - 1, st);
        board_print_run(i, logits, PEER_OUTPUT_LEN, t_run);
    }
    /* Per op, in a second pass (the probes' own cost stays out of the totals above). */
    uint64_t ticks[PEER_N_OPS + 1];
    for (size_t i = 0; i < n_images; i++) {
        size_t bad = infer(ex_images + i * INPUT_LEN, logits, &st, ticks);
        if (bad)
            return failed(bad - 1, st);
        for (size_t j = 0; j <= PEER_N_OPS; j++) {
            board_line_str("ticks op ");
            board_line_int((int64_t)i);
            board_line_str(" ");
            board_line_int((int64_t)j);
            board_line_str(" ");
            board_line_int((int64_t)ticks[j]);
            board_line_str(" ");
            board_line_str(j ? peer_ops[j - 1].name : "input u8 CHW -> int8 HWC");
            board_line_end();
        }
    }
    board_print_calibration_and_stack();
    return 0;
}
