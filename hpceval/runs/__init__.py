"""Runs on shared storage: run directories, the rendered job, job ids, and the run registry."""
