// Runs a .tflite model with TensorFlow Lite Micro's reference kernels over a
// batch of raw inputs, so that builds of TFLM with different compile-time
// options (TFLITE_SINGLE_ROUNDING) can be compared byte for byte.
//
// Usage: runner model.tflite inputs.bin N outputs.bin [arena_MiB]
//   inputs.bin  N records; each is the bytes of every input tensor, in the
//               model's input order, exactly as the tensors hold them.
//   outputs.bin written (through a temporary file and a rename) as N records
//               of every output tensor's bytes, in the model's output order.
// Exit codes: 0 success, 2 bad arguments, 1 anything else (message on stderr).
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tensorflow/lite/micro/micro_interpreter.h"
#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"
#include "tensorflow/lite/schema/schema_generated.h"

namespace {

constexpr int kOpCount = 26;
constexpr long kDefaultArenaMib = 64;

// Exits at once: after a failed AllocateTensors, TFLM's interpreter
// destructor dereferences the half-built graph, so no destructor may run.
[[noreturn]] int Fail(const std::string& message) {
  std::fprintf(stderr, "runner: %s\n", message.c_str());
  std::exit(1);
}

bool ReadFile(const char* path, std::vector<uint8_t>* out, std::string* err) {
  FILE* f = std::fopen(path, "rb");
  if (f == nullptr) {
    *err = std::string("cannot open ") + path + ": " + std::strerror(errno);
    return false;
  }
  uint8_t chunk[1 << 16];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof(chunk), f)) > 0) {
    out->insert(out->end(), chunk, chunk + n);
  }
  bool ok = std::ferror(f) == 0;
  std::fclose(f);
  if (!ok) *err = std::string("error reading ") + path;
  return ok;
}

// Writes beside the target and renames, so a failed run leaves no half file.
bool WriteFileAtomic(const char* path, const std::vector<uint8_t>& data,
                     std::string* err) {
  std::string tmp = std::string(path) + ".partial";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    *err = "cannot create " + tmp + ": " + std::strerror(errno);
    return false;
  }
  bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size();
  ok = (std::fclose(f) == 0) && ok;
  if (ok && std::rename(tmp.c_str(), path) != 0) ok = false;
  if (!ok) {
    std::remove(tmp.c_str());
    *err = std::string("cannot write ") + path + ": " + std::strerror(errno);
  }
  return ok;
}

