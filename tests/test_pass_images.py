"""ImageDownsample: oversize images shrink, bombs and broken data are refused, never raises."""

from __future__ import annotations

import base64
import io
import random
import struct
import time
import tracemalloc
import zlib

import pytest
from PIL import Image

from tokenpilot.passes.base import PassContext, ReductionPass, recall_hint
from tokenpilot.passes.images import ImageDownsample, downsample_data_uri, downsample_image_part

CTX = PassContext(tool_name="screenshot", artifact_id="art-1")


def noisy(size: tuple[int, int], mode: str = "RGB", seed: int = 0) -> Image.Image:
    bands = len(mode)
    return Image.frombytes(mode, size, random.Random(seed).randbytes(size[0] * size[1] * bands))


def encode(img: Image.Image, fmt: str = "PNG", **kw: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def data_uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def decode_uri(uri: str) -> tuple[str, bytes]:
    head, payload = uri.split(",", 1)
    return head, base64.b64decode(payload, validate=True)


def png_header_only(width: int, height: int) -> bytes:
    """A tiny valid-looking PNG claiming width x height pixels (a decompression bomb's header)."""

    def chunk(tag: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body) & 0xFFFFFFFF)
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 10_000, 9)  # would inflate to much more; never read
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


BIG_PNG = encode(noisy((500, 400)))  # ~600 KB of noise
SMALL_PNG = encode(noisy((60, 40)))  # ~7 KB


def test_is_a_reduction_pass() -> None:
    assert isinstance(ImageDownsample(), ReductionPass)
    assert ImageDownsample.name == "images"
    assert len(BIG_PNG) > 100_000 and len(SMALL_PNG) < 100_000


def test_big_noisy_png_in_text_fits() -> None:
    text = f"Screenshot taken: ![shot]({data_uri(BIG_PNG)}) done."
    out = ImageDownsample().apply(text, CTX)
    assert out.startswith("Screenshot taken: ![shot](data:image/jpeg;base64,") and out.endswith(") done.")
    head, data = decode_uri(out.split("(", 1)[1].rsplit(")", 1)[0])
    assert head == "data:image/jpeg;base64"
    assert len(data) <= 100_000
    img = Image.open(io.BytesIO(data))
    img.load()
    assert img.format == "JPEG" and img.size[0] * 4 == img.size[1] * 5  # aspect kept


def test_big_png_with_alpha_stays_png() -> None:
    data = encode(noisy((400, 300), "RGBA"))
    out = ImageDownsample().apply_data_uri(data_uri(data), CTX)
    head, small = decode_uri(out)
    assert head == "data:image/png;base64" and len(small) <= 100_000
    assert Image.open(io.BytesIO(small)).mode == "RGBA"


def test_big_jpeg_shrinks_via_draft() -> None:
    data = encode(noisy((2400, 1800)), "JPEG", quality=95)
    assert len(data) > 1_000_000
    t0 = time.perf_counter()
    out = downsample_data_uri(data_uri(data, "image/jpeg"), CTX)
    assert time.perf_counter() - t0 < 5.0
    head, small = decode_uri(out)
    assert head == "data:image/jpeg;base64" and len(small) <= 100_000


def test_small_image_untouched() -> None:
    text = f"icon {data_uri(SMALL_PNG)} here"
    assert ImageDownsample().apply(text, CTX) is text
    uri = data_uri(SMALL_PNG)
    assert downsample_data_uri(uri, CTX) is uri


def test_text_without_images_untouched() -> None:
    text = "no images, only data:image/png;base64, without payload and data:text/plain;base64,QUJD"
    assert ImageDownsample().apply(text, CTX) is text


def test_decompression_bomb_refused_quickly_without_memory() -> None:
    bomb = png_header_only(100_000, 100_000)
    assert len(bomb) < 1_000
    text = f"look: {data_uri(bomb)}"
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        out = ImageDownsample().apply(text, CTX)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - t0 < 1.0
    assert peak < 5_000_000
    assert out.startswith("look: [tokenpilot: image/png (")
    assert "decompression bomb" in out and recall_hint("art-1") in out


def test_bomb_under_pillows_threshold_refused_by_max_pixels() -> None:
    bomb = png_header_only(7_000, 7_000)  # 49 Mpx: Pillow would decode it without a word
    out = ImageDownsample().apply_data_uri(data_uri(bomb), CTX)
    assert "7000x7000 px" in out and "more than 40,000,000 pixels" in out


