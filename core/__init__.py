"""TokenPilot: keep an agent's prompt prefix byte-stable (cached) and small.

from tokenpilot import TokenPilot
tp = TokenPilot()
prepared = tp.prepare(messages, tools, session_id="thread-1")
client.chat.completions.create(model=..., **prepared.openai_request())
"""

from .artifacts import ArtifactStore, RecallResult
from .config import Config
from .errors import ArtifactNotFound, ConfigError, MessageError, StoreError, TokenPilotError
from .pilot import Prepared, PrepareStats, TokenPilot, ToolOutputReduction
from .stabilize import RECALL_TOOL, RECALL_TOOL_NAME, VolatilePattern
from .store import Artifacts, StateConflict, Store

__version__ = "0.1.0"

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
