// The rest of a clock step for a fault run: preloaded after libfaketime into a service whose wall clock the run
// steps. libfaketime fakes what the process reads, not the kernel's clock, so a wait the process hands the kernel
// as an absolute wall-clock time computed from what it read lasts the fake offset longer (or shorter) than asked.
// Abseil's mutexes and condition variables wait so (futex FUTEX_WAIT_BITSET with FUTEX_CLOCK_REALTIME, through
// glibc's syscall()), and gRPC's timers on them: under +100 s every timed wait of a service lasted 100 s more,
// which no real step does (it moves the kernel's clock too). This moves such a wait's time by the fake offset
// onto the kernel's clock. libfaketime itself corrects pthread_cond_timedwait and sem_timedwait the same way.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <time.h>

typedef long (*SyscallFn)(long, ...);

static SyscallFn RealSyscall(void) {
  static SyscallFn real;
  if (real == NULL) real = (SyscallFn)dlsym(RTLD_NEXT, "syscall");
  return real;
}

// The faked wall clock (libfaketime's clock_gettime, preloaded before this) minus the kernel's, in nanoseconds.
static long long FakeOffset(void) {
  struct timespec fake, real;
  if (clock_gettime(CLOCK_REALTIME, &fake) != 0) return 0;
  if (RealSyscall()(SYS_clock_gettime, CLOCK_REALTIME, &real) != 0) return 0;
  return (fake.tv_sec - real.tv_sec) * 1000000000LL + (fake.tv_nsec - real.tv_nsec);
}

long syscall(long number, ...) {
  va_list ap;
  va_start(ap, number);
  long a[6];
  for (int i = 0; i < 6; ++i) a[i] = va_arg(ap, long);
  va_end(ap);
  const int op = (int)a[1];
  const struct timespec* timeout = (const struct timespec*)a[3];
  struct timespec kernel;
  if (number == SYS_futex && timeout != NULL && (op & FUTEX_CLOCK_REALTIME) &&
      (op & FUTEX_CMD_MASK) == FUTEX_WAIT_BITSET) {
    const long long at = timeout->tv_sec * 1000000000LL + timeout->tv_nsec - FakeOffset();
    kernel.tv_sec = at / 1000000000LL;
    kernel.tv_nsec = at % 1000000000LL;
    if (kernel.tv_nsec < 0) {
      kernel.tv_sec -= 1;
      kernel.tv_nsec += 1000000000LL;
    }
    a[3] = (long)&kernel;
  }
  return RealSyscall()(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
