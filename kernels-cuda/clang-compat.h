// Definitions that NVRTC provides built in, for compiling the kernels with clang's CUDA front
// end without the CUDA SDK (scripts/check-cuda-kernels.sh: a syntax and type check to PTX).
// Force-included by that script only; NVRTC never sees this file.
#pragma once
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#include <__clang_cuda_builtin_vars.h>
static __device__ inline double atomicAdd(double *p, double v) {
    return __nvvm_atom_add_gen_d(p, v);
}
// __syncthreads is a clang builtin.
