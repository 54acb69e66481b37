/*
 * A fleet on a private CA, from C: without the CA the client refuses the server's certificate;
 * with it (ferry_client_new_with, root_certificates_file) it loads over HTTPS. Bad options are
 * a configuration error.
 *
 * usage: private_ca SERVER TRUST_JSON_FILE CACHE_DIR CA_PEM_FILE MODEL DEVICE_JSON
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry.h"

static char *read_file(const char *path) {
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
  return buf;
}

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: private_ca SERVER TRUST CACHE CA_PEM MODEL DEVICE_JSON\n");
    return 2;
  }
  char *trust = read_file(argv[2]);
  if (!trust) return 2;

  /* The built-in web roots do not know the fleet's CA. */
  ferry_client *plain = NULL;
  if (ferry_client_new(argv[1], trust, argv[3], "1.0.0", &plain) != FERRY_OK) return 1;
  ferry_model *model = NULL;
  enum ferry_status s = ferry_load(plain, argv[5], argv[6], &model);
  printf("without the CA: status=%d code=%s message=%s\n", (int)s, ferry_last_error_code(),
         ferry_last_error_message());
  ferry_client_free(plain);

  /* Options out of range, or a key that does not exist. */
  ferry_client *bad = NULL;
  s = ferry_client_new_with(argv[1], trust, argv[3], "1.0.0", "{\"cache_budget\": 1}", &bad);
  printf("bad options: status=%d code=%s\n", (int)s, ferry_last_error_code());

  char options[4096];
  snprintf(options, sizeof options,
           "{\"root_certificates_file\": \"%s\", \"cache_budget_bytes\": 8388608, \"connect_timeout_ms\": 2000}",
           argv[4]);
  ferry_client *client = NULL;
  if (ferry_client_new_with(argv[1], trust, argv[3], "1.0.0", options, &client) != FERRY_OK) {
    printf("client: %s: %s\n", ferry_last_error_code(), ferry_last_error_message());
    return 1;
  }
  if (ferry_load(client, argv[5], argv[6], &model) != FERRY_OK) {
    printf("with the CA: %s: %s\n", ferry_last_error_code(), ferry_last_error_message());
    return 1;
  }
  printf("with the CA: variant=%s source=%s\n", ferry_model_info(model, FERRY_FIELD_VARIANT),
         ferry_model_info(model, FERRY_FIELD_SOURCE));
  ferry_model_free(model);
  ferry_client_free(client);
  free(trust);
  return 0;
}