// The ops of the small CNNs we export, and of TFLM's own example and
// integration-test models used to validate the build.
bool RegisterOps(tflite::MicroMutableOpResolver<kOpCount>* r) {
  return r->AddConv2D() == kTfLiteOk && r->AddDepthwiseConv2D() == kTfLiteOk &&
         r->AddFullyConnected() == kTfLiteOk && r->AddMaxPool2D() == kTfLiteOk &&
         r->AddAveragePool2D() == kTfLiteOk && r->AddMean() == kTfLiteOk &&
         r->AddAdd() == kTfLiteOk && r->AddReshape() == kTfLiteOk &&
         r->AddQuantize() == kTfLiteOk && r->AddDequantize() == kTfLiteOk &&
         r->AddSoftmax() == kTfLiteOk && r->AddPad() == kTfLiteOk &&
         r->AddRelu() == kTfLiteOk && r->AddRelu6() == kTfLiteOk &&
         r->AddMul() == kTfLiteOk && r->AddSub() == kTfLiteOk &&
         r->AddConcatenation() == kTfLiteOk && r->AddSqueeze() == kTfLiteOk &&
         r->AddLogistic() == kTfLiteOk && r->AddTanh() == kTfLiteOk &&
         r->AddStridedSlice() == kTfLiteOk && r->AddSum() == kTfLiteOk &&
         r->AddPadV2() == kTfLiteOk && r->AddTranspose() == kTfLiteOk &&
         r->AddLeakyRelu() == kTfLiteOk && r->AddTransposeConv() == kTfLiteOk;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    std::fprintf(stderr,
                 "usage: %s model.tflite inputs.bin N outputs.bin "
                 "[arena_MiB, default %ld]\n",
                 argv[0], kDefaultArenaMib);
    return 2;
  }
  char* end = nullptr;
  long count = std::strtol(argv[3], &end, 10);
  if (*argv[3] == '\0' || *end != '\0' || count < 1) {
    std::fprintf(stderr, "runner: N must be a positive integer, got '%s'\n",
                 argv[3]);
    return 2;
  }
  long arena_mib = kDefaultArenaMib;
  if (argc == 6) {
    arena_mib = std::strtol(argv[5], &end, 10);
    if (*argv[5] == '\0' || *end != '\0' || arena_mib < 1 || arena_mib > 4096) {
      std::fprintf(stderr, "runner: arena_MiB must be 1..4096, got '%s'\n",
                   argv[5]);
      return 2;
    }
  }

  std::string err;
  std::vector<uint8_t> model_bytes, inputs;
  if (!ReadFile(argv[1], &model_bytes, &err)) return Fail(err);
  if (!ReadFile(argv[2], &inputs, &err)) return Fail(err);
  flatbuffers::Verifier verifier(model_bytes.data(), model_bytes.size());
  if (!tflite::VerifyModelBuffer(verifier)) {
    return Fail(std::string(argv[1]) +
                " is not a valid TFLite flatbuffer (truncated or corrupt)");
  }
  const tflite::Model* model = tflite::GetModel(model_bytes.data());
  if (model->version() != TFLITE_SCHEMA_VERSION) {
    return Fail("model schema version " + std::to_string(model->version()) +
                ", this TFLM reads " + std::to_string(TFLITE_SCHEMA_VERSION));
  }

  static tflite::MicroMutableOpResolver<kOpCount> resolver;
  if (!RegisterOps(&resolver)) return Fail("registering the ops failed");
  size_t arena_size = static_cast<size_t>(arena_mib) << 20;
  // Declared before the interpreter, so freed after it: TFLM keeps its
  // allocator's own state inside the arena.
  std::unique_ptr<uint8_t, decltype(&std::free)> arena(
      static_cast<uint8_t*>(std::aligned_alloc(16, arena_size)), &std::free);
  if (arena == nullptr) return Fail("cannot allocate the arena");
  tflite::MicroInterpreter interpreter(model, resolver, arena.get(),
                                       arena_size);
  if (interpreter.AllocateTensors() != kTfLiteOk) {
    return Fail("AllocateTensors failed (an op the runner lacks, or an arena "
                "too small: pass a larger arena_MiB)");
  }

  size_t in_bytes = 0, out_bytes = 0;
  for (size_t i = 0; i < interpreter.inputs_size(); ++i) {
    in_bytes += interpreter.input(i)->bytes;
  }
  for (size_t i = 0; i < interpreter.outputs_size(); ++i) {
    out_bytes += interpreter.output(i)->bytes;
  }
  size_t n = static_cast<size_t>(count);
  if (inputs.size() != n * in_bytes) {
    return Fail(std::string(argv[2]) + " holds " +
                std::to_string(inputs.size()) + " bytes; " +
                std::to_string(n) + " records of " + std::to_string(in_bytes) +
                " bytes (the model's inputs) need " +
                std::to_string(n * in_bytes));
  }

  std::vector<uint8_t> outputs(n * out_bytes);
  const uint8_t* src = inputs.data();
  uint8_t* dst = outputs.data();
  for (size_t k = 0; k < n; ++k) {
    for (size_t i = 0; i < interpreter.inputs_size(); ++i) {
      TfLiteTensor* t = interpreter.input(i);
      std::memcpy(t->data.raw, src, t->bytes);
      src += t->bytes;
    }
    if (interpreter.Invoke() != kTfLiteOk) {
      return Fail("Invoke failed on record " + std::to_string(k));
    }
    for (size_t i = 0; i < interpreter.outputs_size(); ++i) {
      const TfLiteTensor* t = interpreter.output(i);
      std::memcpy(dst, t->data.raw, t->bytes);
      dst += t->bytes;
    }
  }
  if (!WriteFileAtomic(argv[4], outputs, &err)) return Fail(err);
  return 0;
}
