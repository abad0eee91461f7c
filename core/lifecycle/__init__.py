"""Lifecycle-aware eviction: the object the facade talks to (`schedule`), its settings
(`settings`), one session's eviction plan (`plan`, `plan_tokens`), which turns leave the
model's view and what stands in their place (`evict`), and the rules for tool bundles a task
no longer needs (`segments`, `segment_window`).

Imports the foundation, `registry`, `messages`, `ingest`, `store` and `estimator`.
"""

from __future__ import annotations

from .._room import front_door

OFFERS = {
    "Lifecycle": "schedule",
    "LifecycleConfig": "settings",
    "RenderPlan": "plan",
    "SegmentRules": "segments",
    "WindowRule": "segments",
}
__all__ = sorted(OFFERS)
__getattr__ = front_door(__name__, OFFERS, old_face="schedule")
