"""Kernels: fast implementations of formulas that live in ``posenc.functional``.

Each kernel is tested against the formula it implements. The C++ ones (``csrc/``) are built on
first use for the vector ISA that ATen runs at (``native.build_isa``): AVX-512, AVX2, NEON or
plain loops, through one vector layer (``csrc/simd.h``).
"""
