"""Kernels: fast implementations of formulas that live in ``posenc.functional``.

Each kernel is tested against the formula it implements; this package imports functional,
never the reverse. RoPE: ``rope.rotate_pair(..., kernel=)`` runs ``rope_eager``, ``rope_cpp``,
``rope_inductor`` or ``rope_triton`` (what ``RoPE(kernel=...)`` chooses per module). The C++
kernels (``csrc/``) are built on first use for the vector ISA that ATen runs at
(``native.build_isa``): AVX-512, AVX2, NEON or plain loops, through one vector layer
(``csrc/simd.h``).
"""
