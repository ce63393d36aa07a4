"""Helpers of the experiment scripts' summaries (examples/*/summarise.py): standard library only.

  sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
  from studies import mean_sd, write_csv, replace_file
"""

import csv
import os
import statistics
from pathlib import Path


def mean_sd(values):
    """Mean and sample standard deviation (0 for one value, NaN for none)."""
    values = list(values)
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def replace_file(path: Path, data: bytes):
    """Writes data to path atomically: a temporary file beside it, then a rename."""
    tmp = path.with_name(path.name + f".tmp.{os.getpid()}")
    tmp.write_bytes(data)
    tmp.replace(path)


def write_csv(path: Path, header, rows):
    """A CSV with one header row, written atomically."""
    tmp = path.with_name(path.name + f".tmp.{os.getpid()}")
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
    tmp.replace(path)
