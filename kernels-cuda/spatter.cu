// Gather/scatter kernels of `mgbench replay --cuda`, compiled at run time by NVRTC.
//
// One GPU thread per element access: thread t handles iteration i = t / len and pattern
// position j = t % len of the Spatter loop, in a grid-stride loop (so any grid size covers
// len * count). Indices are 64-bit: patterns mined from real traces exceed 2^32.
//
//   gather        dense[j + len*(i % wrap)] = sparse[pattern[j] + delta*i]
//   scatter       sparse[pattern[j] + delta*i] = dense[j + len*(i % wrap)]
//   gs            sparse_s[ps[j] + delta_s*i] = sparse_g[pg[j] + delta_g*i]
//   multigather   dense[j + len*(i % wrap)] = sparse[outer[inner[j]] + delta*i]
//   multiscatter  sparse[outer[inner[j]] + delta*i] = dense[j + len*(i % wrap)]
//
// The *_atomic variants add with atomicAdd instead of storing, for patterns whose writes
// land on one element more than once (the host decides which to launch).

typedef unsigned long long u64;

#define MG_GRID_STRIDE(t, total)                                                  \
    for (u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x; t < (total);           \
         t += (u64)gridDim.x * blockDim.x)

extern "C" __global__ void gather(double *__restrict__ dense, const double *__restrict__ sparse,
                                  const u64 *__restrict__ pattern, u64 len, u64 delta, u64 count,
                                  u64 wrap) {
    MG_GRID_STRIDE(t, len * count) {
        u64 i = t / len;
        u64 j = t - i * len;
        dense[j + len * (i % wrap)] = sparse[pattern[j] + delta * i];
    }
}

extern "C" __global__ void scatter(double *__restrict__ sparse, const double *__restrict__ dense,
                                   const u64 *__restrict__ pattern, u64 len, u64 delta, u64 count,
                                   u64 wrap) {
    MG_GRID_STRIDE(t, len * count) {
        u64 i = t / len;
        u64 j = t - i * len;
        sparse[pattern[j] + delta * i] = dense[j + len * (i % wrap)];
    }
}

extern "C" __global__ void scatter_atomic(double *__restrict__ sparse,
                                          const double *__restrict__ dense,
                                          const u64 *__restrict__ pattern, u64 len, u64 delta,
                                          u64 count, u64 wrap) {
    MG_GRID_STRIDE(t, len * count) {
        u64 i = t / len;
        u64 j = t - i * len;
        atomicAdd(&sparse[pattern[j] + delta * i], dense[j + len * (i % wrap)]);
    }
}

extern "C" __global__ void gs(double *__restrict__ sparse_s, const double *__restrict__ sparse_g,
                              const u64 *__restrict__ ps, const u64 *__restrict__ pg, u64 len,
                              u64 delta_s, u64 delta_g, u64 count) {
    MG_GRID_STRIDE(t, len * count) {
        u64 i = t / len;
        u64 j = t - i * len;
        sparse_s[ps[j] + delta_s * i] = sparse_g[pg[j] + delta_g * i];
    }
}

extern "C" __global__ void gs_atomic(double *__restrict__ sparse_s,
                                     const double *__restrict__ sparse_g,
                                     const u64 *__restrict__ ps, const u64 *__restrict__ pg,
                                     u64 len, u64 delta_s, u64 delta_g, u64 count) {
    MG_GRID_STRIDE(t, len * count) {
        u64 i = t / len;
        u64 j = t - i * len;
        atomicAdd(&sparse_s[ps[j] + delta_s * i], sparse_g[pg[j] + delta_g * i]);
    }
}

extern "C" __global__ void multigather(double *__restrict__ dense,
                                       const double *__restrict__ sparse,
                                       const u64 *__restrict__ outer,
                                       const u64 *__restrict__ inner, u64 len, u64 delta,
                                       u64 count, u64 wrap) {
    MG_GRID_STRIDE(t, len * count) {
        u64 i = t / len;
        u64 j = t - i * len;
        dense[j + len * (i % wrap)] = sparse[outer[inner[j]] + delta * i];
    }
}

extern "C" __global__ void multiscatter(double *__restrict__ sparse,
                                        const double *__restrict__ dense,
                                        const u64 *__restrict__ outer,
                                        const u64 *__restrict__ inner, u64 len, u64 delta,
                                        u64 count, u64 wrap) {
    MG_GRID_STRIDE(t, len * count) {
        u64 i = t / len;
        u64 j = t - i * len;
        sparse[outer[inner[j]] + delta * i] = dense[j + len * (i % wrap)];
    }
}

extern "C" __global__ void multiscatter_atomic(double *__restrict__ sparse,
                                               const double *__restrict__ dense,
                                               const u64 *__restrict__ outer,
                                               const u64 *__restrict__ inner, u64 len, u64 delta,
                                               u64 count, u64 wrap) {
    MG_GRID_STRIDE(t, len * count) {
        u64 i = t / len;
        u64 j = t - i * len;
        atomicAdd(&sparse[outer[inner[j]] + delta * i], dense[j + len * (i % wrap)]);
    }
}

// Fills a buffer with a value (buffers are initialised on the device, not copied over PCIe).
extern "C" __global__ void fill(double *__restrict__ x, double value, u64 n) {
    MG_GRID_STRIDE(t, n) { x[t] = value; }
}
