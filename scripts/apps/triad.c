/* STREAM-like triad sweeps, a[i] = b[i] + s * c[i], over arrays far larger than the 131072-word
 * reuse horizon of the temporal score: unit-stride (spatial score near 1) with no reuse inside
 * that horizon (temporal score near 0). The locality tests use it as the "stream" corner.
 *
 * usage: triad [--n=N] [--sweeps=S]
 */
#include "common.h"

__attribute__((noinline)) void triad(double *a, const double *b, const double *c, double s,
                                     long n) {
    for (long i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}

int main(int argc, char **argv) {
    long n = arg_ll(argc, argv, "--n", 1 << 20);
    long sweeps = arg_ll(argc, argv, "--sweeps", 3);
    if (n < 1 || sweeps < 1) {
        fprintf(stderr, "triad: n and sweeps must be >= 1\n");
        return 2;
    }
    double *a = malloc(sizeof *a * n), *b = malloc(sizeof *b * n), *c = malloc(sizeof *c * n);
    if (!a || !b || !c) {
        fprintf(stderr, "triad: out of memory for n=%ld\n", n);
        return 2;
    }
    for (long i = 0; i < n; i++) {
        a[i] = 0.0;
        b[i] = (double)(i % 7);
        c[i] = (double)(i % 5);
    }
    for (long k = 0; k < sweeps; k++) triad(a, b, c, 3.0, n);
    double check = 0;
    for (long i = 0; i < n; i++) check += a[i];
    printf("triad n=%ld sweeps=%ld checksum=%.1f\n", n, sweeps, check);
    free(a);
    free(b);
    free(c);
    return 0;
}
