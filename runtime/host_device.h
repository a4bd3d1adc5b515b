// TRAINER_HOST_DEVICE marks an inline function both backends compile: __host__ __device__
// under nvcc, nothing elsewhere. Such a function is the one formula of the CPU and CUDA kernels.
#pragma once

#if defined(__CUDACC__)
#define TRAINER_HOST_DEVICE __host__ __device__
#else
#define TRAINER_HOST_DEVICE
#endif
