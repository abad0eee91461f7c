"""Reduction passes: one module each, pure `apply(text, ctx) -> text` functions."""

from .base import PREVIEW_HEAD, PREVIEW_TAIL, PassContext, ReductionPass, preview, recall_hint

__all__ = ["PREVIEW_HEAD", "PREVIEW_TAIL", "PassContext", "ReductionPass", "preview", "recall_hint"]
