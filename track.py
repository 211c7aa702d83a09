"""
Experiment tracking, off by default: train.py --tracker=trackio (local-first, wandb's API; its runs
stay on this machine, `trackio show` opens them) or --tracker=wandb sends the run's config and
every line of its log there, as one tracked run named run_name, from rank 0 only. A resumed run
continues the same tracked run. Both packages are optional extras.
"""
import importlib
import os

from common import fail

TRACKERS = ("none", "trackio", "wandb")


def check(kind):
    """The tracker's module (None for none), or a one-line error: called before anything is written."""
    if kind not in TRACKERS:
        fail(f"--tracker={kind!r}: use one of {', '.join(TRACKERS)}")
    if kind == "none":
        return None
    try:
        return importlib.import_module(kind)
    except ImportError:
        fail(f"--tracker={kind} needs its package: pip install {kind} (or --tracker=none)")


def start(kind, project, run_name, run_dir, config, resume):
    """The tracked run (an object with .log(dict, step) and .finish()), or None for --tracker=none."""
    lib = check(kind)
    if lib is None:
        return None
    if kind == "trackio":  # trackio finds a run by its name
        return lib.init(project=project, name=run_name, config=config, resume="allow" if resume else "never")
    # wandb finds a run by an id it makes: kept beside the log, so that --resume finds it again
    path = os.path.join(run_dir, "wandb_id")
    if resume and os.path.exists(path):
        with open(path) as f:
            run_id = f.read().strip()
    else:
        run_id = lib.util.generate_id()
        with open(path, "w") as f:
            f.write(run_id)
    return lib.init(project=project, name=run_name, id=run_id, resume="allow", config=config)


def log(run, record, score=None):
    # every number of a log line, and of the step's score line beside them, named apart (score_*);
    # the step is the tracker's x axis
    if run is not None:
        named = {f"score_{k}": v for k, v in (score or {}).items() if "_" in k}
        run.log({k: v for k, v in {**record, **named}.items()
                 if k not in ("type", "step") and isinstance(v, (int, float))}, step=record["step"])
