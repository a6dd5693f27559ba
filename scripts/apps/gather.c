/* A compute-bound integer gather: sum += x[idx[i]] over seeded random indices into a
 * cache-resident table, repeated. The capture benchmark's workload.
 *
 * With --far=1 the table is two halves a TiB apart (one from malloc, one mapped far above
 * it), and each index picks a half: one instruction's accesses then span a TiB, as an
 * interpreter's that touch both its heap and its mappings do.
 *
 * usage: gather [--n=N] [--span=S] [--reps=R] [--seed=X] [--far=1]
 */
#include <sys/mman.h>

#include "common.h"

__attribute__((noinline)) int64_t gather_sum(const int64_t *x, const uint32_t *idx, long n,
                                             long reps) {
    int64_t sum = 0;
    for (long r = 0; r < reps; r++)
        for (long i = 0; i < n; i++) sum += x[idx[i]];
    return sum;
}

/* The far gather: bit 0 of an index picks the half, the rest the element in it. */
__attribute__((noinline)) int64_t gather_far_sum(int64_t *const *halves, const uint32_t *idx,
                                                 long n, long reps) {
    int64_t sum = 0;
    for (long r = 0; r < reps; r++)
        for (long i = 0; i < n; i++) sum += halves[idx[i] & 1][idx[i] >> 1];
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
    int far = arg_ll(argc, argv, "--far", 0) != 0;
    int64_t *x = malloc(sizeof *x * span);
    uint32_t *idx = malloc(sizeof *idx * n);
    for (long i = 0; i < span; i++) x[i] = i;
    for (long i = 0; i < n; i++) idx[i] = (uint32_t)(splitmix64(&seed) % (uint64_t)span);
    if (far) {
        size_t bytes = sizeof *x * (size_t)span;
        void *hint = (char *)x + ((size_t)1 << 40);
        int64_t *y = mmap(hint, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (y == MAP_FAILED) {
            perror("gather: mmap");
            return 1;
        }
        for (long i = 0; i < span; i++) y[i] = i;
        int64_t *halves[2] = {x, y};
        printf("gather n=%ld span=%ld reps=%ld far=%ld sum=%lld\n", n, span, reps,
               (long)((char *)y - (char *)x), (long long)gather_far_sum(halves, idx, n, reps));
        return 0;
    }
    printf("gather n=%ld span=%ld reps=%ld sum=%lld\n", n, span, reps,
           (long long)gather_sum(x, idx, n, reps));
    return 0;
}
