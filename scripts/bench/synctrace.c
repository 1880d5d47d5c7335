// LD_PRELOAD interposer: counts the host's CUDA synchronizations and prints the stack of a few
// of them after SYNC_FROM calls (the steady state). Diagnostic only: it finds
// where a host sync per step comes from (docs/benchmarks.md, "No host sync per step").
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
typedef int (*fn1)(void*);
typedef int (*fn0)(void);
static long counts[4];
static const char* names[4] = {"cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize", "cudaStreamWaitEvent"};
static void report(int which) {
  long n = ++counts[which];
  long from = getenv("SYNC_FROM") ? atol(getenv("SYNC_FROM")) : 1000;
  if (which < 3 && n >= from && n < from + 2) {
    void* bt[40];
    int k = backtrace(bt, 40);
    fprintf(stderr, "SYNCTRACE %s #%ld pid %d\n", names[which], n, getpid());
    backtrace_symbols_fd(bt, k, 2);
    fprintf(stderr, "SYNCTRACE end\n");
  }
}
__attribute__((destructor)) static void done(void) {
  fprintf(stderr, "SYNCCOUNT pid %d: stream %ld event %ld device %ld\n", getpid(), counts[0], counts[1], counts[2]);
}
int cudaStreamSynchronize(void* s) { static fn1 r; if (!r) r = (fn1)dlsym(RTLD_NEXT, "cudaStreamSynchronize"); report(0); return r(s); }
int cudaEventSynchronize(void* e) { static fn1 r; if (!r) r = (fn1)dlsym(RTLD_NEXT, "cudaEventSynchronize"); report(1); return r(e); }
int cudaDeviceSynchronize(void) { static fn0 r; if (!r) r = (fn0)dlsym(RTLD_NEXT, "cudaDeviceSynchronize"); report(2); return r(); }
