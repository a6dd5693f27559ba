/* CSR sparse matrix-vector product y = A x with seeded random column indices: the gather
 * `x[col[j]]` is the irregular access mgbench should find.
 *
 * usage: spmv [--rows=N] [--nnz=K] [--iters=I] [--seed=S] [--threads=T] [--truth=FILE]
 *             [--sorted=1] [--band=W] [--permute=1] [--sigblock=1]
 *   --sorted=1 sorts each row's column indices (the usual CSR layout; a reordering study's
 *   "after"), else they stay in the random order drawn.
 *   --band=W draws row r's columns from the W columns around r (a banded matrix, what a
 *   bandwidth-reducing ordering gives) instead of from all columns.
 *   --permute=1 relabels the columns by a seeded random permutation (the same matrix under a
 *   bad ordering: neighbours in x are no longer neighbours in the matrix).
 *   --truth writes the column array (one index per line), in program order of one sweep.
 *   With T > 1, rows are split among T pthreads (thread t gets a contiguous block);
 *   --sigblock=1 starts them with every signal blocked, as thread pools often do (xz does).
 *   The output line ends with x=ADDRESS, the base of the gathered vector.
 */
#include <pthread.h>
#include <signal.h>
#include "common.h"

static long rows, nnz, iters;
static uint32_t *col;
static double *val, *x, *y;
static int threads;

/* Kept out of line so the gather has one instruction address in one function. */
__attribute__((noinline)) void spmv_rows(long r0, long r1) {
    for (long r = r0; r < r1; r++) {
        double sum = 0.0;
        for (long j = r * nnz; j < (r + 1) * nnz; j++)
            sum += val[j] * x[col[j]];
        y[r] = sum;
    }
}

/* Never called: a region of interest that is never entered (tests). */
__attribute__((noinline, used)) double spmv_never_called(const double *v, long n) {
    double s = 0.0;
    for (long i = 0; i < n; i++) s += v[i];
    return s;
}

static void *worker(void *arg) {
    long t = (long)arg;
    long r0 = rows * t / threads, r1 = rows * (t + 1) / threads;
    for (long it = 0; it < iters; it++) spmv_rows(r0, r1);
    return NULL;
}

int main(int argc, char **argv) {
    rows = arg_ll(argc, argv, "--rows", 4096);
    nnz = arg_ll(argc, argv, "--nnz", 8);
    iters = arg_ll(argc, argv, "--iters", 4);
    threads = (int)arg_ll(argc, argv, "--threads", 1);
    uint64_t seed = (uint64_t)arg_ll(argc, argv, "--seed", 1);
    const char *truth = arg_str(argc, argv, "--truth");
    int sorted = (int)arg_ll(argc, argv, "--sorted", 0);
    long band = arg_ll(argc, argv, "--band", 0);
    int permute = (int)arg_ll(argc, argv, "--permute", 0);
    int sigblock = (int)arg_ll(argc, argv, "--sigblock", 0);
    if (rows < 1 || nnz < 1 || iters < 1 || threads < 1 || band < 0) {
        fprintf(stderr, "spmv: rows, nnz, iters and threads must be >= 1, band >= 0\n");
        return 2;
    }
    col = malloc(sizeof *col * rows * nnz);
    val = malloc(sizeof *val * rows * nnz);
    x = malloc(sizeof *x * rows);
    y = malloc(sizeof *y * rows);
    for (long j = 0; j < rows * nnz; j++) {
        if (band > 0) {
            long r = j / nnz, lo = r - band / 2;
            if (lo < 0) lo = 0;
            if (lo + band > rows) lo = rows - band < 0 ? 0 : rows - band;
            long w = band < rows ? band : rows;
            col[j] = (uint32_t)(lo + (long)(splitmix64(&seed) % (uint64_t)w));
        } else {
            col[j] = (uint32_t)(splitmix64(&seed) % (uint64_t)rows);
        }
        val[j] = 1.0 / (double)(1 + j % 7);
    }
    if (permute) {
        /* Fisher-Yates over the column labels, then relabel. */
        uint32_t *perm = malloc(sizeof *perm * rows);
        for (long i = 0; i < rows; i++) perm[i] = (uint32_t)i;
        for (long i = rows - 1; i > 0; i--) {
            long k = (long)(splitmix64(&seed) % (uint64_t)(i + 1));
            uint32_t t = perm[i];
            perm[i] = perm[k];
            perm[k] = t;
        }
        for (long j = 0; j < rows * nnz; j++) col[j] = perm[col[j]];
        free(perm);
    }
    if (sorted)
        for (long r = 0; r < rows; r++) {
            /* Insertion sort of the row's nnz columns (nnz is small). */
            uint32_t *c = col + r * nnz;
            for (long a = 1; a < nnz; a++)
                for (long b = a; b > 0 && c[b - 1] > c[b]; b--) {
                    uint32_t t = c[b];
                    c[b] = c[b - 1];
                    c[b - 1] = t;
                }
        }
    for (long i = 0; i < rows; i++) x[i] = (double)(i % 13);
    if (truth) write_truth(truth, col, (size_t)(rows * nnz));
    if (threads == 1) {
        worker((void *)0);
    } else {
        pthread_t *tid = malloc(sizeof *tid * threads);
        sigset_t all, old;
        sigfillset(&all);
        if (sigblock) pthread_sigmask(SIG_SETMASK, &all, &old);
        for (long t = 0; t < threads; t++) pthread_create(&tid[t], NULL, worker, (void *)t);
        if (sigblock) pthread_sigmask(SIG_SETMASK, &old, NULL);
        for (long t = 0; t < threads; t++) pthread_join(tid[t], NULL);
    }
    double check = 0;
    for (long i = 0; i < rows; i++) check += y[i];
    printf("spmv rows=%ld nnz=%ld iters=%ld threads=%d checksum=%.6f x=%p\n", rows, nnz, iters,
           threads, check, (void *)x);
    return 0;
}
