"""Decoding methods: one registry entry each (`METHODS`), bound to a job's models once."""

from .base import DecodeOptions, Generate, Method, Models, Runs
from .registry import METHODS, annotate, check_job, job_methods, method, needs_draft

__all__ = [
    "METHODS",
    "DecodeOptions",
    "Generate",
    "Method",
    "Models",
    "Runs",
    "annotate",
    "check_job",
    "job_methods",
    "method",
    "needs_draft",
]
