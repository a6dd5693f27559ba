/* Watches its own CPU affinity while it runs: the main thread and a worker started every
 * --every ms each spin for --ms ms, summing an array and counting the CPUs their mask allows
 * at every pass. At the end it prints the CPUs the process may use and, of all its threads,
 * the fewest CPUs any thread's mask allowed at its best moment. Natively both are the same;
 * under a tracer that moves threads to one CPU while it steps them, they are the same only
 * if the tracer gives every thread (those it created while stepping too) its mask back.
 *
 * Then it forks a child that does the same for --ms ms and reports its best through its exit
 * status (a process a tracer does not follow must not inherit the tracer's CPU either).
 *
 * usage: affinity [--ms=M] [--every=E] [--threads=T]
 * prints: affinity cpus=N least_best=K threads=T child_best=C
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "common.h"

static long spin_ms = 300;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cpus_allowed(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : -1;
}

/* Spins for spin_ms, at least one pass (a thread stepped by a tracer on a loaded machine may
 * first run after its time is up); returns the most CPUs its mask allowed on any pass. */
static void *spin(void *out) {
    static double data[4096];
    double s = 0, end = now_ms() + spin_ms;
    int best = 0;
    do {
        for (int i = 0; i < 4096; i++) s += data[i] + i;
        int c = cpus_allowed();
        if (c > best) best = c;
    } while (now_ms() < end);
    *(int *)out = best;
    return s == -1 ? out : NULL;
}

int main(int argc, char **argv) {
    spin_ms = arg_ll(argc, argv, "--ms", 300);
    long every = arg_ll(argc, argv, "--every", 20);
    long threads = arg_ll(argc, argv, "--threads", 8);
    if (spin_ms < 1 || every < 1 || threads < 0 || threads > 256) {
        fprintf(stderr, "affinity: --ms and --every must be >= 1, --threads 0..256\n");
        return 2;
    }
    int cpus = cpus_allowed();
    pthread_t tid[256];
    int best[257] = {0};
    for (long t = 0; t < threads; t++) {
        if (pthread_create(&tid[t], NULL, spin, &best[t + 1]) != 0) {
            fprintf(stderr, "affinity: cannot start a thread\n");
            return 2;
        }
        /* Busy until the next start, so that starts fall inside stepped windows too. */
        double until = now_ms() + every;
        while (now_ms() < until) {
            int c = cpus_allowed();
            if (c > best[0]) best[0] = c;
        }
    }
    int own = 0;
    spin(&own);
    int least = own > best[0] ? own : best[0];
    for (long t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        if (best[t + 1] < least) least = best[t + 1];
    }
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        int best_child = 0;
        spin(&best_child);
        _exit(best_child);
    }
    int status = 0;
    if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status)) {
        fprintf(stderr, "affinity: the forked child failed\n");
        return 2;
    }
    printf("affinity cpus=%d least_best=%d threads=%ld child_best=%d\n", cpus, least, threads,
           WEXITSTATUS(status));
    return 0;
}
