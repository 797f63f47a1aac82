"""The numba intrinsics of the search kernels: LLVM atomics, SIMD lanes, a spin lock, the
xorshift64* generator, the cycle counter and cache prefetch. No Python-level state; nothing
here knows a game or a tree."""
