/* A compute-bound integer gather: sum += x[idx[i]] over seeded random indices into a
 * cache-resident table, repeated. The capture benchmark's workload.
 *
 * usage: gather [--n=N] [--span=S] [--reps=R] [--seed=X]
 */
#include "common.h"

__attribute__((noinline)) int64_t gather_sum(const int64_t *x, const uint32_t *idx, long n,
                                             long reps) {
    int64_t sum = 0;
    for (long r = 0; r < reps; r++)
        for (long i = 0; i < n; i++) sum += x[idx[i]];
    return sum;
}

int main(int argc, char **argv) {
    long n = arg_ll(argc, argv, "--n", 1 << 16);
    long span = arg_ll(argc, argv, "--span", 4096);
    long reps = arg_ll(argc, argv, "--reps", 200);
    uint64_t seed = (uint64_t)arg_ll(argc, argv, "--seed", 11);
    if (n < 1 || span < 1 || reps < 1) {
        fprintf(stderr, "gather: n, span and reps must be >= 1\n");
        return 2;
    }
    int64_t *x = malloc(sizeof *x * span);
    uint32_t *idx = malloc(sizeof *idx * n);
    for (long i = 0; i < span; i++) x[i] = i;
    for (long i = 0; i < n; i++) idx[i] = (uint32_t)(splitmix64(&seed) % (uint64_t)span);
    printf("gather n=%ld span=%ld reps=%ld sum=%lld\n", n, span, reps,
           (long long)gather_sum(x, idx, n, reps));
    return 0;
}
