/* A 2-D array of doubles summed row by row (the order it is laid out in) or column by column
 * (a stride of a whole row between consecutive accesses).
 *
 * usage: rowcol [--rows=R] [--cols=C] [--reps=N] [--order=row|col]
 */
#include "common.h"

__attribute__((noipa)) double sum_rows(const double *a, long rows, long cols) {
    double s = 0.0;
    for (long i = 0; i < rows; i++)
        for (long j = 0; j < cols; j++) s += a[i * cols + j];
    return s;
}

__attribute__((noipa)) double sum_cols(const double *a, long rows, long cols) {
    double s = 0.0;
    for (long j = 0; j < cols; j++)
        for (long i = 0; i < rows; i++) s += a[i * cols + j];
    return s;
}

int main(int argc, char **argv) {
    long rows = arg_ll(argc, argv, "--rows", 500);
    long cols = arg_ll(argc, argv, "--cols", 500);
    long reps = arg_ll(argc, argv, "--reps", 4);
    const char *order = arg_str(argc, argv, "--order");
    int by_col = order && strcmp(order, "col") == 0;
    if (order && !by_col && strcmp(order, "row") != 0) {
        fprintf(stderr, "rowcol: --order must be row or col\n");
        return 2;
    }
    if (rows < 1 || cols < 1 || reps < 1) {
        fprintf(stderr, "rowcol: rows, cols and reps must be >= 1\n");
        return 2;
    }
    double *a = malloc(sizeof *a * rows * cols);
    for (long i = 0; i < rows * cols; i++) a[i] = (double)(i % 11);
    double s = 0.0;
    for (long r = 0; r < reps; r++) s += by_col ? sum_cols(a, rows, cols) : sum_rows(a, rows, cols);
    printf("rowcol rows=%ld cols=%ld reps=%ld order=%s sum=%.1f\n", rows, cols, reps,
           by_col ? "col" : "row", s);
    return 0;
}
