/* Reference gather loop for scripts/bench-replay.py: the same work as `mgbench replay` for a
 * gather (Spatter's OpenMP loop shape: static split of the count loop, a dense buffer per
 * thread, inner simd loop), timed the same way (1 warm-up, then nruns runs, minimum time).
 *
 * Built twice by the script: as is, and with -DNO_SIMD (no `omp simd`), because with the pragma
 * gcc emits AVX-512 vector gathers that are several times slower on some CPUs.
 *
 * usage: gather_omp PATTERN_FILE DELTA COUNT NRUNS
 *   PATTERN_FILE holds whitespace- or comma-separated indices.
 * prints: min_time_s=<s> bandwidth_mbs=<MB/s> threads=<n>
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t *read_pattern(const char *path, size_t *len) {
    FILE *f = fopen(path, "r");
    if (!f) { perror(path); exit(2); }
    size_t cap = 1024, n = 0;
    size_t *p = malloc(cap * sizeof *p);
    unsigned long long v;
    int c;
    for (;;) {
        if (fscanf(f, "%llu", &v) == 1) {
            if (n == cap) { cap *= 2; p = realloc(p, cap * sizeof *p); }
            p[n++] = (size_t)v;
        } else if ((c = fgetc(f)) == EOF) {
            break;
        }
    }
    fclose(f);
    *len = n;
    return p;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s PATTERN_FILE DELTA COUNT NRUNS\n", argv[0]);
        return 2;
    }
    size_t len;
    size_t *pattern = read_pattern(argv[1], &len);
    size_t delta = strtoull(argv[2], 0, 10);
    size_t count = strtoull(argv[3], 0, 10);
    int nruns = atoi(argv[4]);
    size_t max = 0;
    for (size_t j = 0; j < len; j++) if (pattern[j] > max) max = pattern[j];
    size_t sparse_len = max + delta * (count - 1) + 1;
    double *sparse = aligned_alloc(64, ((sparse_len * 8 + 63) / 64) * 64);
    int threads = omp_get_max_threads();
    double **dense = malloc(threads * sizeof *dense);
#pragma omp parallel
    {
        int t = omp_get_thread_num();
        dense[t] = aligned_alloc(64, ((len * 8 + 63) / 64) * 64);
        for (size_t j = 0; j < len; j++) dense[t][j] = 0.5 + j;
#pragma omp for schedule(static)
        for (size_t k = 0; k < sparse_len; k++) sparse[k] = (double)(k % (1 << 20));
    }
    double best = 1e30;
    for (int r = 0; r <= nruns; r++) {
        double t0 = omp_get_wtime();
#pragma omp parallel
        {
            double *tl = dense[omp_get_thread_num()];
#pragma omp for schedule(static)
            for (size_t i = 0; i < count; i++) {
                const double *sl = sparse + delta * i;
#ifndef NO_SIMD
#pragma omp simd
#endif
                for (size_t j = 0; j < len; j++) tl[j] = sl[pattern[j]];
            }
        }
        double dt = omp_get_wtime() - t0;
        if (r > 0 && dt < best) best = dt; /* run 0 is the warm-up */
    }
    double check = 0;
    for (int t = 0; t < threads; t++) for (size_t j = 0; j < len; j++) check += dense[t][j];
    double bytes = 8.0 * (double)len * (double)count;
    printf("min_time_s=%.9f bandwidth_mbs=%.3f threads=%d check=%g\n", best, bytes / best / 1e6,
           threads, check);
    return 0;
}
