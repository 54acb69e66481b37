/*
 * Loads a sealed variant through ferry's C ABI with no change from a plain one (keys held in
 * memory only: "sealed_key_store": "memory"), then reads one of its assets with
 * ferry_model_read_asset a few bytes at a time (the cached file is ciphertext; the function
 * decrypts as it reads).
 *
 * usage: sealed_asset SERVER TRUST_JSON_FILE CACHE_DIR MODEL ASSET
 * prints: variant=ID, the asset's bytes between "asset<<<" and ">>>", and size=N
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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

static int fail(const char *what) {
  fprintf(stderr, "%s: %s: %s\n", what, ferry_last_error_code(), ferry_last_error_message());
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: sealed_asset SERVER TRUST CACHE MODEL ASSET\n");
    return 2;
  }
  char *trust = read_file(argv[2]);
  if (!trust) return 2;
  ferry_client *client;
  if (ferry_client_new_with(argv[1], trust, argv[3], "1.0.0", "{\"sealed_key_store\":\"memory\"}",
                            &client) != FERRY_OK)
    return fail("client");
  ferry_model *model;
  if (ferry_load(client, argv[4], "{\"install_id\":\"c-sealed\",\"platform\":\"linux\",\"ram_mb\":4096}",
                 &model) != FERRY_OK)
    return fail("load");
  printf("variant=%s\n", ferry_model_info(model, FERRY_FIELD_VARIANT));
  uint8_t buf[7];
  uint64_t offset = 0, size = 0;
  size_t got = 0;
  printf("asset<<<");
  do {
    if (ferry_model_read_asset(model, argv[5], offset, buf, sizeof buf, &got, &size) != FERRY_OK)
      return fail("read_asset");
    fwrite(buf, 1, got, stdout);
    offset += got;
  } while (got > 0);
  printf(">>>\nsize=%llu\n", (unsigned long long)size);
  if (ferry_model_read_asset(model, "absent.txt", 0, buf, sizeof buf, &got, NULL) != FERRY_ERR_LOAD)
    return fail("absent asset");
  printf("absent: %s\n", ferry_last_error_code());
  ferry_model_free(model);
  ferry_client_free(client);
  free(trust);
  return 0;
}
