"""Pieces every experiment shares: run context, metadata, CSV files, plots, the cases that run
the kernels, the simulator layer, CUDA-event timing, ncu and the instrumented counts."""
