/* Histogram of seeded random keys: the update `hist[keys[i]] += w` is an irregular scatter.
 *
 * usage: histogram [--n=N] [--bins=B] [--iters=I] [--seed=S] [--truth=FILE]
 *   --truth writes the key array (one per line).
 */
#include "common.h"

__attribute__((noinline)) void accumulate(double *hist, const uint32_t *keys, long n) {
    for (long i = 0; i < n; i++) hist[keys[i]] += 1.0;
}

int main(int argc, char **argv) {
    long n = arg_ll(argc, argv, "--n", 32768);
    long bins = arg_ll(argc, argv, "--bins", 65536);
    long iters = arg_ll(argc, argv, "--iters", 2);
    uint64_t seed = (uint64_t)arg_ll(argc, argv, "--seed", 7);
    const char *truth = arg_str(argc, argv, "--truth");
    if (n < 1 || bins < 1 || iters < 1) {
        fprintf(stderr, "histogram: n, bins and iters must be >= 1\n");
        return 2;
    }
    uint32_t *keys = malloc(sizeof *keys * n);
    double *hist = calloc(bins, sizeof *hist);
    for (long i = 0; i < n; i++) keys[i] = (uint32_t)(splitmix64(&seed) % (uint64_t)bins);
    if (truth) write_truth(truth, keys, (size_t)n);
    for (long it = 0; it < iters; it++) accumulate(hist, keys, n);
    double check = 0;
    for (long b = 0; b < bins; b++) check += hist[b] * (double)(b % 3);
    printf("histogram n=%ld bins=%ld iters=%ld checksum=%.1f\n", n, bins, iters, check);
    return 0;
}
