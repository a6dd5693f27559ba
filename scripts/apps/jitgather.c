/* A JIT compiler's gather, as V8, Julia or the JVM run one: the program writes machine code
 * for `sum += table[idx[i]]` into anonymous memory, makes it executable, writes a perf map
 * (/tmp/perf-PID.map, the file `perf` and mgbench read to name such code; left there, as
 * runtimes leave it) unless --map=0, and runs it. No file holds that code: without the map,
 * nothing can name it.
 *
 * usage: jitgather [--n=N] [--reps=R] [--map=0]   (N table entries and indices; ~0.1 s)
 */
#include <unistd.h>
#include "common.h"

/* double gather(const double *table, const unsigned *idx, long n): rdi, rsi, rdx; xmm0. */
static const unsigned char code[] = {
    0x66, 0x0f, 0x57, 0xc0,       /* xorpd xmm0, xmm0 */
    0x8b, 0x06,                   /* loop: mov eax, [rsi] */
    0xf2, 0x0f, 0x58, 0x04, 0xc7, /* addsd xmm0, [rdi + rax*8] */
    0x48, 0x83, 0xc6, 0x04,       /* add rsi, 4 */
    0x48, 0xff, 0xca,             /* dec rdx */
    0x75, 0xf0,                   /* jnz loop */
    0xc3,                         /* ret */
};

int main(int argc, char **argv) {
    long n = arg_ll(argc, argv, "--n", 1 << 18);
    long reps = arg_ll(argc, argv, "--reps", 4);
    int map = arg_ll(argc, argv, "--map", 1) != 0;
    double *table = malloc((size_t)n * sizeof *table);
    unsigned *idx = malloc((size_t)n * sizeof *idx);
    if (!table || !idx || n < 1) {
        fprintf(stderr, "jitgather: out of memory (or bad --n)\n");
        return 2;
    }
    void *buf = jit_code("jitgather", code, sizeof code);
    if (!buf) return 2;
    if (map) {
        char path[64];
        snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
        FILE *f = fopen(path, "w");
        if (f) {
            fprintf(f, "%lx %zx jit_gather_loop\n", (unsigned long)buf, sizeof code);
            fclose(f);
        }
    }
    uint64_t s = 88172645463325252ull;
    for (long i = 0; i < n; i++) {
        table[i] = (double)i;
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        idx[i] = (unsigned)(s % (uint64_t)n);
    }
    double (*gather)(const double *, const unsigned *, long) =
        (double (*)(const double *, const unsigned *, long))buf;
    double sum = 0;
    for (long r = 0; r < reps; r++) sum += gather(table, idx, n);
    printf("jitgather n=%ld reps=%ld sum=%.1f\n", n, reps, sum);
    return 0;
}
