"""A deterministic CUDA load (tensor-core GEMM, fp32, fp64, memory bandwidth) and a check that metrics follow it."""
