/* Loops whose reuse distances are known (the shape of RDX's Listing 1): each repetition
 * sweeps a small array (reuse distance `small` words) and a large one (`large` words), so the
 * reuse-distance histogram has two peaks.
 *
 * usage: reuse_loops [--small=N] [--large=N] [--reps=R]
 */
#include "common.h"

__attribute__((noipa)) double sweep(const double *a, long n) {
    double s = 0.0;
    for (long i = 0; i < n; i++) s += a[i];
    return s;
}

int main(int argc, char **argv) {
    long small = arg_ll(argc, argv, "--small", 1000);
    long large = arg_ll(argc, argv, "--large", 200000);
    long reps = arg_ll(argc, argv, "--reps", 20);
    if (small < 1 || large < 1 || reps < 1) {
        fprintf(stderr, "reuse_loops: small, large and reps must be >= 1\n");
        return 2;
    }
    double *a = malloc(sizeof *a * small), *b = malloc(sizeof *b * large);
    for (long i = 0; i < small; i++) a[i] = (double)(i % 7);
    for (long i = 0; i < large; i++) b[i] = (double)(i % 5);
    double s = 0.0;
    for (long r = 0; r < reps; r++) {
        /* The small array four times per repetition: short reuses. */
        for (int k = 0; k < 4; k++) s += sweep(a, small);
        s += sweep(b, large);
    }
    printf("reuse_loops small=%ld large=%ld reps=%ld sum=%.1f\n", small, large, reps, s);
    return 0;
}
