/* Two instructions with opposite reuse (the shape of RDX's Listing 2): in one loop, `acc[i & 7]`
 * is read and written every iteration (reused a few accesses later) while `big[i]` is read once
 * per repetition (reused a whole sweep later). Sampling sees both; with few debug registers the
 * long reuses keep registers busy, and proportional attribution must still count the short
 * ones by the samples taken at their instruction.
 *
 * usage: attribution [--n=N] [--reps=R]
 */
#include "common.h"

__attribute__((noipa)) void kernel(double *acc, const double *big, long n) {
    for (long i = 0; i < n; i++) acc[i & 7] += big[i];
}

int main(int argc, char **argv) {
    long n = arg_ll(argc, argv, "--n", 250000);
    long reps = arg_ll(argc, argv, "--reps", 20);
    if (n < 1 || reps < 1) {
        fprintf(stderr, "attribution: n and reps must be >= 1\n");
        return 2;
    }
    double acc[8] = {0};
    double *big = malloc(sizeof *big * n);
    for (long i = 0; i < n; i++) big[i] = (double)(i % 3);
    for (long r = 0; r < reps; r++) kernel(acc, big, n);
    double s = 0;
    for (int k = 0; k < 8; k++) s += acc[k];
    printf("attribution n=%ld reps=%ld sum=%.1f\n", n, reps, s);
    return 0;
}
