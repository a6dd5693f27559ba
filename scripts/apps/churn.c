/* Thread churn: main starts T workers one after another while earlier ones finish and exit,
 * so threads exit while others are being created and new threads take the numbers of
 * exited ones, as in servers and task pools. Each worker sums its own array (allocated by
 * main beforehand, so a worker's accesses do not depend on the others'), worker k for
 * (1 + k % 3) * R sweeps; main joins them all at the end.
 *
 * usage: churn [--threads=T] [--n=N] [--reps=R]
 */
#include <pthread.h>

#include "common.h"

static long n, reps;
static int64_t **arrays;

__attribute__((noinline)) static int64_t sweep(const int64_t *a, long sweeps) {
    int64_t s = 0;
    for (long r = 0; r < sweeps; r++)
        for (long i = 0; i < n; i++) s += a[i] ^ r;
    return s;
}

static void *worker(void *arg) {
    long k = (long)arg;
    return (void *)(intptr_t)sweep(arrays[k], (1 + k % 3) * reps);
}

int main(int argc, char **argv) {
    int threads = (int)arg_ll(argc, argv, "--threads", 24);
    n = arg_ll(argc, argv, "--n", 4096);
    reps = arg_ll(argc, argv, "--reps", 100);
    if (threads < 1 || n < 1 || reps < 1) {
        fprintf(stderr, "churn: threads, n and reps must be >= 1\n");
        return 2;
    }
    arrays = calloc((size_t)threads, sizeof *arrays);
    pthread_t *tids = calloc((size_t)threads, sizeof *tids);
    for (long k = 0; k < threads; k++) {
        arrays[k] = malloc(sizeof **arrays * (size_t)n);
        for (long i = 0; i < n; i++) arrays[k][i] = k * n + i;
    }
    for (long k = 0; k < threads; k++)
        if (pthread_create(&tids[k], NULL, worker, (void *)k) != 0) {
            fprintf(stderr, "churn: cannot create thread %ld\n", k);
            return 1;
        }
    int64_t sum = 0;
    for (long k = 0; k < threads; k++) {
        void *r;
        pthread_join(tids[k], &r);
        sum += (int64_t)(intptr_t)r;
    }
    printf("churn threads=%d n=%ld reps=%ld sum=%lld\n", threads, n, reps, (long long)sum);
    return 0;
}
