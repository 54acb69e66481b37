/* Runs the typed-io model through ferry's typed C ABI (ferry_model_run): int64 ids and int8
 * flags in, float32, int64 and bool out; prints the release's signed metadata first. Built and
 * run by tests/tests/c_abi.rs.
 * Arguments: server, trust.json, cache folder, ids file (int64), flags file (int8), rows, cols. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ferry.h"

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf) buf[n] = 0;
  if (len) *len = (size_t)n;
  return buf;
}

static int fail(const char *what) {
  fprintf(stderr, "%s: %s: %s\n", what, ferry_last_error_code(), ferry_last_error_message());
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 8) return 2;
  size_t ids_len = 0, flags_len = 0;
  char *trust = slurp(argv[2], NULL);
  char *ids = slurp(argv[4], &ids_len);
  char *flags = slurp(argv[5], &flags_len);
  if (!trust || !ids || !flags) return 2;
  int64_t shape[2] = {atoll(argv[6]), atoll(argv[7])};

  ferry_client *client;
  if (ferry_client_new(argv[1], trust, argv[3], "1.0.0", &client) != FERRY_OK) return fail("client");
  ferry_model *model;
  if (ferry_load(client, "typed-io", "{\"install_id\":\"c-typed\",\"platform\":\"linux\",\"ram_mb\":4096}",
                 &model) != FERRY_OK)
    return fail("load");

  /* The release's signed metadata: labels (one per line), preprocessing, an asset by path. */
  printf("labels: %s\n", ferry_model_info(model, FERRY_FIELD_LABELS));
  ferry_preprocess pre;
  if (ferry_model_preprocess(model, &pre) != FERRY_OK) return fail("preprocess");
  printf("preprocess: resize=%ux%u filter=%d color=%d layout=%d range=%g..%g mean_len=%u mean0=%g std0=%g\n",
         pre.resize_width, pre.resize_height, (int)pre.resize_filter, (int)pre.color, (int)pre.layout,
         pre.range_low, pre.range_high, pre.mean_len, pre.mean[0], pre.std[0]);
  const char *labels_path = ferry_model_asset_path(model, "digits-labels.txt");
  printf("asset: %s\n", labels_path ? labels_path : "(none)");
  printf("no asset: %s\n", ferry_model_asset_path(model, "absent.txt") ? "found" : "(none)");

  ferry_tensor inputs[2] = {
      {FERRY_DTYPE_INT64, shape, 2, ids, ids_len},
      {FERRY_DTYPE_INT8, shape, 2, flags, flags_len},
  };
  /* A wrong byte count is refused with the reason. */
  ferry_tensor bad[2] = {inputs[0], inputs[1]};
  bad[1].nbytes = flags_len - 1;
  ferry_outputs *outs = NULL;
  if (ferry_model_run(model, NULL, bad, 2, &outs) != FERRY_ERR_INVALID_ARGUMENT) {
    fprintf(stderr, "a short input was not refused\n");
    return 1;
  }
  printf("refused: %s\n", ferry_last_error_message());

  /* The method by name and the loaded one (NULL) give the same outputs. */
  ferry_outputs *named = NULL;
  if (ferry_model_run(model, "forward", inputs, 2, &named) != FERRY_OK) return fail("run forward");
  if (ferry_model_run(model, NULL, inputs, 2, &outs) != FERRY_OK) return fail("run");
  if (ferry_outputs_len(named) != ferry_outputs_len(outs)) return 1;
  ferry_outputs_free(named);
  size_t n = ferry_outputs_len(outs);
  for (size_t i = 0; i < n; i++) {
    ferry_tensor t;
    if (ferry_outputs_get(outs, i, &t) != FERRY_OK) return fail("get");
    printf("out %zu dtype=%u shape=", i, t.dtype);
    for (size_t d = 0; d < t.ndim; d++) printf(d ? ",%lld" : "%lld", (long long)t.shape[d]);
    printf(" values=");
    size_t count = 1;
    for (size_t d = 0; d < t.ndim; d++) count *= (size_t)t.shape[d];
    size_t size = t.dtype == FERRY_DTYPE_FLOAT32 ? 4 : t.dtype == FERRY_DTYPE_INT64 ? 8 : 1;
    if (t.nbytes != count * size) {
      fprintf(stderr, "output %zu: %zu bytes for %zu elements\n", i, t.nbytes, count);
      return 1;
    }
    for (size_t k = 0; k < count; k++) {
      double v;
      switch (t.dtype) {
        case FERRY_DTYPE_FLOAT32: v = ((const float *)t.data)[k]; break;
        case FERRY_DTYPE_INT64: v = (double)((const int64_t *)t.data)[k]; break;
        case FERRY_DTYPE_BOOL: v = ((const unsigned char *)t.data)[k]; break;
        default: fprintf(stderr, "output %zu: unexpected dtype %u\n", i, t.dtype); return 1;
      }
      printf(k ? " %.9g" : "%.9g", v);
    }
    printf("\n");
  }
  ferry_outputs_free(outs);

  /* The device's thermal state, as the app learns it from the OS; an unknown name is refused. */
  if (ferry_client_set_thermal_state(client, "hot") != FERRY_ERR_INVALID_ARGUMENT) {
    fprintf(stderr, "an unknown thermal state was not refused\n");
    return 1;
  }
  if (ferry_client_set_thermal_state(client, "fair") != FERRY_OK) return fail("thermal");
  /* An app metric, recorded against the loaded model; a bad name or value is refused. */
  size_t took = 0;
  if (ferry_client_record_metric(client, "accepted", 1.0, &took) != FERRY_OK || took != 1) {
    return fail("record_metric");
  }
  if (ferry_client_record_metric(client, "Not A Name", 1.0, NULL) != FERRY_ERR_INVALID_ARGUMENT ||
      ferry_client_record_metric(client, "accepted", 1e300, NULL) != FERRY_ERR_INVALID_ARGUMENT ||
      ferry_client_record_metric(client, NULL, 1.0, NULL) != FERRY_ERR_INVALID_ARGUMENT) {
    fprintf(stderr, "a bad metric was not refused\n");
    return 1;
  }
  printf("metric recorded for %zu model(s)\n", took);
  /* Freeing the model queues its run timings; the send takes them with the load's events. */
  ferry_model_free(model);
  size_t sent = 0, queued = 99;
  if (ferry_client_send_telemetry(client, &sent, &queued) != FERRY_OK) return fail("telemetry");
  printf("telemetry sent=%zu queued=%zu\n", sent, queued);
  ferry_client_free(client);
  free(trust);
  free(ids);
  free(flags);
  return 0;
}