def test_pillow_bomb_warning_becomes_refusal() -> None:
    bomb = png_header_only(10_000, 10_000)  # 100 Mpx: above MAX_IMAGE_PIXELS, below 2x
    assert Image.MAX_IMAGE_PIXELS is not None and 10_000**2 > Image.MAX_IMAGE_PIXELS
    with pytest.warns(Image.DecompressionBombWarning):
        out = ImageDownsample(max_pixels=10**12).apply_data_uri(data_uri(bomb), CTX)
    assert "10000x10000 px" in out and "decompression bomb" in out


def test_truncated_base64_refused_with_marker() -> None:
    uri = data_uri(BIG_PNG)
    out = ImageDownsample().apply(uri[:-3] + " and more text", CTX)  # not a multiple of 4 any more
    assert out.startswith("[tokenpilot: image/png data URI of ") and "could not be decoded" in out
    assert out.endswith(" and more text") and recall_hint("art-1") in out


def test_truncated_image_data_refused_with_marker() -> None:
    cut = BIG_PNG[: len(BIG_PNG) // 2 // 3 * 3]  # valid base64, half an image
    out = ImageDownsample().apply_data_uri(data_uri(cut), CTX)
    assert "could not be decoded" in out


def test_garbage_bitmap_refused_but_small_unknown_format_kept() -> None:
    garbage = random.Random(1).randbytes(200_000)
    assert "could not be decoded" in ImageDownsample().apply_data_uri(data_uri(garbage), CTX)
    small_unknown = data_uri(b"\x00\x01heic-ish" * 10, "image/heic")
    assert ImageDownsample().apply_data_uri(small_unknown, CTX) is small_unknown


def svg(body_bytes: int, *, padding: bool) -> bytes:
    rng = random.Random(5)
    parts = ['<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 100 100">\n']
    parts.append("<metadata><rdf:RDF>" + "x" * 2_000 + "</rdf:RDF></metadata>\n")
    size = 0
    while size < body_bytes:
        d = " ".join(f"L{rng.randint(0, 99)},{rng.randint(0, 99)}" for _ in range(20))
        line = f'<path d="M0,0 {d}" fill="#{rng.randrange(16**6):06x}"/>'
        size += len(line)
        if padding:
            line = "    <!-- generated path -->\n" + " " * 40 + line + "\n" + " " * 200 + "\n"
        parts.append(line)
    parts.append("</svg>\n")
    return "".join(parts).encode()


def test_svg_over_limit_minified_when_that_suffices() -> None:
    data = svg(40_000, padding=True)
    assert len(data) > 50_000
    out = ImageDownsample().apply_data_uri(data_uri(data, "image/svg+xml"), CTX)
    head, mini = decode_uri(out)
    assert head == "data:image/svg+xml;base64" and len(mini) <= 50_000
    assert b"<!--" not in mini and b"<metadata" not in mini and mini.count(b"<path") == data.count(b"<path")


def test_svg_still_too_big_becomes_marker() -> None:
    data = svg(80_000, padding=False)
    out = ImageDownsample().apply(f"logo: {data_uri(data, 'image/svg+xml')}", CTX)
    assert out == f"logo: [tokenpilot: SVG image of {len(data):,} bytes omitted; {recall_hint('art-1')}]"


def test_svg_broken_base64_marker() -> None:
    out = ImageDownsample().apply_data_uri("data:image/svg+xml;base64," + "PHN2Zz4" * 10_000, CTX)
    assert "image/svg+xml data URI" in out and "could not be decoded" in out


# -- every setting changes behaviour ----------------------------------------------------


def test_setting_max_bitmap_bytes() -> None:
    data = encode(noisy((150, 100)))  # ~45 KB
    uri = data_uri(data)
    assert ImageDownsample().apply_data_uri(uri, CTX) is uri
    _, small = decode_uri(ImageDownsample(max_bitmap_bytes=20_000).apply_data_uri(uri, CTX))
    assert len(small) <= 20_000
    big = data_uri(BIG_PNG)
    assert ImageDownsample(max_bitmap_bytes=10_000_000).apply_data_uri(big, CTX) is big
    assert "does not fit" in ImageDownsample(max_bitmap_bytes=10).apply_data_uri(big, CTX)


def test_setting_max_svg_bytes() -> None:
    data = svg(10_000, padding=True)
    uri = data_uri(data, "image/svg+xml")
    assert ImageDownsample().apply_data_uri(uri, CTX) is uri
    head, mini = decode_uri(ImageDownsample(max_svg_bytes=15_000).apply_data_uri(uri, CTX))
    assert len(mini) <= 15_000 < len(data)
    assert "SVG image of" in ImageDownsample(max_svg_bytes=1_000).apply_data_uri(uri, CTX)


def test_setting_max_pixels() -> None:
    uri = data_uri(encode(noisy((300, 300))))  # 90 kpx, ~270 KB
    assert "300x300 px" in ImageDownsample(max_pixels=50_000).apply_data_uri(uri, CTX)
    assert ImageDownsample().apply_data_uri(uri, CTX).startswith("data:image/jpeg;base64,")
    small = data_uri(SMALL_PNG)  # the pixel cap applies to small files too
    assert "refused" in ImageDownsample(max_pixels=100).apply_data_uri(small, CTX)


# -- OpenAI image parts -----------------------------------------------------------------


def test_image_part_downsampled_keeps_other_fields() -> None:
    part = {"type": "image_url", "image_url": {"url": data_uri(BIG_PNG), "detail": "high"}}
    out = downsample_image_part(part, CTX)
    assert out is not part and out["type"] == "image_url" and out["image_url"]["detail"] == "high"
    assert out["image_url"]["url"].startswith("data:image/jpeg;base64,")
    assert part["image_url"]["url"] == data_uri(BIG_PNG)  # input not mutated


def test_image_part_unchanged_is_same_object() -> None:
    for part in (
        {"type": "image_url", "image_url": {"url": data_uri(SMALL_PNG)}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {"type": "text", "text": data_uri(BIG_PNG)},
        {"type": "image_url", "image_url": None},
        {"type": "image_url"},
    ):
        assert downsample_image_part(part, CTX) is part


def test_refused_image_part_becomes_text_part() -> None:
    part = {"type": "image_url", "image_url": {"url": data_uri(png_header_only(100_000, 100_000))}}
    out = downsample_image_part(part, CTX)
    assert out["type"] == "text" and "decompression bomb" in out["text"]


def test_image_part_legacy_string_url_and_settings() -> None:
    part = {"type": "image_url", "image_url": data_uri(BIG_PNG)}
    out = downsample_image_part(part, CTX, settings=ImageDownsample(max_bitmap_bytes=30_000))
    _, data = decode_uri(out["image_url"])
    assert len(data) <= 30_000


# -- purity and bad input ---------------------------------------------------------------


def test_deterministic_bytes() -> None:
    text = f"a {data_uri(BIG_PNG)} b {data_uri(encode(noisy((400, 300), 'RGBA')))} c"
    first = ImageDownsample().apply(text, CTX)
    assert ImageDownsample().apply(text, CTX) == first
    assert ImageDownsample().apply(first, CTX) is first  # already small: untouched


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\udcff data:image/png;base64,\udcff",
        "data:image/png;base64,\x00\x00",
        "data:image/png;base64,====",
        "data:image/png;base64,A",
        "data:image/;base64,AAAA",
        "data:image/png;base64," + "A" * 1_000_001,
        random.Random(2).randbytes(100_000).decode("latin-1") + "data:image/gif;base64,R0lGODlh",
    ],
    ids=["empty", "surrogates", "nul", "padding", "one-char", "no-subtype", "zeros", "garbage"],
)
def test_bad_input_does_not_raise(text: str) -> None:
    out = ImageDownsample().apply(text, CTX)
    assert isinstance(out, str)
    assert ImageDownsample().apply(text, CTX) == out


