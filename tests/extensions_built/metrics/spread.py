"""A metric declared in one file: the spread of the stated P, shown in the runs table."""
import numpy as np

from martingale.metrics import Column, stage_metric


@stage_metric("stated_sd", reads=("stated",), column=Column("sd(P)", 3))
def stated_sd(s):
    """stated_sd = the standard deviation of the stated P over the questions that state one."""
    return float(np.std(s.stated[s.ok]))
