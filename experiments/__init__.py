"""Reproductions of the FlashAttention paper's IO analysis: measured against predicted.

Every experiment writes ``<out>/<name>/<name>.csv`` (one row per point, with the device, date,
software versions and the exact command) and ``<out>/<name>/<name>.png``.  Run them with
``python -m experiments run NAME... [--device gpu|cpu] [--quick] [--out DIR]``; ``python -m
experiments list`` names them.  Without a GPU only the model and the instrumented small-size
measurements (the kernels under Numba's CUDA simulator) run; every skipped part is named in the
CSV's ``note`` column and printed.
"""

#: Experiment name -> module (imported only when the experiment runs), in the order ``all`` runs them.
EXPERIMENTS = {
    "calibrate": "experiments.calibrate",
    "block_sparse": "experiments.block_sparse",
    "fig2_left": "experiments.fig2_left",
    "fig3": "experiments.fig3",
    "fig2_middle": "experiments.fig2_middle",
    "io_scaling": "experiments.io_scaling",
    "l2_effect": "experiments.l2_effect",
    "levels": "experiments.levels",
    "memory": "experiments.memory",
    "ring": "experiments.ring",
    "runtime": "experiments.runtime",
    "train_gpt": "experiments.train_gpt",
    "window": "experiments.window",
    "validation": "experiments.validation",
}


def __getattr__(name):
    """``experiments.measure``: ``experiments.levels.measure`` (every level of one algorithm run
    on this GPU under ncu, as ``simulator.predict(...).levels`` predicts it), imported on first
    use so that ``import experiments`` stays light."""
    if name == "measure":
        from .levels import measure
        return measure
    raise AttributeError(f"module 'experiments' has no attribute {name!r}")
