"""Staging for offline compute nodes, and the preflight that submit runs before submitting.

    from hpceval.staging import preflight, check_preflight, stage

``preflight(resolved)`` lists what would fail only once the job runs (missing SIF images,
checkpoint, staged data, required variables by name); ``check_preflight(configs)`` raises
ConfigError (exit 2) with all of them. ``stage(configs)`` pulls images and fetches hub data on
the login node. Imports stay light: nothing here runs a subprocess or touches the network on
import.
"""

from __future__ import annotations

from hpceval.staging.preflight import check_preflight, preflight, preflight_all
from hpceval.staging.stage import StageItem, StageReport, stage, stage_command

__all__ = ["StageItem", "StageReport", "check_preflight", "preflight", "preflight_all", "stage",
           "stage_command"]
