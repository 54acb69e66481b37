/*
 * ferry-client SDK example: load a model from a ferry server and run it once.
 *
 *   fetch_model SERVER TRUST_JSON CACHE_DIR MODEL DEVICE_JSON [ROWS COLS]
 *
 * The client resolves the model for the device DEVICE_JSON describes, downloads and verifies
 * the variant it is offered (falling back through the candidates, to the last known good copy
 * offline), checks the variant's signed golden output, and loads it into the ExecuTorch
 * runtime shipped in lib/executorch. The example then runs `forward` on a ROWS x COLS float32
 * tensor of ones (default 2 x 16, the demo model's input), prints what loaded and the
 * outputs, and sends the queued telemetry.
 *
 * Build against the unpacked package (see README in this folder):
 *   cc fetch_model.c $(PKG_CONFIG_PATH=../../../lib/pkgconfig pkg-config --cflags --libs ferry-client) -o fetch_model
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ferry.h"

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  if (fseek(f, 0, SEEK_END) != 0) {
    fclose(f);
    return NULL;
  }
  long n = ftell(f);
  if (n < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return NULL;
  }
  char *buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf) buf[n] = '\0';
  return buf;
}

static int fail(const char *what) {
  fprintf(stderr, "fetch_model: %s: %s: %s\n", what, ferry_last_error_code(), ferry_last_error_message());
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 6 && argc != 8) {
    fprintf(stderr, "usage: fetch_model SERVER TRUST_JSON CACHE_DIR MODEL DEVICE_JSON [ROWS COLS]\n");
    return 2;
  }
  char *trust = read_file(argv[2]);
  if (!trust) {
    fprintf(stderr, "fetch_model: cannot read %s\n", argv[2]);
    return 2;
  }
  long rows = argc == 8 ? atol(argv[6]) : 2, cols = argc == 8 ? atol(argv[7]) : 16;
  if (rows <= 0 || cols <= 0 || rows > 4096 || cols > 4096) {
    fprintf(stderr, "fetch_model: ROWS and COLS must be 1 to 4096\n");
    return 2;
  }
  long n = rows * cols;

  ferry_client *client = NULL;
  if (ferry_client_new(argv[1], trust, argv[3], "1.0.0", &client) != FERRY_OK) return fail("client");
  ferry_model *model = NULL;
  if (ferry_load(client, argv[4], argv[5], &model) != FERRY_OK) return fail("load");
  printf("loaded %s %s variant %s (%s) from %s\n", argv[4], ferry_model_info(model, FERRY_FIELD_RELEASE),
         ferry_model_info(model, FERRY_FIELD_VARIANT), ferry_model_info(model, FERRY_FIELD_DELEGATE),
         ferry_model_info(model, FERRY_FIELD_SOURCE));

  float *input = malloc((size_t)n * sizeof(float));
  if (!input) return 2;
  for (long i = 0; i < n; i++) input[i] = 1.0f;
  int64_t shape[2] = {rows, cols};
  float out[256];
  uintptr_t got = 0;
  if (ferry_model_run_f32(model, input, shape, 2, out, 256, &got) != FERRY_OK) return fail("run");
  printf("output (%lu values):", (unsigned long)got);
  for (uintptr_t i = 0; i < got && i < 8; i++) printf(" %.6f", out[i]);
  printf("\n");

  uintptr_t sent = 0, queued = 0;
  ferry_model_free(model);
  if (ferry_client_send_telemetry(client, &sent, &queued) != FERRY_OK) return fail("telemetry");
  printf("telemetry: %lu sent, %lu queued\n", (unsigned long)sent, (unsigned long)queued);
  ferry_client_free(client);
  free(input);
  free(trust);
  return 0;
}
