// The GPU STREAM baseline of `mgbench replay --cuda` and `mgbench stream --cuda`: the
// BabelStream kernel set (Copy, Mul, Add, Triad, Dot) on doubles, compiled at run time by
// NVRTC. Accounting as STREAM: Copy and Mul move 2 words per element, Add and Triad 3, Dot 2.
//
//   init   a = 0.1, b = 0.2, c = 0.0
//   copy   c = a
//   mul    b = scalar * c
//   add    c = a + b
//   triad  a = b + scalar * c
//   dot    sum of a * b: one partial sum per block (the host adds the partials)

typedef unsigned long long u64;

#define MG_GRID_STRIDE(t, total)                                                  \
    for (u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x; t < (total);           \
         t += (u64)gridDim.x * blockDim.x)

// Threads per block of the dot kernel (its shared-memory reduction assumes this size).
#define MG_DOT_BLOCK 256

extern "C" __global__ void stream_init(double *__restrict__ a, double *__restrict__ b,
                                       double *__restrict__ c, double va, double vb, double vc,
                                       u64 n) {
    MG_GRID_STRIDE(t, n) {
        a[t] = va;
        b[t] = vb;
        c[t] = vc;
    }
}

extern "C" __global__ void stream_copy(const double *__restrict__ a, double *__restrict__ c,
                                       u64 n) {
    MG_GRID_STRIDE(t, n) { c[t] = a[t]; }
}

extern "C" __global__ void stream_mul(double *__restrict__ b, const double *__restrict__ c,
                                      double scalar, u64 n) {
    MG_GRID_STRIDE(t, n) { b[t] = scalar * c[t]; }
}

extern "C" __global__ void stream_add(const double *__restrict__ a, const double *__restrict__ b,
                                      double *__restrict__ c, u64 n) {
    MG_GRID_STRIDE(t, n) { c[t] = a[t] + b[t]; }
}

extern "C" __global__ void stream_triad(double *__restrict__ a, const double *__restrict__ b,
                                        const double *__restrict__ c, double scalar, u64 n) {
    MG_GRID_STRIDE(t, n) { a[t] = b[t] + scalar * c[t]; }
}

// Launched with MG_DOT_BLOCK threads per block; writes one partial sum per block.
extern "C" __global__ void stream_dot(const double *__restrict__ a, const double *__restrict__ b,
                                      double *__restrict__ partial, u64 n) {
    __shared__ double sums[MG_DOT_BLOCK];
    double s = 0.0;
    MG_GRID_STRIDE(t, n) { s += a[t] * b[t]; }
    sums[threadIdx.x] = s;
    for (unsigned int half = MG_DOT_BLOCK / 2; half > 0; half /= 2) {
        __syncthreads();
        if (threadIdx.x < half) {
            sums[threadIdx.x] += sums[threadIdx.x + half];
        }
    }
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = sums[0];
    }
}
