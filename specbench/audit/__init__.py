"""Exactness audit: does a decoder's output follow the target's exact distribution?"""

from .core import AuditedDecoder, audited_decoder, draw_samples, exact_first, exact_second
from .job import run_audit

__all__ = [
    "AuditedDecoder",
    "audited_decoder",
    "draw_samples",
    "exact_first",
    "exact_second",
    "run_audit",
]
