"""images: shrink base64 images inside tool outputs and OpenAI image parts.

A screenshot tool or an MCP server can return a multi-megabyte PNG as a `data:` URI:
as text that is millions of tokens, as an image part it is slow and costly to send on
every turn. This pass re-encodes each oversize bitmap (JPEG, or PNG when it has alpha),
lowering quality and halving its size until it fits `max_bitmap_bytes`; minifies an
oversize SVG or, if that is not enough, replaces it by a marker; and replaces an image it
cannot decode, or will not decode, by a marker. Every marker names the stored original
via `recall_hint`.

Safety:

* Decompression bombs are refused from the header alone. `Image.open` is lazy: it reads
  the dimensions and allocates nothing, so `width * height` is checked against
  `max_pixels` before `load()`. Pillow itself only *warns* (DecompressionBombWarning)
  above `Image.MAX_IMAGE_PIXELS` and raises above twice that; here that warning is turned
  into a refusal, since the cap is `min(max_pixels, Image.MAX_IMAGE_PIXELS)`, and Pillow's
  error becomes the same refusal marker. (The process-wide `warnings` filters are left
  alone: changing them is not thread-safe.)
* Only raster formats a browser shows are opened (PNG, JPEG, GIF, WebP, BMP, TIFF, ICO,
  AVIF), whatever the MIME type claims: no EPS (Ghostscript), no exotic decoders.
* Only the first frame of an animation is kept; EXIF orientation is applied, metadata dropped.

Sizes are decoded bytes (the base64 text is 4/3 of that). Deterministic: the same input
gives the same bytes (fixed quality ladder and resampling, no metadata). Never raises.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from PIL import Image, ImageOps

from .base import LINE_KINDS, PassContext, recall_hint

__all__ = ["ImageDownsample", "downsample_data_uri", "downsample_image_part"]

_DATA_URI = re.compile(
    r"data:image/(?P<subtype>[A-Za-z0-9.+-]+)"
    r"(?:;[A-Za-z0-9._+-]+=[^;,\s\"'<>()]*)*"  # parameters such as ;name=shot.png
    r";base64,(?P<payload>[A-Za-z0-9+/]+={0,2})"
)
_SAFE_FORMATS = ("PNG", "JPEG", "MPO", "GIF", "WEBP", "BMP", "TIFF", "ICO", "AVIF")
_JPEG_QUALITIES = (85, 70, 55, 40)
# First guess at how many pixels fit: about one byte per pixel, then the ladder refines.
_PIXELS_PER_BYTE = 8
_MAX_ROUNDS = 32
_SVG_COMMENT = re.compile(r"<!--.*?-->", re.S)
_SVG_METADATA = re.compile(
    r"<metadata\b.*?</metadata\s*>|<metadata\b[^>]*/>"
    r"|<sodipodi:namedview\b.*?</sodipodi:namedview\s*>|<sodipodi:namedview\b[^>]*/>",
    re.S | re.I,
)
_SVG_WS = re.compile(r"\s+")
_SVG_BETWEEN_TAGS = re.compile(r">\s+<")


def _decoded_len(payload: str) -> int:
    return len(payload) * 3 // 4 - payload[-2:].count("=")


class _Refused(Exception):
    """Carries the marker text for an image that is not passed on."""


@dataclass(frozen=True, slots=True)
class ImageDownsample:
    """Fit embedded images under byte limits; refuse bombs and undecodable data with a marker."""

    name: ClassVar[str] = "images"
    accepts: ClassVar[frozenset[str]] = LINE_KINDS  # a page's images go with its markup

    max_bitmap_bytes: int = 100_000
    """Largest bitmap (decoded bytes) passed on as is; larger ones are re-encoded until they fit."""
    max_svg_bytes: int = 50_000
    """Largest SVG passed on as is; larger ones are minified, and replaced by a marker if still larger."""
    max_pixels: int = 40_000_000
    """Largest width x height ever decoded; a larger image (a decompression bomb?) is refused unread."""

    def apply(self, text: str, ctx: PassContext) -> str:
        """The text with every oversize or undecodable `data:image/...;base64,` URI replaced."""
        try:
            if not isinstance(text, str) or "data:image/" not in text:
                return text
            out = _DATA_URI.sub(lambda m: self._reduce(m, ctx), text)
            return text if out == text else out
        except Exception:
            return text

    def apply_data_uri(self, uri: str, ctx: PassContext) -> str:
        """One data URI: a smaller data URI, a marker text, or the input object itself."""
        try:
            if not isinstance(uri, str):
                return uri
            m = _DATA_URI.fullmatch(uri.strip())
            if m is None:
                return uri
            out = self._reduce(m, ctx)
            return uri if out == m[0] else out
        except Exception:
            return uri

    # -- internals ---------------------------------------------------------------------

    def _reduce(self, m: re.Match[str], ctx: PassContext) -> str:
        subtype, payload = m["subtype"].lower(), m["payload"]
        try:
            if subtype in ("svg+xml", "svg"):
                return self._svg(m[0], payload, ctx)
            return self._bitmap(m[0], subtype, payload, ctx)
        except _Refused as refusal:
            return str(refusal)
        except Exception:
            return _marker(
                f"image/{subtype} data URI of {_decoded_len(payload):,} bytes could not be decoded", ctx
            )

    def _bitmap(self, uri: str, subtype: str, payload: str, ctx: PassContext) -> str:
        mime = f"image/{subtype}"
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            data = b""
        if not data:
            raise _Refused(
                _marker(f"{mime} data URI of {_decoded_len(payload):,} bytes could not be decoded", ctx)
            )
        cap = self.max_pixels
        if Image.MAX_IMAGE_PIXELS:  # Pillow's warning threshold becomes a refusal too
            cap = min(cap, int(Image.MAX_IMAGE_PIXELS))
        oversize = len(data) > self.max_bitmap_bytes
        try:
            img = Image.open(io.BytesIO(data), formats=_SAFE_FORMATS)  # header only, no pixels yet
            width, height = img.size
        except Image.DecompressionBombError:
            raise _Refused(_bomb_marker(mime, None, len(data), cap, ctx)) from None
        except Exception:
            if not oversize:
                return uri  # small, and maybe a format we do not read: pass it on untouched
            raise
        if width * height > cap:
            raise _Refused(_bomb_marker(mime, (width, height), len(data), cap, ctx))
        if not oversize:
            return uri
        encoded, out_mime = self._shrink(img)
        if encoded is None:
            raise _Refused(
                _marker(
                    f"{mime} of {width}x{height} px ({len(data):,} bytes) omitted: "
                    f"it does not fit in {self.max_bitmap_bytes:,} bytes",
                    ctx,
                )
            )
        return f"data:{out_mime};base64,{base64.b64encode(encoded).decode('ascii')}"

    def _shrink(self, img: Image.Image) -> tuple[bytes | None, str]:
        """Re-encode until it fits: quality ladder first, then halve the size; None if even 1x1 does not."""
        limit = self.max_bitmap_bytes
        budget = max(1, limit * _PIXELS_PER_BYTE)
        if img.format in ("JPEG", "MPO") and img.width * img.height > budget:
            scale = math.sqrt(budget / (img.width * img.height))
            # Decode at 1/2..1/8 scale directly (never below the target): less work and memory.
            img.draft("RGB", (max(1, int(img.width * scale)), max(1, int(img.height * scale))))
        img.load()
        img = ImageOps.exif_transpose(img) or img
        width, height = img.size
        scale = min(1.0, math.sqrt(budget / max(1, width * height)))
        target = (max(1, int(width * scale)), max(1, int(height * scale)))
        alpha = img.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in img.info
        if img.mode.startswith("I"):  # 16/32-bit grey: a plain convert("L") would clip it to white
            img = _to_8bit_grey(img)
        img = img.convert("RGBA" if alpha else ("L" if img.mode in ("1", "L") else "RGB"))
        if img.size != target:
            img = img.resize(target, Image.Resampling.LANCZOS, reducing_gap=3.0)
        fmt, mime = ("PNG", "image/png") if alpha else ("JPEG", "image/jpeg")
        for _ in range(_MAX_ROUNDS):
            for quality in (None,) if alpha else _JPEG_QUALITIES:
                buf = io.BytesIO()
                if alpha:
                    img.save(buf, fmt, compress_level=9)
                else:
                    img.save(buf, fmt, quality=quality)
                if buf.tell() <= limit:
                    return buf.getvalue(), mime
            if img.size == (1, 1):
                break
            img = img.resize((max(1, img.width // 2), max(1, img.height // 2)), Image.Resampling.LANCZOS)
        return None, mime

    def _svg(self, uri: str, payload: str, ctx: PassContext) -> str:
        size = _decoded_len(payload)
        if size <= self.max_svg_bytes:
            return uri
        try:
            svg = base64.b64decode(payload, validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            raise _Refused(
                _marker(f"image/svg+xml data URI of {size:,} bytes could not be decoded", ctx)
            ) from None
        mini = _minify_svg(svg).encode("utf-8")
        if len(mini) <= self.max_svg_bytes:
            return f"data:image/svg+xml;base64,{base64.b64encode(mini).decode('ascii')}"
        raise _Refused(_marker(f"SVG image of {size:,} bytes omitted", ctx))


def _to_8bit_grey(img: Image.Image) -> Image.Image:
    wide = img.convert("I")
    if img.mode.startswith("I;16") or (wide.getextrema()[1] or 0) > 255:
        wide = wide.point(lambda v: v / 256)
    return wide.convert("L")


def _minify_svg(svg: str) -> str:
    """Comments, editor metadata and whitespace runs out; drawing and text untouched."""
    svg = _SVG_COMMENT.sub("", svg)
    svg = _SVG_METADATA.sub("", svg)
    svg = _SVG_BETWEEN_TAGS.sub("><", svg.strip())
    return _SVG_WS.sub(" ", svg)


def _marker(what: str, ctx: PassContext) -> str:
    return f"[tokenpilot: {what}; {recall_hint(ctx.artifact_id)}]"


def _bomb_marker(mime: str, size: tuple[int, int] | None, nbytes: int, cap: int, ctx: PassContext) -> str:
    dims = f"{size[0]}x{size[1]} px, " if size else ""
    return _marker(
        f"{mime} ({dims}{nbytes:,} bytes) refused: more than {cap:,} pixels, a possible decompression bomb",
        ctx,
    )


_DEFAULT = ImageDownsample()


def downsample_data_uri(uri: str, ctx: PassContext, *, settings: ImageDownsample = _DEFAULT) -> str:
    """A smaller `data:image/...` URI, a marker text, or `uri` itself when it needs no change."""
    return settings.apply_data_uri(uri, ctx)


def downsample_image_part(
    part: Mapping[str, Any], ctx: PassContext, *, settings: ImageDownsample = _DEFAULT
) -> Mapping[str, Any]:
    """An OpenAI `{"type": "image_url", ...}` part with a smaller image, or `part` itself.

    When the image is refused (bomb, undecodable, SVG too large) the part becomes a
    `{"type": "text", "text": marker}` part: a marker is not a URL the API would accept.
    """
    try:
        if not isinstance(part, Mapping) or part.get("type") != "image_url":
            return part
        image_url = part.get("image_url")
        url = image_url.get("url") if isinstance(image_url, Mapping) else image_url
        if not isinstance(url, str):
            return part
        new = settings.apply_data_uri(url, ctx)
        if new is url:
            return part
        if not new.startswith("data:"):
            return {"type": "text", "text": new}
        new_image_url = {**image_url, "url": new} if isinstance(image_url, Mapping) else new
        return {**part, "image_url": new_image_url}
    except Exception:
        return part
