/* OpenMP gather b[i] += a[idx[i]], the shape of many HPC kernels: the main thread alone fills
 * the arrays (with libc's rand(), whose state it rereads at every call), then every pass
 * splits the gather among the OpenMP threads. The threads differ: the main thread's run is
 * mostly the fill's short reuses, the workers' the passes' long ones (RDX's time-to-stack
 * conversion must not pool them blindly: README, RDX, "Threads that differ").
 *
 * usage: omp_gather [--n=N] [--passes=P] [--threads=T] [--seed=S]
 *   T: OpenMP threads (default: OMP_NUM_THREADS or the machine's cores).
 */
#include <omp.h>
#include "common.h"

int main(int argc, char **argv) {
    long n = arg_ll(argc, argv, "--n", 1 << 20);
    long passes = arg_ll(argc, argv, "--passes", 5);
    long threads = arg_ll(argc, argv, "--threads", 0);
    unsigned seed = (unsigned)arg_ll(argc, argv, "--seed", 1);
    if (n < 1 || passes < 0 || threads < 0) {
        fprintf(stderr, "omp_gather: --n >= 1, --passes >= 0, --threads >= 0\n");
        return 2;
    }
    if (threads > 0) omp_set_num_threads((int)threads);
    double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    uint32_t *idx = malloc(n * sizeof *idx);
    if (!a || !b || !idx) { perror("omp_gather"); return 1; }
    srand(seed);
    for (long i = 0; i < n; i++) {
        a[i] = (double)i;
        b[i] = 0.0;
        idx[i] = (uint32_t)(rand() % n);
    }
    for (long p = 0; p < passes; p++) {
#pragma omp parallel for schedule(static)
        for (long i = 0; i < n; i++) b[i] += a[idx[i]];
    }
    double s = 0.0;
    for (long i = 0; i < n; i++) s += b[i];
    printf("omp_gather: n=%ld passes=%ld threads=%d sum=%.0f\n", n, passes,
           omp_get_max_threads(), s);
    free(a); free(b); free(idx);
    return 0;
}
