/* The embedded inputs: the model and its packed image (part of the firmware, in .rodata) and
   the test images (in .testdata, outside the flash figure). MODEL_FILE, IMAGE_FILE and
   IMAGES_FILE are paths given with -D; building the peer defines no MODEL_FILE, a firmware
   without the Cortex-M kernels no IMAGE_FILE. EXPECTED_FILE (optional, .testdata too): the host's
   outputs for the images, for a firmware that compares its own. */
#define STR_(x) #x
#define STR(x) STR_(x)

#ifdef MODEL_FILE
    .section .rodata.ex_model, "a"
    .balign 16
    .global ex_model
ex_model:
    .incbin STR(MODEL_FILE)
    .global ex_model_end
ex_model_end:
#endif

#ifdef IMAGE_FILE
    /* The packed image: at a 64-byte aligned address, as octet_model_prepare_image needs. */
    .section .rodata.ex_image, "a"
    .balign 64
    .global ex_image
ex_image:
    .incbin STR(IMAGE_FILE)
    .global ex_image_end
ex_image_end:
#endif

    .section .testdata, "a"
    .balign 16
    .global ex_images
ex_images:
    .incbin STR(IMAGES_FILE)
    .global ex_images_end
ex_images_end:

#ifdef EXPECTED_FILE
    .balign 16
    .global ex_expected
ex_expected:
    .incbin STR(EXPECTED_FILE)
    .global ex_expected_end
ex_expected_end:
#endif
