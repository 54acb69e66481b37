/* A driver bug on demand, for the crash-safe loading tests: preloaded (LD_PRELOAD) into an app
 * process, it watches the files the process opens and, on the Nth pread of a file whose path
 * contains FERRY_CRASH_PATH, does what FERRY_CRASH_HOW says:
 *
 *   segv   raise SIGSEGV (a driver or runtime crash)
 *   abort  abort() (SIGABRT: a failed assertion in native code)
 *   kill   raise SIGKILL (what the OOM killer does)
 *   hang   block forever (a hung driver; the test kills the process, as a watchdog would)
 *
 * FERRY_CRASH_AT_READ is N (default 1); with FERRY_CRASH_SEGMENT=1 only reads past the start of
 * the file count. ExecuTorch's FileDataLoader reads a program's header and flatbuffer (from
 * offset 0) with pread under Program::load, and XNNPACK reads its delegate segment (further
 * in) with pread under Method::load, so the action happens inside the runtime's own call, with
 * its frames on the stack. The client's own reads (hashing, the delegation report) use read(2)
 * and are left alone. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define MAX_FD 4096
static unsigned char watched[MAX_FD];
static long reads;

static void note(int fd, const char *path) {
    const char *want = getenv("FERRY_CRASH_PATH");
    if (fd >= 0 && fd < MAX_FD) {
        watched[fd] = (want && *want && path && strstr(path, want)) ? 1 : 0;
    }
}

static void act(void) {
    const char *how = getenv("FERRY_CRASH_HOW");
    if (!how || !strcmp(how, "segv")) {
        raise(SIGSEGV);
    } else if (!strcmp(how, "abort")) {
        abort();
    } else if (!strcmp(how, "kill")) {
        raise(SIGKILL);
    } else if (!strcmp(how, "hang")) {
        for (;;) {
            pause();
        }
    }
}

static void maybe_act(int fd, long long offset) {
    if (fd < 0 || fd >= MAX_FD || !watched[fd]) {
        return;
    }
    const char *segment = getenv("FERRY_CRASH_SEGMENT");
    if (segment && !strcmp(segment, "1") && offset == 0) {
        return;
    }
    const char *at = getenv("FERRY_CRASH_AT_READ");
    long n = at ? atol(at) : 1;
    if (++reads >= (n > 0 ? n : 1)) {
        act();
    }
}

static mode_t mode_of(int flags, va_list ap) {
    return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...) {
    static int (*real)(const char *, int, ...);
    if (!real) real = dlsym(RTLD_NEXT, "open");
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    int fd = real(path, flags, mode);
    note(fd, path);
    return fd;
}

int open64(const char *path, int flags, ...) {
    static int (*real)(const char *, int, ...);
    if (!real) real = dlsym(RTLD_NEXT, "open64");
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    int fd = real(path, flags, mode);
    note(fd, path);
    return fd;
}

int openat(int dir, const char *path, int flags, ...) {
    static int (*real)(int, const char *, int, ...);
    if (!real) real = dlsym(RTLD_NEXT, "openat");
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    int fd = real(dir, path, flags, mode);
    note(fd, path);
    return fd;
}

int openat64(int dir, const char *path, int flags, ...) {
    static int (*real)(int, const char *, int, ...);
    if (!real) real = dlsym(RTLD_NEXT, "openat64");
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    int fd = real(dir, path, flags, mode);
    note(fd, path);
    return fd;
}

int close(int fd) {
    static int (*real)(int);
    if (!real) real = dlsym(RTLD_NEXT, "close");
    if (fd >= 0 && fd < MAX_FD) watched[fd] = 0;
    return real(fd);
}

ssize_t pread(int fd, void *buf, size_t count, off_t offset) {
    static ssize_t (*real)(int, void *, size_t, off_t);
    if (!real) real = dlsym(RTLD_NEXT, "pread");
    maybe_act(fd, (long long)offset);
    return real(fd, buf, count, offset);
}

ssize_t pread64(int fd, void *buf, size_t count, off64_t offset) {
    static ssize_t (*real)(int, void *, size_t, off64_t);
    if (!real) real = dlsym(RTLD_NEXT, "pread64");
    maybe_act(fd, (long long)offset);
    return real(fd, buf, count, offset);
}
