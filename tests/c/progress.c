/*
 * Download progress and a client handle shared by two threads, as an app uses them: a worker
 * thread loads a model (a large download) while the main thread, like a UI thread, asks the
 * same handle for the progress and sets the thermal state; a progress callback sees every
 * step. The model is then run from two threads at once on one model handle.
 *
 * usage: progress SERVER TRUST_JSON_FILE CACHE_DIR MODEL DEVICE_JSON
 * prints: callbacks=N backwards=B last=DONE/TOTAL mid_polls=M status=S run_errors=E
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

struct seen {
  unsigned long calls;
  unsigned long backwards;
  uint64_t done;
  uint64_t total;
};

/* Runs on the downloading thread. */
static void on_progress(void *user_data, const char *variant, uint64_t done, uint64_t total) {
  struct seen *s = user_data;
  if (variant == NULL || done > total || done < s->done) s->backwards++;
  s->calls++;
  s->done = done;
  s->total = total;
}

struct job {
  ferry_client *client;
  const char *model;
  const char *device;
  ferry_status status;
  ferry_model *out;
  int finished;
};

static void *load(void *p) {
  struct job *j = p;
  j->status = ferry_load(j->client, j->model, j->device, &j->out);
  __atomic_store_n(&j->finished, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

struct runner {
  ferry_model *model;
  int errors;
};

static void *run_many(void *p) {
  struct runner *r = p;
  /* The fixture MLP takes a 2 x 16 float input. */
  float input[32];
  for (int i = 0; i < 32; i++) input[i] = (float)i / 32.0f;
  int64_t shape[2] = {2, 16};
  float output[256];
  for (int i = 0; i < 200; i++) {
    size_t len = 0;
    if (ferry_model_run_f32(r->model, input, shape, 2, output, 256, &len) != FERRY_OK) r->errors++;
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: progress SERVER TRUST CACHE MODEL DEVICE_JSON\n");
    return 2;
  }
  char *trust = read_file(argv[2]);
  if (!trust) return 2;
  ferry_client *client = NULL;
  if (ferry_client_new(argv[1], trust, argv[3], "1.0.0", &client) != FERRY_OK) {
    fprintf(stderr, "client: %s\n", ferry_last_error_message());
    return 1;
  }
  uint64_t done = 1, total = 1;
  if (ferry_client_progress(client, &done, &total) != FERRY_OK || done != 0 || total != 0) {
    fprintf(stderr, "progress before any download: %llu/%llu\n", (unsigned long long)done,
            (unsigned long long)total);
    return 1;
  }
  if (ferry_client_progress(client, NULL, &total) != FERRY_ERR_INVALID_ARGUMENT) return 1;
  struct seen seen = {0, 0, 0, 0};
  ferry_client_set_progress(client, on_progress, &seen);

  struct job job = {client, argv[4], argv[5], FERRY_ERR_INTERNAL, NULL, 0};
  pthread_t worker;
  pthread_create(&worker, NULL, load, &job);
  /* The "UI thread": asks while the worker downloads. */
  unsigned long mid_polls = 0;
  while (!__atomic_load_n(&job.finished, __ATOMIC_SEQ_CST)) {
    if (ferry_client_progress(client, &done, &total) != FERRY_OK) return 1;
    if (total > 0 && done > 0 && done < total) mid_polls++;
    ferry_client_set_thermal_state(client, "fair");
    struct timespec pause = {0, 2000000};
    nanosleep(&pause, NULL);
  }
  pthread_join(worker, NULL);
  if (job.status != FERRY_OK) {
    fprintf(stderr, "load: %s: %s\n", ferry_last_error_code(), ferry_last_error_message());
    return 1;
  }
  ferry_client_set_progress(client, NULL, NULL);

  /* Two threads run one model handle at once; the runs take turns. */
  struct runner a = {job.out, 0}, b = {job.out, 0};
  pthread_t ta, tb;
  pthread_create(&ta, NULL, run_many, &a);
  pthread_create(&tb, NULL, run_many, &b);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);

  printf("callbacks=%lu backwards=%lu last=%llu/%llu mid_polls=%lu status=%d run_errors=%d\n",
         seen.calls, seen.backwards, (unsigned long long)seen.done, (unsigned long long)seen.total,
         mid_polls, (int)job.status, a.errors + b.errors);
  ferry_model_free(job.out);
  ferry_client_free(client);
  free(trust);
  return 0;
}
