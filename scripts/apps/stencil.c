/* 2-D five-point Jacobi stencil: regular, unit-stride and row-stride accesses that mgbench's
 * gather/scatter miner must filter out.
 *
 * usage: stencil [--n=N] [--iters=I]
 */
#include "common.h"

__attribute__((noinline)) void sweep(double *out, const double *in, long n) {
    for (long i = 1; i < n - 1; i++)
        for (long j = 1; j < n - 1; j++)
            out[i * n + j] = 0.25 * (in[(i - 1) * n + j] + in[(i + 1) * n + j] +
                                     in[i * n + j - 1] + in[i * n + j + 1]);
}

int main(int argc, char **argv) {
    long n = arg_ll(argc, argv, "--n", 256);
    long iters = arg_ll(argc, argv, "--iters", 4);
    if (n < 3 || iters < 1) {
        fprintf(stderr, "stencil: n must be >= 3 and iters >= 1\n");
        return 2;
    }
    double *a = calloc(n * n, sizeof *a), *b = calloc(n * n, sizeof *b);
    for (long i = 0; i < n * n; i++) a[i] = (double)(i % 17);
    for (long it = 0; it < iters; it++) {
        sweep(b, a, n);
        double *t = a; a = b; b = t;
    }
    double check = 0;
    for (long i = 0; i < n * n; i++) check += a[i];
    printf("stencil n=%ld iters=%ld checksum=%.6f\n", n, iters, check);
    return 0;
}
