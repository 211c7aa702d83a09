"""
The analysis wing: what reads the logs train.py writes and judges them, for plot.py, the one
command. Never imports torch.

    logs.py     read log.jsonl files; refuse runs that are not one experiment
    stats.py    the tests (paired t, Welch, Holm, TOST, Fisher's exact), numpy and math only
    curves.py   the figure's numbers: seeds averaged, gaps to MHA, how much sooner
    sweeps.py   --pareto and --lr
    recall.py   --recall (MQAR)
    verdict.py  --verdict: every experiment's answer in one table
"""
