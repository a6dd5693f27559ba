/* Shared helpers for the demo programs: a seedable generator and argument parsing. */
#ifndef MGBENCH_APPS_COMMON_H
#define MGBENCH_APPS_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* SplitMix64: the same generator scripts/gen-patterns.py uses. */
static inline uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Value of "--name=value" among argv, or `fallback`. */
static inline long long arg_ll(int argc, char **argv, const char *name, long long fallback) {
    size_t n = strlen(name);
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], name, n) == 0 && argv[i][n] == '=')
            return atoll(argv[i] + n + 1);
    return fallback;
}

static inline const char *arg_str(int argc, char **argv, const char *name) {
    size_t n = strlen(name);
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], name, n) == 0 && argv[i][n] == '=')
            return argv[i] + n + 1;
    return NULL;
}

/* Writes `n` unsigned integers, one per line, to `path` (ground truth for tests). */
static inline void write_truth(const char *path, const uint32_t *v, size_t n) {
    FILE *f = fopen(path, "w");
    if (!f) { perror(path); exit(2); }
    for (size_t i = 0; i < n; i++) fprintf(f, "%u\n", v[i]);
    fclose(f);
}

/* Copies `n` bytes of machine code into a page of anonymous memory and makes it executable,
 * as a JIT compiler does; the page, or NULL (with a message naming `who`) where it cannot. */
static inline void *jit_code(const char *who, const unsigned char *code, size_t n) {
    unsigned char *buf = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED || n > 4096) {
        fprintf(stderr, "%s: cannot map a code buffer\n", who);
        return NULL;
    }
    memcpy(buf, code, n);
    if (mprotect(buf, 4096, PROT_READ | PROT_EXEC) != 0) {
        fprintf(stderr, "%s: cannot make the code buffer executable\n", who);
        return NULL;
    }
    return buf;
}

#endif
