/* Runs one AVX-512 instruction from a buffer it makes executable, as a JIT compiler does, then
 * sweeps an array. Its own code holds no AVX-512 instruction, so `capture --backend auto`
 * cannot see the need before the run: under QEMU (whose TCG lacks AVX-512) it dies of SIGILL
 * at once, and auto captures it again natively with ptrace.
 *
 * usage: jit512 [--n=N] [--reps=R]   (sums an array of N doubles R times; ~0.3 s natively)
 */
#include "common.h"

int main(int argc, char **argv) {
    long n = arg_ll(argc, argv, "--n", 1 << 20);
    long reps = arg_ll(argc, argv, "--reps", 200);
    /* vpxord zmm0, zmm0, zmm0; ret */
    static const unsigned char code[] = {0x62, 0xf1, 0x7d, 0x48, 0xef, 0xc0, 0xc3};
    if (n < 1) {
        fprintf(stderr, "jit512: bad --n\n");
        return 2;
    }
    void *buf = jit_code("jit512", code, sizeof code);
    if (!buf) return 2;
    ((void (*)(void))buf)();
    double *x = malloc((size_t)n * sizeof *x);
    for (long i = 0; i < n; i++) x[i] = (double)i;
    double s = 0;
    for (long r = 0; r < reps; r++)
        for (long i = 0; i < n; i++) s += x[i];
    printf("jit512 n=%ld reps=%ld sum=%.1f\n", n, reps, s);
    free(x);
    return 0;
}
