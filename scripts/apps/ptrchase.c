/* A linked list walked `reps` times; its nodes (64 bytes each, one cache line) lie in memory
 * in the order they are visited, or shuffled.
 *
 * usage: ptrchase [--n=NODES] [--reps=R] [--shuffle=0|1] [--seed=S]
 */
#include "common.h"

struct node {
    struct node *next;
    long value;
    char pad[48];
};

__attribute__((noipa)) long walk(const struct node *head) {
    long s = 0;
    for (const struct node *p = head; p; p = p->next) s += p->value;
    return s;
}

int main(int argc, char **argv) {
    long n = arg_ll(argc, argv, "--n", 60000);
    long reps = arg_ll(argc, argv, "--reps", 8);
    int shuffle = (int)arg_ll(argc, argv, "--shuffle", 0);
    uint64_t seed = (uint64_t)arg_ll(argc, argv, "--seed", 5);
    if (n < 1 || reps < 1) {
        fprintf(stderr, "ptrchase: n and reps must be >= 1\n");
        return 2;
    }
    struct node *nodes = malloc(sizeof *nodes * n);
    long *order = malloc(sizeof *order * n);
    for (long i = 0; i < n; i++) order[i] = i;
    if (shuffle)
        for (long i = n - 1; i > 0; i--) {
            long j = (long)(splitmix64(&seed) % (uint64_t)(i + 1));
            long t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
    for (long i = 0; i < n; i++) {
        nodes[order[i]].value = i;
        nodes[order[i]].next = i + 1 < n ? &nodes[order[i + 1]] : NULL;
    }
    long s = 0;
    for (long r = 0; r < reps; r++) s += walk(&nodes[order[0]]);
    printf("ptrchase n=%ld reps=%ld shuffle=%d sum=%ld\n", n, reps, shuffle, s);
    return 0;
}
