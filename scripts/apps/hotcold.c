/* A hot/cold mix: 9 accesses in 10 go to a hot set of `hot` words, 1 in 10 to a random word of
 * a cold array of `cold` words.
 *
 * usage: hotcold [--hot=N] [--cold=N] [--n=ACCESSES] [--seed=S]
 */
#include "common.h"

__attribute__((noipa)) uint64_t mix(uint64_t *h, long hot, uint64_t *c, long cold, long n,
                                       uint64_t seed) {
    uint64_t s = 0;
    for (long i = 0; i < n; i++) {
        uint64_t r = splitmix64(&seed);
        if (r % 10 != 0)
            s += h[(r >> 8) % (uint64_t)hot];
        else
            s += c[(r >> 8) % (uint64_t)cold];
    }
    return s;
}

int main(int argc, char **argv) {
    long hot = arg_ll(argc, argv, "--hot", 1000);
    long cold = arg_ll(argc, argv, "--cold", 4000000);
    long n = arg_ll(argc, argv, "--n", 4000000);
    uint64_t seed = (uint64_t)arg_ll(argc, argv, "--seed", 3);
    if (hot < 1 || cold < 1 || n < 1) {
        fprintf(stderr, "hotcold: hot, cold and n must be >= 1\n");
        return 2;
    }
    uint64_t *h = malloc(sizeof *h * hot), *c = malloc(sizeof *c * cold);
    for (long i = 0; i < hot; i++) h[i] = (uint64_t)i;
    for (long i = 0; i < cold; i++) c[i] = (uint64_t)i * 3;
    printf("hotcold hot=%ld cold=%ld n=%ld sum=%llu\n", hot, cold, n,
           (unsigned long long)mix(h, hot, c, cold, n, seed));
    return 0;
}
