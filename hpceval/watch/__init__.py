"""Checkpoint watches: evaluate each new checkpoint of a training run as it lands.

No daemon on the login node: `hpceval watch start` validates the run, writes a watch
directory on shared storage and submits a tiny CPU job (the *tick*). Each tick lists the
checkpoints, claims every new complete one in ``state.json`` under a filelock, submits its
evaluation through the same code path as ``hpceval submit``, and resubmits itself with
``--begin=now+INTERVAL --dependency=singleton``. docs/watch.md has the whole story.

    spec         watch.json: the options, the step of a checkpoint, intervals
    checkpoints  listing, fingerprints, completeness (marker or grace)
    state        state.json as one typed record (WatchState): its one reader (corruption is an
                 error, never a reset), its one writer (atomic), the lock
    tick         one tick (runs on a compute node: ``python -m hpceval.job watch-tick``)
    control      start / stop / find / status (the login node)
"""