def test_non_str_inputs() -> None:
    assert ImageDownsample().apply(None, CTX) is None  # type: ignore[arg-type]
    assert downsample_data_uri(None, CTX) is None  # type: ignore[arg-type]
    assert downsample_image_part(None, CTX) is None  # type: ignore[arg-type]
    uri = "data:image/png;base64," + "\udcff"
    assert downsample_data_uri(uri, CTX) is uri


def test_sixteen_bit_grey_keeps_its_tones() -> None:
    rng = random.Random(4)
    raw = b"".join(struct.pack(">H", 30_000 + rng.randrange(5_000)) for _ in range(400 * 400))
    data = encode(Image.frombytes("I;16B", (400, 400), raw))
    assert len(data) > 100_000
    _, small = decode_uri(ImageDownsample().apply_data_uri(data_uri(data), CTX))
    img = Image.open(io.BytesIO(small))
    assert img.mode == "L" and len(small) <= 100_000
    lo, hi = img.getextrema()
    assert 100 <= lo <= hi <= 150  # ~30000..35000 / 256, not clipped to white


def test_exif_orientation_applied() -> None:
    img = noisy((1200, 800))
    exif = Image.Exif()
    exif[0x0112] = 6  # stored landscape, shown rotated 90 degrees: portrait
    data = encode(img, "JPEG", quality=95, exif=exif.tobytes())
    _, small = decode_uri(ImageDownsample().apply_data_uri(data_uri(data, "image/jpeg"), CTX))
    width, height = Image.open(io.BytesIO(small)).size
    assert height > width
    assert Image.open(io.BytesIO(small)).getexif().get(0x0112) is None  # metadata dropped
