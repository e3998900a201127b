// A slow disk for a fault run: preloaded into a service (LD_PRELOAD), it delays each fsync and fdatasync by the
// milliseconds written in the file CORRAL_SLOW_FSYNC_FILE names, while that file exists. The nemesis writes and
// removes the file; the service runs its real code against its real filesystem, only slower to make writes
// durable, as a saturated or failing disk is.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void Delay(void) {
  const char* path = getenv("CORRAL_SLOW_FSYNC_FILE");
  if (path == NULL) return;
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char text[16] = {0};
  const ssize_t n = read(fd, text, sizeof(text) - 1);
  close(fd);
  const long ms = n > 0 ? strtol(text, NULL, 10) : 0;
  if (ms <= 0) return;
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0) {
  }
}

int fsync(int fd) {
  static int (*real)(int);
  if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  Delay();
  return real(fd);
}

int fdatasync(int fd) {
  static int (*real)(int);
  if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
  Delay();
  return real(fd);
}
