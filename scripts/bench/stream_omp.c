/* Reference STREAM loops for scripts/bench-replay.py (STREAM's rules: 10 iterations, first
 * dropped, best time, 2/2/3/3 words per element, MB = 1e6 bytes).
 *
 * usage: stream_omp ELEMENTS
 * prints: copy_mbs=... scale_mbs=... add_mbs=... triad_mbs=... threads=<n>
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#define NTIMES 10

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s ELEMENTS\n", argv[0]); return 2; }
    size_t n = strtoull(argv[1], 0, 10);
    double *a = aligned_alloc(64, ((n * 8 + 63) / 64) * 64);
    double *b = aligned_alloc(64, ((n * 8 + 63) / 64) * 64);
    double *c = aligned_alloc(64, ((n * 8 + 63) / 64) * 64);
    const double s = 3.0;
#pragma omp parallel for schedule(static)
    for (size_t j = 0; j < n; j++) { a[j] = 1.0; b[j] = 2.0; c[j] = 0.0; }
#pragma omp parallel for schedule(static)
    for (size_t j = 0; j < n; j++) a[j] *= 2.0;
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    for (int k = 0; k < NTIMES; k++) {
        double t[4];
        t[0] = omp_get_wtime();
#pragma omp parallel for schedule(static)
        for (size_t j = 0; j < n; j++) c[j] = a[j];
        t[0] = omp_get_wtime() - t[0];
        t[1] = omp_get_wtime();
#pragma omp parallel for schedule(static)
        for (size_t j = 0; j < n; j++) b[j] = s * c[j];
        t[1] = omp_get_wtime() - t[1];
        t[2] = omp_get_wtime();
#pragma omp parallel for schedule(static)
        for (size_t j = 0; j < n; j++) c[j] = a[j] + b[j];
        t[2] = omp_get_wtime() - t[2];
        t[3] = omp_get_wtime();
#pragma omp parallel for schedule(static)
        for (size_t j = 0; j < n; j++) a[j] = b[j] + s * c[j];
        t[3] = omp_get_wtime() - t[3];
        if (k > 0)
            for (int i = 0; i < 4; i++) if (t[i] < best[i]) best[i] = t[i];
    }
    double words[4] = {2, 2, 3, 3};
    printf("copy_mbs=%.3f scale_mbs=%.3f add_mbs=%.3f triad_mbs=%.3f threads=%d check=%g\n",
           words[0] * 8 * n / best[0] / 1e6, words[1] * 8 * n / best[1] / 1e6,
           words[2] * 8 * n / best[2] / 1e6, words[3] * 8 * n / best[3] / 1e6,
           omp_get_max_threads(), a[n / 2] + b[n / 3] + c[n / 4]);
    return 0;
}
