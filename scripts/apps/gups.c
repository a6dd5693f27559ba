/* Random-access updates (GUPS-like): table[r & (size-1)] ^= r with a seeded generator. Loads
 * and stores of one read-modify-write land on the same random address.
 *
 * usage: gups [--log2size=L] [--updates=U] [--seed=S] [--truth=FILE]
 *   --truth writes the updated indices (one per line), in program order.
 */
#include "common.h"

__attribute__((noinline)) void update(uint64_t *table, uint64_t mask, long updates, uint64_t seed,
                                      uint32_t *trace) {
    for (long i = 0; i < updates; i++) {
        uint64_t r = splitmix64(&seed);
        if (trace) trace[i] = (uint32_t)(r & mask);
        table[r & mask] ^= r;
    }
}

int main(int argc, char **argv) {
    long lg = arg_ll(argc, argv, "--log2size", 20);
    long updates = arg_ll(argc, argv, "--updates", 1 << 16);
    uint64_t seed = (uint64_t)arg_ll(argc, argv, "--seed", 3);
    const char *truth = arg_str(argc, argv, "--truth");
    if (lg < 1 || lg > 31 || updates < 1) {
        fprintf(stderr, "gups: log2size must be in 1..31 and updates >= 1\n");
        return 2;
    }
    uint64_t size = 1ull << lg;
    uint64_t *table = malloc(sizeof *table * size);
    for (uint64_t i = 0; i < size; i++) table[i] = i;
    uint32_t *trace = truth ? malloc(sizeof *trace * updates) : NULL;
    update(table, size - 1, updates, seed, trace);
    if (truth) write_truth(truth, trace, (size_t)updates);
    uint64_t check = 0;
    for (uint64_t i = 0; i < size; i++) check ^= table[i];
    printf("gups size=%llu updates=%ld checksum=%llu\n", (unsigned long long)size, updates,
           (unsigned long long)check);
    return 0;
}
