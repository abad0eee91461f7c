"""Prefix-cache simulator: how many prompt tokens each call would read from a provider's cache.

A request is a list of ordered `Segment`s (tool schemas, system prompt, one or two per
message). Cached prefixes live in a trie keyed by segment content, so requests that share
most of their segments cost one dict lookup per segment, and each distinct segment is
tokenised once. The longest cached prefix is found at segment level, then at token level
inside the first segment that differs; the profile then applies its rules (minimum,
granularity, breakpoints, lifetime, capacity). Entries are keyed by content, not by
session, so one simulator shared by many sessions models cross-session warm starts.

Token counts are ours (offline tokenizer). `scale` converts them to the provider's
tokens for one call (its recorded prompt over our count), before minimum and
granularity apply, so simulated numbers are comparable with recorded ones.

Segments and their token counts live in `cache_segments.py`, the wording of a miss's
cause in `cache_diagnosis.py`; their public names are re-exported here.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tokenpilot.tokens import count_tokens

from .cache_diagnosis import common_chars, describe
from .cache_diagnosis import excerpt as excerpt  # re-exported: cachesim's public face
from .cache_segments import Segment as Segment  # re-exported, and used by the simulator
from .cache_segments import message_segments as message_segments
from .cache_segments import prefix_segments as prefix_segments
from .cache_segments import request_segments as request_segments
from .cache_segments import segment_tokens as segment_tokens
from .cache_segments import segments_tokens as segments_tokens
from .cache_segments import tools_segment as tools_segment

# -- profiles ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Profile:
    """One provider's caching rules (see DESIGN.md §6).

    `breakpoints`: hits only at prefixes written as a cache breakpoint (Anthropic), not
    at any token. `caches_output`: a call's output joins its cached prefix (DeepSeek's
    recorded hits include the previous reply). `lookback`: how many segments before a
    breakpoint Anthropic searches for an earlier written one. `model_minimums`: (model
    name prefix, minimum) where a model family caches from another size than `min_tokens`
    (Gemini 3 from 4,096 tokens, 2.5 from 2,048).
    """

    name: str
    min_tokens: int
    granularity: int
    ttl_s: float | None
    write_multiplier: float = 1.0
    breakpoints: bool = False
    caches_output: bool = False
    capacity_tokens: int | None = None
    lookback: int = 20
    model_minimums: tuple[tuple[str, int], ...] = ()

    def minimum(self, model: str = "") -> int:
        """The fewest prompt tokens this model caches from."""
        name = model.lower().rsplit("/", 1)[-1]
        return next((n for prefix, n in self.model_minimums if name.startswith(prefix)), self.min_tokens)


PROFILES: dict[str, Profile] = {
    "openai": Profile("openai", min_tokens=1024, granularity=128, ttl_s=600.0),
    "anthropic": Profile(
        "anthropic", min_tokens=1024, granularity=1, ttl_s=300.0, write_multiplier=1.25, breakpoints=True
    ),
    "deepseek": Profile("deepseek", min_tokens=64, granularity=64, ttl_s=86_400.0, caches_output=True),
    "vllm": Profile("vllm", min_tokens=16, granularity=16, ttl_s=None, capacity_tokens=1_000_000),
    # Gemini's implicit cache: any prefix match from the model's minimum (2,048 tokens on
    # 2.5 models, 4,096 on 3.x), reported as `cachedContentTokenCount`, 90% off; its
    # lifetime is not documented ("minutes"): 5 minutes here, as Anthropic's shortest.
    "gemini": Profile(
        "gemini", min_tokens=2048, granularity=1, ttl_s=300.0, model_minimums=(("gemini-3", 4096),)
    ),
}


def get_profile(profile: str | Profile) -> Profile:
    if isinstance(profile, Profile):
        return profile
    try:
        return PROFILES[profile]
    except KeyError:
        from tokenpilot.errors import ConfigError

        raise ConfigError(f"unknown cache profile {profile!r}; known: {', '.join(PROFILES)}") from None


def _sizes(segments: Sequence[Segment], sizes: Mapping[str, float] | None) -> list[float]:
    if not sizes:
        return [segment_tokens(s) for s in segments]
    return [sizes.get(s.key, segment_tokens(s)) for s in segments]


# -- results -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallCache:
    """One simulated call. prompt = hit + miss + write (write: Anthropic cache writes only).

    `cause` explains a miss: the first differing segment and what changed there,
    `expired (…)`, `below minimum (…)`, `cold start`, or None when nothing cached was lost.
    """

    prompt_tokens: int
    hit_tokens: int
    miss_tokens: int
    write_tokens: int
    cause: str | None = None


class _Node:
    __slots__ = ("seg", "parent", "children", "depth", "end", "last_used", "ttl", "breakpoint", "uid")

    def __init__(self, seg: Segment | None, parent: _Node | None, end: float, uid: int) -> None:
        self.seg = seg
        self.parent = parent
        self.children: dict[str, _Node] = {}
        self.depth = 0 if parent is None else parent.depth + 1
        self.end = end
        self.last_used = 0.0
        self.ttl: float | None = None
        self.breakpoint = False
        self.uid = uid


class CacheSimulator:
    """Replays requests against one provider's prefix cache; share it across sessions."""

    def __init__(
        self,
        profile: str | Profile = "openai",
        *,
        ttl_s: float | None = None,
        capacity_tokens: int | None = None,
    ) -> None:
        self.profile = get_profile(profile)
        self.ttl_s = ttl_s if ttl_s is not None else self.profile.ttl_s
        self.capacity_tokens = (
            capacity_tokens if capacity_tokens is not None else self.profile.capacity_tokens
        )
        self._uids = itertools.count()
        self._roots: dict[str, _Node] = {}
        self._clock = 0.0
        self._cached_tokens = 0.0
        self._evicted: set[tuple[int, str]] = set()

    @property
    def cached_tokens(self) -> int:
        """Tokens held (for the vLLM capacity)."""
        return round(self._cached_tokens)

    # -- public API ----------------------------------------------------------------------

    def simulate(
        self,
        segments: Sequence[Segment],
        timestamp: float | None = None,
        *,
        output: Sequence[Segment] = (),
        scale: float = 1.0,
        sizes: Mapping[str, float] | None = None,
        ttl_s: float | None = None,
        namespace: str = "",
    ) -> CallCache:
        """Serve one request, report its hit/miss/write tokens, then cache it.

        `output` is the call's reply (cached with the prompt where the profile does so).
        Token counts are ours unless `sizes` gives a segment's size (by `Segment.key`,
        e.g. in the provider's tokens); `scale` then multiplies the whole call. `ttl_s`
        overrides the lifetime of what this call writes (Anthropic's 1-hour option).
        `namespace` separates caches that never share entries (providers cache per model).
        """
        now = self._now(timestamp)
        prof = self.profile
        toks = _sizes(segments, sizes)
        prompt_ours = sum(toks)
        root = self._root(namespace)

        node = root
        path = [node]
        expired: tuple[float, float] | None = None
        for seg in segments:
            child = node.children.get(seg.key)
            if child is None:
                break
            if self._is_expired(child, now):
                expired = (now - child.last_used, child.ttl or 0.0)
                self._drop(child)
                break
            node = child
            path.append(child)
        matched = node.end
        depth = node.depth

        partial, divergence = 0.0, None
        if depth < len(segments):
            shared, divergence = self._diverge(node, segments[depth], now)
            ours = segment_tokens(segments[depth])
            partial = shared * toks[depth] / ours if ours else 0.0
        evicted = depth < len(segments) and (node.uid, segments[depth].key) in self._evicted

        if prof.breakpoints:
            hit_ours, lookback_gap = self._breakpoint_hit(path, segments)
        else:
            hit_ours, lookback_gap = matched + partial, None

        prompt = round(prompt_ours * scale)
        hit = min(round(hit_ours * scale), prompt)
        minimum = prof.minimum(namespace)
        below_min = 0 < hit < minimum
        if below_min:
            hit = 0
        elif prof.granularity > 1:
            hit -= hit % prof.granularity
        write = 0
        if prof.breakpoints and prompt >= minimum:
            write = prompt - hit
        miss = prompt - hit - write

        cause = None
        if expired is not None:
            cause = f"expired (idle {expired[0]:.0f} s > ttl {expired[1]:.0f} s)"
        elif evicted:
            cause = f"evicted (LRU, capacity {self.capacity_tokens} tokens)"
        elif divergence is not None:
            cause = divergence
        elif matched + partial == 0 and prompt > 0:
            cause = "cold start"
        elif below_min:
            cause = f"below minimum ({round((matched + partial) * scale)} < {minimum} tokens)"
        elif lookback_gap is not None and hit == 0:
            cause = f"lookback (cached breakpoint {lookback_gap} segments back > {prof.lookback})"
        elif prof.breakpoints and hit == 0 and prompt > 0:
            cause = "no cached breakpoint"

        tail = list(output) if prof.caches_output else []
        self._write(root, segments, toks, tail, _sizes(tail, sizes), now, scale, ttl_s)
        return CallCache(prompt, hit, miss, write, cause)

    def prewarm(
        self,
        segments: Sequence[Segment],
        timestamp: float | None = None,
        *,
        scale: float = 1.0,
        sizes: Mapping[str, float] | None = None,
        ttl_s: float | None = None,
        namespace: str = "",
    ) -> None:
        """Cache a prefix sent by calls the record does not hold (no result is reported)."""
        now = self._now(timestamp)
        self._write(self._root(namespace), segments, _sizes(segments, sizes), [], [], now, scale, ttl_s)

    def _root(self, namespace: str) -> _Node:
        root = self._roots.get(namespace)
        if root is None:
            root = self._roots[namespace] = _Node(None, None, 0.0, next(self._uids))
        return root

    # -- internals -----------------------------------------------------------------------

    def _now(self, timestamp: float | None) -> float:
        if timestamp is not None:
            self._clock = max(self._clock, float(timestamp))
        return self._clock

    def _is_expired(self, node: _Node, now: float) -> bool:
        return node.ttl is not None and now - node.last_used > node.ttl

    def _drop(self, node: _Node) -> None:
        """Remove a node and its subtree (expired or evicted content)."""
        parent = node.parent
        if parent is not None and node.seg is not None:
            parent.children.pop(node.seg.key, None)
        stack = [node]
        while stack:
            n = stack.pop()
            if n.parent is not None:
                self._cached_tokens -= n.end - n.parent.end
            stack.extend(n.children.values())

    def _diverge(self, node: _Node, seg: Segment, now: float) -> tuple[int, str | None]:
        """Tokens shared with the best cached continuation of `node`, and why it stopped."""
        alive = []
        for child in list(node.children.values()):
            if self._is_expired(child, now):
                self._drop(child)
            else:
                alive.append(child)
        if not alive:
            return 0, None
        best, best_pos = None, -1
        for child in alive:
            pos = common_chars(seg, child.seg)
            if pos > best_pos:
                best, best_pos = child, pos
        assert best is not None and best.seg is not None
        shared = 0
        if best_pos > 0:
            shared = min(count_tokens(seg.text[:best_pos]), max(0, segment_tokens(seg) - 1))
        return shared, describe(seg, best.seg, best_pos)

    def _breakpoint_hit(self, path: list[_Node], segments: Sequence[Segment]) -> tuple[int, int | None]:
        """Longest written breakpoint on the matched path within lookback of a breakpoint here."""
        marks = [len(segments)] + [k + 1 for k, s in enumerate(segments) if s.breakpoint]
        lookback = self.profile.lookback
        gap = None
        for node in reversed(path[1:]):
            if not node.breakpoint:
                continue
            if any(node.depth <= m <= node.depth + lookback for m in marks):
                return node.end, None
            gap = gap if gap is not None else min(m - node.depth for m in marks if m >= node.depth)
        return 0, gap

    def _write(
        self,
        root: _Node,
        segments: Sequence[Segment],
        toks: Sequence[float],
        tail: Sequence[Segment],
        tail_toks: Sequence[float],
        now: float,
        scale: float,
        ttl_s: float | None,
    ) -> None:
        ttl = ttl_s if ttl_s is not None else self.ttl_s
        prof = self.profile
        node = root
        n_prompt = len(segments)
        all_segs = list(segments) + list(tail)
        all_toks = list(toks) + list(tail_toks)
        for k, (seg, ntok) in enumerate(zip(all_segs, all_toks)):
            child = node.children.get(seg.key)
            if child is None:
                child = _Node(seg, node, node.end + ntok, next(self._uids))
                node.children[seg.key] = child
                self._cached_tokens += ntok
                self._evicted.discard((node.uid, seg.key))
            child.last_used = now
            child.ttl = ttl
            if prof.breakpoints and (k == n_prompt - 1 or (k < n_prompt and seg.breakpoint)):
                if child.end * scale >= prof.min_tokens:
                    child.breakpoint = True
            node = child
        if self.capacity_tokens is not None and self._cached_tokens > self.capacity_tokens:
            self._evict()

    def _evict(self) -> None:
        """Drop least recently used leaves until the cache fits its capacity (vLLM)."""
        heap: list[tuple[float, int, _Node]] = []
        stack = list(self._roots.values())
        while stack:
            n = stack.pop()
            if not n.children and n.parent is not None:
                heap.append((n.last_used, n.uid, n))
            stack.extend(n.children.values())
        heapq.heapify(heap)
        while heap and self._cached_tokens > (self.capacity_tokens or 0):
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None and leaf.seg is not None
            self._evicted.add((parent.uid, leaf.seg.key))
            self._drop(leaf)
            if parent.parent is not None and not parent.children:
                heapq.heappush(heap, (parent.last_used, parent.uid, parent))
