/* What an armed debug register costs a program: copies and clears memory with glibc's memcpy
 * and memset, and touches fresh pages, timing each. x86 runs its string instructions
 * (rep movs, rep stos) without their fast mode while a data breakpoint is enabled in DR7, and
 * glibc's memcpy and memset use them for mid-sized blocks, as the kernel does to clear every
 * new page: live RDX keeps up to 4 such registers armed the whole run.
 *
 *   --arm       arm a perf hardware watchpoint (8 bytes, read/write) on a word this program
 *               never touches, as a sampled use waiting for its reuse is armed
 *   --touch=N   first write one word of each of N fresh pages, never touched again, before
 *               the copies (under `mgbench reuse --backend page-faults` these faults are the
 *               samples, so the registers stay armed on words without reuse: the same state)
 *   --size=B    bytes per memcpy and memset (default 65536)
 *   --mib=M     MiB copied and cleared in all (default 2048)
 *   --pages=P   fresh pages first-touched for the timing (default 16384, 64 MiB)
 *
 * Prints one line: memcpy and memset throughput (GB/s) and first touch (us per page).
 */
#define _GNU_SOURCE
#include "common.h"
#include <linux/hw_breakpoint.h>
#include <linux/perf_event.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t never_touched;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static char *fresh(size_t bytes) {
    char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("stringops: mmap"); exit(2); }
    return p;
}

static void arm(void) {
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.type = PERF_TYPE_BREAKPOINT;
    a.size = sizeof a;
    a.bp_type = HW_BREAKPOINT_RW;
    a.bp_addr = (uint64_t)(uintptr_t)&never_touched;
    a.bp_len = HW_BREAKPOINT_LEN_8;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    if (syscall(SYS_perf_event_open, &a, 0, -1, -1, 0) < 0) {
        perror("stringops: perf_event_open (breakpoint)");
        exit(2);
    }
}

int main(int argc, char **argv) {
    int armed = 0;
    for (int i = 1; i < argc; i++) armed |= strcmp(argv[i], "--arm") == 0;
    long long size = arg_ll(argc, argv, "--size", 65536);
    long long mib = arg_ll(argc, argv, "--mib", 2048);
    long long pages = arg_ll(argc, argv, "--pages", 16384);
    long long touch = arg_ll(argc, argv, "--touch", 0);
    if (size < 1 || mib < 1 || pages < 1 || touch < 0) {
        fprintf(stderr, "stringops: size, mib and pages must be >= 1, touch >= 0\n");
        return 2;
    }
    long page = sysconf(_SC_PAGESIZE);
    char *src = malloc((size_t)size), *dst = malloc((size_t)size);
    if (!src || !dst) { perror("stringops: malloc"); return 2; }
    memset(src, 1, (size_t)size);
    memset(dst, 2, (size_t)size);
    char *timed = fresh((size_t)(pages * page));
    if (touch) {
        char *once = fresh((size_t)(touch * page));
        for (long long i = 0; i < touch; i++) once[i * page + 8 * (i % 64)] = 1;
    }
    if (armed) arm();
    long long reps = mib * 1048576 / size + 1;
    double t0 = now();
    for (long long r = 0; r < reps; r++) {
        memcpy(dst, src, (size_t)size);
        __asm__ volatile("" : : "r"(dst) : "memory");
    }
    double t1 = now();
    for (long long r = 0; r < reps; r++) {
        memset(dst, (int)r, (size_t)size);
        __asm__ volatile("" : : "r"(dst) : "memory");
    }
    double t2 = now();
    for (long long i = 0; i < pages; i++) timed[i * page] = 1;
    double t3 = now();
    double bytes = (double)reps * (double)size;
    printf("armed=%d size=%lld memcpy %.2f GB/s memset %.2f GB/s first-touch %.3f us/page (%d)\n",
           armed, size, bytes / (t1 - t0) / 1e9, bytes / (t2 - t1) / 1e9,
           (t3 - t2) * 1e6 / (double)pages, dst[size / 2] + timed[page]);
    return 0;
}
