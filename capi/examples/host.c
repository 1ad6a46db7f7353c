/* octet's C API on the host: runs a model on a file of inputs and prints their outputs.
 *
 *   host MODEL.o8 INPUTS.bin
 *
 * INPUTS.bin holds whole inputs back to back, each in the model's input encoding (u8 pixels,
 * planar C x H x W, or the int8 tensor, H x W x C: printed to stderr with its quantization). All
 * inputs run as one batch; the output is one "logits I: v v ..." line per input. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "octet.h"

/* The whole file in a malloc'd buffer (the library itself never allocates). */
static uint8_t *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return NULL;
    }
    uint8_t *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc(n ? (size_t)n : 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        fclose(f);
        *len = (size_t)n;
        return buf;
    }
    fprintf(stderr, "%s: cannot read the file\n", path);
    free(buf);
    fclose(f);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL.o8 INPUTS.bin\n", argv[0]);
        return 2;
    }
    size_t model_len, pixels_len;
    uint8_t *model_bytes = read_file(argv[1], &model_len);
    uint8_t *pixels = read_file(argv[2], &pixels_len);
    if (!model_bytes || !pixels)
        return 1;

    OctetModel model;
    OctetStatus s = octet_model_parse(&model, model_bytes, model_len);
    if (s != OCTET_STATUS_OK) {
        fprintf(stderr, "%s: %s\n", argv[1], octet_status_message(s));
        return 1;
    }
    /* Once: every op's parameters, and the weights laid out for this CPU's kernels. */
    size_t prepared_len = octet_model_prepared_bytes(&model);
    uint8_t *prepared = malloc(prepared_len);
    if (!prepared) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    if ((s = octet_model_prepare(&model, prepared, prepared_len)) != OCTET_STATUS_OK) {
        fprintf(stderr, "%s: %s\n", argv[1], octet_status_message(s));
        return 1;
    }
    OctetInputEncoding encoding;
    float scale;
    int32_t zero_point;
    if ((s = octet_model_input_encoding(&model, &encoding)) != OCTET_STATUS_OK ||
        (s = octet_model_input_quant(&model, &scale, &zero_point)) != OCTET_STATUS_OK) {
        fprintf(stderr, "%s: %s\n", argv[1], octet_status_message(s));
        return 1;
    }
    fprintf(stderr, "input: %s, scale %g, zero point %d\n",
            encoding == OCTET_INPUT_ENCODING_I8_HWC     ? "int8 H x W x C"
            : encoding == OCTET_INPUT_ENCODING_U8_HWC ? "u8 H x W x C, q = u - 128"
                                                      : "u8 pixels C x H x W, q = pixel - 128",
            (double)scale, (int)zero_point);
    size_t n_in = octet_model_input_len(&model), n_out = octet_model_output_len(&model);
    size_t batch = pixels_len / n_in;
    size_t arena_len = octet_model_arena_bytes(&model, batch);
    uint8_t *arena = malloc(arena_len);
    int8_t *logits = malloc(batch * n_out + 1);
    if (!arena || !logits) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    s = octet_model_run(&model, pixels, pixels_len, arena, arena_len, logits, batch * n_out);
    if (s != OCTET_STATUS_OK) {
        fprintf(stderr, "%s: %s\n", argv[2], octet_status_message(s));
        return 1;
    }
    for (size_t i = 0; i < batch; i++) {
        printf("logits %zu:", i);
        for (size_t j = 0; j < n_out; j++)
            printf(" %d", logits[i * n_out + j]);
        printf("\n");
    }
    free(logits);
    free(arena);
    free(prepared);
    free(pixels);
    free(model_bytes);
    return 0;
}
