"""Run-folder reports: PNG training curves and a one-screen summary of `metrics.jsonl`.

from agentrl.report import write_plots, summarize
write_plots("runs/quickstart")      # -> runs/quickstart/plots/{reward,kl,...}.png
agentrl runs show runs/quickstart   # the summary table on the terminal
"""

from .metrics import EVAL_FILE, METRICS_FILE, RunSummary, read_rows, series, summarize
from .plots import family_of, write_plots

__all__ = [
    "EVAL_FILE",
    "METRICS_FILE",
    "RunSummary",
    "family_of",
    "read_rows",
    "series",
    "summarize",
    "write_plots",
]
