/* AVX-512 masked gathers (vgatherdpd) over seeded random indices: the ptrace backend must
 * record each active lane's address, in lane order, and no masked-off lane. QEMU's TCG cannot
 * run this program.
 *
 * usage: gather512 [--n=N] [--span=S] [--seed=X] [--mask=M] [--truth=FILE]
 *   --mask: the 8-bit lane mask used by every gather (default 0xAD).
 *   --truth writes the index array (one per line). The output ends with x=ADDRESS.
 */
#include <immintrin.h>
#include "common.h"

__attribute__((noinline)) double gather8(const double *x, const int32_t *idx, long n,
                                         __mmask8 mask) {
    __m512d acc = _mm512_setzero_pd();
    for (long i = 0; i + 8 <= n; i += 8) {
        __m256i vi = _mm256_loadu_si256((const __m256i *)(idx + i));
        acc = _mm512_add_pd(acc, _mm512_mask_i32gather_pd(_mm512_setzero_pd(), mask, vi, x, 8));
    }
    return _mm512_reduce_add_pd(acc);
}

int main(int argc, char **argv) {
    long n = arg_ll(argc, argv, "--n", 64);
    long span = arg_ll(argc, argv, "--span", 1024);
    uint64_t seed = (uint64_t)arg_ll(argc, argv, "--seed", 5);
    __mmask8 mask = (__mmask8)arg_ll(argc, argv, "--mask", 0xAD);
    const char *truth = arg_str(argc, argv, "--truth");
    if (n < 8 || span < 1) {
        fprintf(stderr, "gather512: n must be >= 8 and span >= 1\n");
        return 2;
    }
    n -= n % 8;
    double *x = malloc(sizeof *x * span);
    int32_t *idx = malloc(sizeof *idx * n);
    uint32_t *u = malloc(sizeof *u * n);
    for (long i = 0; i < span; i++) x[i] = (double)i;
    for (long i = 0; i < n; i++) u[i] = (uint32_t)(splitmix64(&seed) % (uint64_t)span), idx[i] = (int32_t)u[i];
    if (truth) write_truth(truth, u, (size_t)n);
    printf("gather512 n=%ld span=%ld mask=0x%x sum=%.1f x=%p\n", n, span, (unsigned)mask,
           gather8(x, idx, n, mask), (void *)x);
    return 0;
}
