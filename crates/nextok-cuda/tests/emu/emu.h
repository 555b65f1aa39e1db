// A CPU emulation of the CUDA built-ins that src/kernels.cu uses, so that the tests can run the
// kernels' own source (compiled as C++ with NEXTOK_CPU_EMULATION) on a machine without a GPU.
//
// Every CUDA thread of a block is an OS thread; blocks run one after another. A warp's shuffle
// is a write to the warp's slots, a barrier of the warp's live threads, a read, and a second
// barrier; __syncthreads is a barrier of the block's live threads. A thread that returns leaves
// both barriers (arrive_and_drop), as a CUDA thread that has exited no longer takes part.
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};

inline thread_local dim3 threadIdx;
inline thread_local dim3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;

struct EmuWarp {
    std::unique_ptr<std::barrier<>> bar;
    uint64_t slot[32];
};

inline thread_local EmuWarp* emu_warp = nullptr;
inline thread_local std::barrier<>* emu_block = nullptr;

// The current block's warps and barrier, which each thread picks up when the block starts.
struct EmuPointers {
    std::vector<EmuWarp>* warps;
    std::barrier<>* block;
};
inline EmuPointers emu_pointers;

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static

using std::fmaxf;
using std::isfinite;
using std::max;
using std::min;

// The rounded-as-named intrinsics: the host's default rounding is to nearest, ties to even,
// and the emulator is compiled without contraction of multiplies into fused multiply-adds.
inline float __fmul_rn(float a, float b) { return a * b; }
inline int __float2int_rn(float f) { return (int)std::nearbyint(f); }
inline float __ll2float_rn(long long v) { return (float)v; }

inline void __syncthreads() { emu_block->arrive_and_wait(); }

template <typename T>
T __shfl_down_sync(unsigned, T v, int delta, int width = 32) {
    static_assert(sizeof(T) <= sizeof(uint64_t), "shuffle of a wide type");
    const int lane = threadIdx.x & 31;
    std::memcpy(&emu_warp->slot[lane], &v, sizeof(T));
    emu_warp->bar->arrive_and_wait();
    T r = v;
    if ((lane % width) + delta < width) std::memcpy(&r, &emu_warp->slot[lane + delta], sizeof(T));
    emu_warp->bar->arrive_and_wait();
    return r;
}

template <typename T>
T __shfl_sync(unsigned, T v, int src_lane) {
    static_assert(sizeof(T) <= sizeof(uint64_t), "shuffle of a wide type");
    const int lane = threadIdx.x & 31;
    std::memcpy(&emu_warp->slot[lane], &v, sizeof(T));
    emu_warp->bar->arrive_and_wait();
    T r;
    std::memcpy(&r, &emu_warp->slot[src_lane & 31], sizeof(T));
    emu_warp->bar->arrive_and_wait();
    return r;
}

template <typename I>
inline float __int_as_float(I i) {
    const int32_t v = (int32_t)i;
    float f;
    std::memcpy(&f, &v, 4);
    return f;
}

inline float __uint_as_float(unsigned int u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline unsigned int __float_as_uint(float f) {
    unsigned int u;
    std::memcpy(&u, &f, 4);
    return u;
}

// IEEE binary16 to binary32, exactly (normals, subnormals, infinities, NaN).
inline float emu_f16_to_f32(unsigned short h) {
    const uint32_t sign = (uint32_t)(h >> 15) << 31;
    const uint32_t exp = (h >> 10) & 31;
    const uint32_t man = h & 1023;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {
            // A subnormal: value man * 2^-24, exactly representable as a normal f32.
            float f = std::ldexp((float)man, -24);
            std::memcpy(&bits, &f, 4);
            bits |= sign;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// Runs `kernel` over the grid, block after block, each block's threads at once. The threads are
// started once per launch and reused for every block (starting them per block is slow).
template <typename F>
void emu_launch(dim3 grid, dim3 block, F kernel) {
    gridDim = grid;
    blockDim = block;
    const unsigned n = block.x * block.y * block.z;
    std::barrier<> start(n + 1), done(n + 1);
    dim3 current;
    bool quit = false;
    std::vector<std::thread> threads;
    threads.reserve(n);
    for (unsigned t = 0; t < n; ++t) {
        threads.emplace_back([&, t] {
            threadIdx = dim3{t % block.x, t / block.x % block.y, t / (block.x * block.y)};
            for (;;) {
                start.arrive_and_wait();
                if (quit) return;
                blockIdx = current;
                emu_warp = &(*emu_pointers.warps)[t / 32];
                emu_block = emu_pointers.block;
                kernel();
                emu_warp->bar->arrive_and_drop();
                emu_block->arrive_and_drop();
                done.arrive_and_wait();
            }
        });
    }
    for (unsigned bz = 0; bz < grid.z; ++bz)
        for (unsigned by = 0; by < grid.y; ++by)
            for (unsigned bx = 0; bx < grid.x; ++bx) {
                std::barrier<> block_bar(n);
                std::vector<EmuWarp> warps((n + 31) / 32);
                for (unsigned w = 0; w < warps.size(); ++w)
                    warps[w].bar = std::make_unique<std::barrier<>>(std::min(32u, n - 32 * w));
                current = dim3{bx, by, bz};
                emu_pointers = {&warps, &block_bar};
                start.arrive_and_wait();  // the threads run the block
                done.arrive_and_wait();   // and have all finished it
            }
    quit = true;
    start.arrive_and_wait();
    for (auto& th : threads) th.join();
}
