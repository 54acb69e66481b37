/*
 * Loads a model through ferry's C ABI end to end, as a Kotlin (JNI) or Swift app would:
 * create a client, load (resolve, download, verify, cache, fall back), run forward, compare.
 *
 * usage: load_model SERVER TRUST_JSON_FILE CACHE_DIR MODEL DEVICE_JSON INPUT.f32 EXPECTED.f32 ATOL D0 D1
 * INPUT.f32 and EXPECTED.f32 are raw little-endian float32 arrays; D0 D1 the input shape.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ferry.h"

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
    fclose(f);
    free(buf);
    return NULL;
  }
  fclose(f);
  buf[n] = '\0';
  *len = (size_t)n;
  return buf;
}

static int fail(const char *what) {
  fprintf(stderr, "%s: %s: %s\n", what, ferry_last_error_code(), ferry_last_error_message());
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 11) {
    fprintf(stderr, "usage: load_model SERVER TRUST CACHE MODEL DEVICE_JSON INPUT EXPECTED ATOL D0 D1\n");
    return 2;
  }
  size_t trust_len = 0, in_len = 0, exp_len = 0;
  char *trust = read_file(argv[2], &trust_len);
  char *input = read_file(argv[6], &in_len);
  char *expected = read_file(argv[7], &exp_len);
  if (!trust || !input || !expected) {
    fprintf(stderr, "cannot read input files\n");
    return 2;
  }
  double atol = atof(argv[8]);
  int64_t shape[2] = {atoll(argv[9]), atoll(argv[10])};

  /* Bad arguments are reported, not crashed on. */
  ferry_client *bad = NULL;
  if (ferry_client_new(NULL, trust, argv[3], "1.0.0", &bad) != FERRY_ERR_INVALID_ARGUMENT) {
    fprintf(stderr, "NULL server was accepted\n");
    return 1;
  }

  ferry_client *client = NULL;
  if (ferry_client_new(argv[1], trust, argv[3], "1.0.0", &client) != FERRY_OK) return fail("client");
  ferry_model *model = NULL;
  if (ferry_load(client, argv[4], argv[5], &model) != FERRY_OK) return fail("load");

  size_t n_out = exp_len / sizeof(float);
  float *out = calloc(n_out, sizeof(float));
  size_t got = 0;
  if (ferry_model_run_f32(model, (const float *)input, shape, 2, out, 0, &got) != FERRY_ERR_BUFFER_TOO_SMALL ||
      got != n_out) {
    fprintf(stderr, "a too-small buffer was not reported (got %zu)\n", got);
    return 1;
  }
  if (ferry_model_run_f32(model, (const float *)input, shape, 2, out, n_out, &got) != FERRY_OK) return fail("run");
  const float *want = (const float *)expected;
  double max_diff = 0.0;
  for (size_t i = 0; i < got; i++) {
    double d = fabs((double)out[i] - (double)want[i]);
    if (d > max_diff) max_diff = d;
  }
  printf("variant=%s release=%s delegate=%s source=%s max_abs_diff=%g\n",
         ferry_model_info(model, FERRY_FIELD_VARIANT), ferry_model_info(model, FERRY_FIELD_RELEASE),
         ferry_model_info(model, FERRY_FIELD_DELEGATE), ferry_model_info(model, FERRY_FIELD_SOURCE), max_diff);
  printf("report=%s\n", ferry_model_info(model, FERRY_FIELD_REPORT));
  printf("contract=%s\n", ferry_model_info(model, FERRY_FIELD_CONTRACT));
  /* The same elements as one flat dimension break the signed contract. */
  int64_t flat[1] = {shape[0] * shape[1]};
  if (ferry_model_run_f32(model, (const float *)input, flat, 1, out, n_out, &got) != FERRY_ERR_RUN) {
    fprintf(stderr, "an input against the contract was not refused\n");
    return 1;
  }
  printf("against the contract: code=%s\n", ferry_last_error_code());
  if (ferry_model_info(model, 999) != NULL) {
    fprintf(stderr, "an unknown field was answered\n");
    return 1;
  }
  ferry_model_free(model);
  ferry_client_free(client);
  free(out);
  free(trust);
  free(input);
  free(expected);
  return max_diff <= atol ? 0 : 1;
}
