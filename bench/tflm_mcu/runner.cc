/* The peer on a Cortex-M4F (QEMU mps2-an386): stock TensorFlow Lite Micro with its CMSIS-NN
   kernels (OPTIMIZED_KERNEL_DIR=cmsis_nn) runs the embedded .tflite over the embedded input
   records, with the board code octet's C firmware uses (capi/examples/firmware: SysTick counted
   in instructions, semihosting output, painted stack). Prints the lines bench/mcu_peer.sh's
   parser reads: "logits I: …" (outputs of up to 64 bytes) and "ticks run I T" per record (a
   first pass, no profiler), "differ I N": the output bytes that differ from the host's (the
   embedded expected outputs), then "ticks op I J T NAME" per op (a second interpreter with a
   profiler on the same clock; TFLM calls it in builds that keep their error strings, such as
   BUILD_TYPE=release_with_logs), the arena TFLM used ("arena BYTES"), the calibration and the
   stack. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "board.h"
}

#include "tensorflow/lite/micro/micro_interpreter.h"
#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"
#include "tensorflow/lite/micro/micro_profiler_interface.h"
#include "tensorflow/lite/schema/schema_generated.h"

extern "C" const uint8_t ex_model[], ex_model_end[], ex_images[], ex_images_end[];
extern "C" const int8_t ex_expected[], ex_expected_end[];

#ifndef ARENA_BYTES
#define ARENA_BYTES (256 * 1024)
#endif

alignas(16) static uint8_t arena[ARENA_BYTES];

/* No heap on this board and nothing allocated: the deleting destructors of TFLM's virtual
   classes reference operator delete, which libstdc++ would bring in with malloc. */
void operator delete(void *) noexcept {}
void operator delete(void *, size_t) noexcept {}

/* The logging build's DebugLog formats with newlib's vsnprintf, which links malloc: with no
   heap, every request fails (it is never made: no error is logged in these runs). */
extern "C" void *_sbrk(ptrdiff_t) { return reinterpret_cast<void *>(-1); }

namespace {

/* Every op the MLPerf Tiny models hold (IC, KWS, AD, VWW). */
using Resolver = tflite::MicroMutableOpResolver<10>;

bool add_ops(Resolver &r)
{
    return r.AddConv2D() == kTfLiteOk && r.AddDepthwiseConv2D() == kTfLiteOk &&
           r.AddFullyConnected() == kTfLiteOk && r.AddAdd() == kTfLiteOk &&
           r.AddAveragePool2D() == kTfLiteOk && r.AddMaxPool2D() == kTfLiteOk &&
           r.AddSoftmax() == kTfLiteOk && r.AddReshape() == kTfLiteOk &&
           r.AddQuantize() == kTfLiteOk && r.AddDequantize() == kTfLiteOk;
}

/* Each op's ticks of one Invoke, in order. */
class OpTicks : public tflite::MicroProfilerInterface {
  public:
    static constexpr int kMax = 64;
    uint32_t BeginEvent(const char *tag) override
    {
        if (n_ >= kMax)
            return kMax;
        tag_[n_] = tag;
        start_[n_] = board_ticks();
        return n_++;
    }
    void EndEvent(uint32_t handle) override
    {
        if (handle < kMax)
            ticks_[handle] = board_ticks() - start_[handle];
    }
    void Reset() { n_ = 0; }
    int count() const { return n_; }
    const char *tag(int i) const { return tag_[i]; }
    uint64_t ticks(int i) const { return ticks_[i]; }

  private:
    int n_ = 0;
    const char *tag_[kMax] = {};
    uint64_t start_[kMax] = {}, ticks_[kMax] = {};
};

int fail(const char *what)
{
    board_line_str(what);
    board_line_end();
    return 1;
}

/* One pass over the records: logits and whole-run ticks, or (with `prof`) each op's ticks. */
int pass(const tflite::Model *model, Resolver &resolver, OpTicks *prof)
{
    tflite::MicroInterpreter interp(model, resolver, arena, sizeof arena, nullptr, prof);
    if (interp.AllocateTensors() != kTfLiteOk)
        return fail("AllocateTensors failed (raise ARENA_BYTES?)");
    TfLiteTensor *in = interp.input(0), *out = interp.output(0);
    if (in->type != kTfLiteInt8 || out->type != kTfLiteInt8)
        return fail("the model's input and output must be int8");
    size_t n_in = in->bytes, n_out = out->bytes;
    size_t n_images = (size_t)(ex_images_end - ex_images) / n_in;
    for (size_t i = 0; i < n_images; i++) {
        memcpy(in->data.int8, ex_images + i * n_in, n_in);
        if (prof)
            prof->Reset();
        uint64_t t0 = board_ticks();
        if (interp.Invoke() != kTfLiteOk)
            return fail("Invoke failed");
        uint64_t t = board_ticks() - t0;
        if (!prof) {
            if (n_out <= 64) {
                board_print_run(i, out->data.int8, n_out, t);
            } else {
                board_line_str("ticks run ");
                board_line_int((int64_t)i);
                board_line_str(" ");
                board_line_int((int64_t)t);
                board_line_end();
            }
            size_t differ = 0;
            for (size_t j = 0; j < n_out; j++) {
                size_t at = i * n_out + j;
                differ += at >= (size_t)(ex_expected_end - ex_expected) ||
                          ex_expected[at] != out->data.int8[j];
            }
            board_line_str("differ ");
            board_line_int((int64_t)i);
            board_line_str(" ");
            board_line_int((int64_t)differ);
            board_line_end();
            continue;
        }
        for (int j = 0; j < prof->count(); j++) {
            board_line_str("ticks op ");
            board_line_int((int64_t)i);
            board_line_str(" ");
            board_line_int(j + 1);
            board_line_str(" ");
            board_line_int((int64_t)prof->ticks(j));
            board_line_str(" ");
            board_line_str(prof->tag(j));
            board_line_end();
        }
    }
    if (!prof) {
        board_line_str("arena ");
        board_line_int((int64_t)interp.arena_used_bytes());
        board_line_end();
    }
    return 0;
}

} // namespace

int main(void)
{
    board_init();
    const tflite::Model *model = tflite::GetModel(ex_model);
    if (model->version() != TFLITE_SCHEMA_VERSION)
        return fail("the model's schema version is not this TFLM's");
    // Locals, not statics: nothing to register for exit (no heap, no atexit on this board).
    Resolver resolver;
    if (!add_ops(resolver))
        return fail("registering the ops failed");
    OpTicks prof;
    if (pass(model, resolver, nullptr) || pass(model, resolver, &prof))
        return 1;
    board_print_calibration_and_stack();
    return 0;
}
