"""TokenPilot: keep an agent's prompt prefix byte-stable (cached) and small.

from tokenpilot import TokenPilot
tp = TokenPilot()
prepared = tp.prepare(messages, tools, session_id="thread-1")
client.chat.completions.create(model=..., **prepared.openai_request())
"""

from ._moved import CORE_MOVES, alias_moved
from .config import Config, VolatilePattern
from .errors import ArtifactNotFound, ConfigError, MessageError, StoreError, TokenPilotError
from .ingest.stabilize import RECALL_TOOL, RECALL_TOOL_NAME
from .pilot import Prepared, PrepareStats, TokenPilot, ToolOutputReduction
from .store.artifacts import ArtifactStore, RecallResult
from .store.protocol import Artifacts, StateConflict, Store

__version__ = "0.1.0"

alias_moved(CORE_MOVES)

__all__ = [
    "RECALL_TOOL",
    "RECALL_TOOL_NAME",
    "ArtifactNotFound",
    "Artifacts",
    "ArtifactStore",
    "Config",
    "ConfigError",
    "MessageError",
    "PrepareStats",
    "Prepared",
    "RecallResult",
    "StateConflict",
    "Store",
    "StoreError",
    "TokenPilot",
    "TokenPilotError",
    "ToolOutputReduction",
    "VolatilePattern",
]
