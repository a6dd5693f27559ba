/* Closes or replaces descriptors it did not open, as daemons and shells do, between two
 * phases of work: a tracer that keeps its own descriptors in the program's table must keep
 * them through this, and must not write into the program's files.
 *
 *   --how=loop   close(fd) for every fd from 3 to the descriptor limit (the daemon idiom)
 *   --how=range  close_range(3, ~0U, 0) (glibc's closefrom)
 *   --how=dup2   dup2(OUT, fd) for every fd from 3 to the limit, a byte written through each,
 *                then all closed
 *   --how=none   nothing
 *
 * Afterwards it opens OUT again (appending) and writes a line. OUT must then hold exactly
 * what this program wrote: with --how=dup2, one 'x' per descriptor from 3 to the limit, then
 * "after\n"; otherwise "after\n".
 *
 * usage: fdclose --out=PATH [--how=loop|range|dup2|none] [--n=WORDS] [--reps=R]
 */
#define _GNU_SOURCE
#include "common.h"
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

__attribute__((noipa)) uint64_t before(const uint64_t *a, long n, long reps) {
    uint64_t s = 0;
    for (long r = 0; r < reps; r++)
        for (long i = 0; i < n; i++) s += a[i];
    return s;
}

__attribute__((noipa)) uint64_t after(const uint64_t *a, long n, long reps) {
    uint64_t s = 0;
    for (long r = 0; r < reps; r++)
        for (long i = n - 1; i >= 0; i--) s += a[i] * 3;
    return s;
}

static void put(int fd, const char *s) {
    size_t n = strlen(s);
    if (write(fd, s, n) != (ssize_t)n) { perror("fdclose: write"); exit(2); }
}

int main(int argc, char **argv) {
    const char *out = arg_str(argc, argv, "--out");
    const char *how = arg_str(argc, argv, "--how");
    long n = arg_ll(argc, argv, "--n", 1 << 16);
    long reps = arg_ll(argc, argv, "--reps", 20);
    if (!how) how = "loop";
    if (!out || n < 1 || reps < 1) {
        fprintf(stderr, "usage: fdclose --out=PATH [--how=loop|range|dup2|none] [--n=WORDS] [--reps=R]\n");
        return 2;
    }
    uint64_t *a = malloc(sizeof *a * n);
    if (!a) { perror("fdclose"); return 2; }
    for (long i = 0; i < n; i++) a[i] = (uint64_t)i;
    uint64_t s1 = before(a, n, reps);
    fflush(stdout);
    struct rlimit lim;
    getrlimit(RLIMIT_NOFILE, &lim);
    int max = (int)(lim.rlim_cur < 1 << 20 ? lim.rlim_cur : 1 << 20);
    if (strcmp(how, "loop") == 0) {
        for (int fd = 3; fd < max; fd++) close(fd);
    } else if (strcmp(how, "range") == 0) {
        if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0) { perror("fdclose: close_range"); return 2; }
    } else if (strcmp(how, "dup2") == 0) {
        int own = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
        if (own < 0) { perror(out); return 2; }
        for (int fd = 3; fd < max; fd++)
            if (fd != own && dup2(own, fd) != fd) { perror("fdclose: dup2"); return 2; }
        for (int fd = 3; fd < max; fd++) put(fd, "x");
        for (int fd = 3; fd < max; fd++) close(fd);
    } else if (strcmp(how, "none") != 0) {
        fprintf(stderr, "fdclose: --how=%s: give loop, range, dup2 or none\n", how);
        return 2;
    }
    int flags = O_WRONLY | O_CREAT | O_APPEND | (strcmp(how, "dup2") == 0 ? 0 : O_TRUNC);
    int fd = open(out, flags, 0644);
    if (fd < 0) { perror(out); return 2; }
    put(fd, "after\n");
    close(fd);
    uint64_t s2 = after(a, n, reps);
    printf("fdclose how=%s n=%ld reps=%ld limit=%d sum=%llu\n", how, n, reps, max,
           (unsigned long long)(s1 + s2));
    return 0;
}
