// Gather/scatter kernels of `mgbench replay --cuda`, compiled at run time by NVRTC.
//
// One GPU thread per element access: thread t handles iteration i = t / len and pattern
// position j = t % len of the Spatter loop, in a grid-stride loop (so any grid size covers
// len * count). Indices are 64-bit: patterns mined from real traces exceed 2^32. Each thread
// divides once and then steps (i, j) by the grid's size with additions: a 64-bit division per
// element is slow once t passes 2^32, and costs even below (on an H100, an L2-resident random
// gather ran at 4.1 TB/s up to 2^32 accesses and 2.4 TB/s at 2^33 dividing per element; 5.5
// TB/s at both stepping).
//
//   gather        dense[j + len*(i % wrap)] = sparse[pattern[j] + delta*i]   (see below)
//   scatter       sparse[pattern[j] + delta*i] = dense[j + len*(i % wrap)]
//   gs            sparse_s[ps[j] + delta_s*i] = sparse_g[pg[j] + delta_g*i]
//   multigather   dense[j + len*(i % wrap)] = sparse[outer[inner[j]] + delta*i]
//   multiscatter  sparse[outer[inner[j]] + delta*i] = dense[j + len*(i % wrap)]
//
// The *_atomic variants add with atomicAdd instead of storing, for patterns whose writes
// land on one element more than once (the host decides which to launch).
//
// Gathers store the value they read only when it differs from `fill`, the value the host filled
// the sparse side with; replay passes that value, so a gather's traffic is its reads alone, as
// in Spatter's CUDA backend. (Every thread storing would measure contention on the few dense
// rows a million threads share instead: measured on an H100, a stride-1 gather ran at 0.28 TB/s
// storing every value and 2.63 TB/s storing none, 94% of GPU STREAM Copy.) The comparison
// needs the value, so no load can be left out. The device tests pass NaN, which differs from
// everything, so every value is stored and checked.
//
// Deltas are signed. Every sparse index is `origin + p + delta*i`, where the host sets
// origin = |delta| * (count - 1) for a negative delta (0 otherwise), so indices never go below
// 0. The sum is taken in unsigned 64-bit arithmetic, which wraps modulo 2^64 and is therefore
// exact whenever the true result is a valid index (the host sized the buffer for all of them).

typedef unsigned long long u64;
typedef long long i64;

#define MG_AT(p, delta, origin, i) ((origin) + (p) + (u64)(delta) * (i))

#define MG_GRID_STRIDE(t, total)                                                  \
    for (u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x; t < (total);           \
         t += (u64)gridDim.x * blockDim.x)

// The grid-stride loop over t = i * len + j for i < count, j < len, without a division per
// element: the grid's size is split once into whole iterations (mg_di) and positions (mg_dj),
// and each step adds them, carrying into i when j passes len. len 0 runs nothing.
#define MG_EACH(i, j, len, count)                                                       \
    const u64 mg_t0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;                     \
    const u64 mg_step = (u64)gridDim.x * blockDim.x;                                   \
    const u64 mg_di = (len) ? mg_step / (len) : 0;                                     \
    const u64 mg_dj = mg_step - mg_di * (len);                                         \
    for (u64 i = (len) ? mg_t0 / (len) : (count), j = (len) ? mg_t0 % (len) : 0;       \
         i < (count);                                                                  \
         i += mg_di + (j + mg_dj >= (len)), j = j + mg_dj >= (len) ? j + mg_dj - (len) : j + mg_dj)

extern "C" __global__ void gather(double *__restrict__ dense, const double *__restrict__ sparse,
                                  const u64 *__restrict__ pattern, u64 len, i64 delta,
                                  u64 origin, u64 count, u64 wrap, double fill) {
    MG_EACH(i, j, len, count) {
        double x = sparse[MG_AT(pattern[j], delta, origin, i)];
        if (x != fill) dense[j + len * (i % wrap)] = x;
    }
}

extern "C" __global__ void scatter(double *__restrict__ sparse, const double *__restrict__ dense,
                                   const u64 *__restrict__ pattern, u64 len, i64 delta,
                                   u64 origin, u64 count, u64 wrap) {
    MG_EACH(i, j, len, count) {
        sparse[MG_AT(pattern[j], delta, origin, i)] = dense[j + len * (i % wrap)];
    }
}

extern "C" __global__ void scatter_atomic(double *__restrict__ sparse,
                                          const double *__restrict__ dense,
                                          const u64 *__restrict__ pattern, u64 len, i64 delta,
                                          u64 origin, u64 count, u64 wrap) {
    MG_EACH(i, j, len, count) {
        atomicAdd(&sparse[MG_AT(pattern[j], delta, origin, i)], dense[j + len * (i % wrap)]);
    }
}

extern "C" __global__ void gs(double *__restrict__ sparse_s, const double *__restrict__ sparse_g,
                              const u64 *__restrict__ ps, const u64 *__restrict__ pg, u64 len,
                              i64 delta_s, u64 origin_s, i64 delta_g, u64 origin_g, u64 count) {
    MG_EACH(i, j, len, count) {
        sparse_s[MG_AT(ps[j], delta_s, origin_s, i)] =
            sparse_g[MG_AT(pg[j], delta_g, origin_g, i)];
    }
}

extern "C" __global__ void gs_atomic(double *__restrict__ sparse_s,
                                     const double *__restrict__ sparse_g,
                                     const u64 *__restrict__ ps, const u64 *__restrict__ pg,
                                     u64 len, i64 delta_s, u64 origin_s, i64 delta_g,
                                     u64 origin_g, u64 count) {
    MG_EACH(i, j, len, count) {
        atomicAdd(&sparse_s[MG_AT(ps[j], delta_s, origin_s, i)],
                  sparse_g[MG_AT(pg[j], delta_g, origin_g, i)]);
    }
}

extern "C" __global__ void multigather(double *__restrict__ dense,
                                       const double *__restrict__ sparse,
                                       const u64 *__restrict__ outer,
                                       const u64 *__restrict__ inner, u64 len, i64 delta,
                                       u64 origin, u64 count, u64 wrap, double fill) {
    MG_EACH(i, j, len, count) {
        double x = sparse[MG_AT(outer[inner[j]], delta, origin, i)];
        if (x != fill) dense[j + len * (i % wrap)] = x;
    }
}

extern "C" __global__ void multiscatter(double *__restrict__ sparse,
                                        const double *__restrict__ dense,
                                        const u64 *__restrict__ outer,
                                        const u64 *__restrict__ inner, u64 len, i64 delta,
                                        u64 origin, u64 count, u64 wrap) {
    MG_EACH(i, j, len, count) {
        sparse[MG_AT(outer[inner[j]], delta, origin, i)] = dense[j + len * (i % wrap)];
    }
}

extern "C" __global__ void multiscatter_atomic(double *__restrict__ sparse,
                                               const double *__restrict__ dense,
                                               const u64 *__restrict__ outer,
                                               const u64 *__restrict__ inner, u64 len, i64 delta,
                                               u64 origin, u64 count, u64 wrap) {
    MG_EACH(i, j, len, count) {
        atomicAdd(&sparse[MG_AT(outer[inner[j]], delta, origin, i)], dense[j + len * (i % wrap)]);
    }
}

// Fills a buffer with a value (buffers are initialised on the device, not copied over PCIe).
extern "C" __global__ void fill(double *__restrict__ x, double value, u64 n) {
    MG_GRID_STRIDE(t, n) { x[t] = value; }
}
