"""Encoded images: their size from the header without decoding them (what a record, or a request to the
prediction server, may take to decode), the one decode the scan, pipeline and serving all use, and the
model's preprocessing of a decoded image.

An image's header size (and a GIF's frames) must be within MAX_IMAGE_PIXELS before it is decoded: an image
over its bound is a bad record.
"""

from __future__ import annotations

SCALES = ("unit", "symmetric", "raw")  # pixels to [0, 1], to [-1, 1], or kept in [0, 255]
# Magic bytes tf.io.decode_image recognises (tensorflow/core/kernels/image/decode_image_op.cc); a WebP is
# RIFF, 4 bytes of length, then WEBP.
JPEG, PNG, GIF, BMP = b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF8", b"BM"
RIFF, WEBP = b"RIFF", b"WEBP"
# (height, width) of bytes tf.io.decode_image would decode (their magic says an image) whose header gives no
# size this module can read: refused like an image over its bound, never taken for "no image" (0, 0).
UNREADABLE = (-1, -1)
# JPEG start-of-frame markers (those with the image's size): 0xC0..0xCF but DHT, JPG and DAC.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# The most pixels one image may take to decode, from its header before it is decoded (a GIF: its screen and
# every frame, which giflib decodes before TensorFlow keeps the first). 50 megapixels is a 48 MP camera's
# photo, 150 MB as RGB; a decompression bomb (a 1.5 MB PNG of 23000x23000) is a bad record instead.
MAX_IMAGE_PIXELS = 50_000_000


def decode(encoded, channels: int):
    """Encoded bytes -> uint8 [H, W, channels]; the one decode the scan, pipeline and serving all use.

    ``channels`` converts on decode (grayscale PNG -> RGB for a backbone, RGB JPEG -> grayscale).
    """
    import tensorflow as tf

    image = tf.io.decode_image(encoded, channels=channels, expand_animations=False, dtype=tf.uint8)
    image.set_shape([None, None, channels])
    return image


def finish(image, image_size: int, scale: str):
    """uint8 [.., H, W, C] -> float32 [.., image_size, image_size, C] in the ``scale`` range (a batch too)."""
    import tensorflow as tf

    size = image.shape[-3:-1]
    if size == (image_size, image_size):
        image = tf.cast(image, tf.float32)
    elif None in size:
        # Resizing to the same size changes nothing but costs ~15% of an MNIST-sized pipeline: skip it.
        same = tf.reduce_all(tf.equal(tf.shape(image)[-3:-1], image_size))
        image = tf.cond(same, lambda: tf.cast(image, tf.float32),
                        lambda: tf.image.resize(image, [image_size, image_size]))
        image.set_shape(image.shape[:-3].concatenate([image_size, image_size]).concatenate(image.shape[-1:]))
    else:
        image = tf.image.resize(image, [image_size, image_size])  # bilinear, float32, values still 0..255
    if scale == "unit":
        return image / 255.0
    if scale == "symmetric":
        return image / 127.5 - 1.0
    if scale == "raw":
        return image
    raise ValueError(f"scale must be one of {', '.join(SCALES)}, not {scale!r}")


def preprocess_image(encoded, image_size: int, channels: int, scale: str = "unit"):
    """Encoded bytes -> the float32 [image_size, image_size, channels] image the model sees (eval/serving)."""
    return finish(decode(encoded, channels), image_size, scale)


def header_size(encoded: bytes) -> tuple[int, int]:
    """(height, width) from an image's header, as :func:`header_sizes` reads it, in pure Python (serving
    checks every string a request sends on its event loop); (0, 0) when the bytes are no
    JPEG/PNG/GIF/BMP/WebP image, UNREADABLE when they are one by their magic bytes but the header gives no
    size (a damaged one, or a kind of WebP not read here)."""
    data = encoded + b"\0" * 30
    if encoded.startswith(PNG):
        return int.from_bytes(data[20:24], "big"), int.from_bytes(data[16:20], "big")
    if encoded.startswith(GIF):
        return int.from_bytes(data[8:10], "little"), int.from_bytes(data[6:8], "little")
    if encoded.startswith(BMP):
        height = int.from_bytes(data[22:26], "little", signed=True)
        return abs(height), int.from_bytes(data[18:22], "little", signed=True)
    if encoded.startswith(JPEG):
        return _jpeg_size(encoded)
    if encoded.startswith(RIFF) and encoded[8:12] == WEBP:
        return _webp_size(data) if len(encoded) >= 30 else UNREADABLE
    return 0, 0


def _jpeg_size(data: bytes) -> tuple[int, int]:
    """A JPEG's size from its start-of-frame marker, walking the marker segments as libjpeg's
    jpeg_read_header does (no TensorFlow call: a request of thousands of JPEG-looking strings costs
    microseconds each, not an eager op each on the event loop)."""
    pos, end = 2, len(data)
    while pos < end:
        if data[pos] != 0xFF:  # extraneous bytes before a marker: libjpeg skips them too
            pos = data.find(b"\xff", pos)
            if pos < 0:
                break
        while pos < end and data[pos] == 0xFF:  # fill bytes
            pos += 1
        if pos >= end:
            break
        marker = data[pos]
        pos += 1
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:  # standalone: no length
            continue
        if marker in (0xD8, 0xD9, 0xDA) or pos + 2 > end:  # a second SOI, the end, scan data before a frame
            break
        if marker in _SOF:
            if pos + 7 > end:
                break
            return int.from_bytes(data[pos + 3:pos + 5], "big"), int.from_bytes(data[pos + 5:pos + 7], "big")
        length = int.from_bytes(data[pos:pos + 2], "big")
        if length < 2:
            break
        pos += length
    return UNREADABLE


def _webp_size(data: bytes) -> tuple[int, int]:
    """A WebP's size from its first chunk (``data`` padded to 30 bytes at least): the canvas of an extended
    file (VP8X: 24-bit width-1 and height-1), a lossless one's (VP8L: 14-bit width-1, height-1 after the
    0x2F signature) or a lossy one's frame (VP8: 14-bit width and height after the 9D 01 2A start code)."""
    chunk = data[12:16]
    if chunk == b"VP8X":
        return int.from_bytes(data[27:30], "little") + 1, int.from_bytes(data[24:27], "little") + 1
    if chunk == b"VP8L" and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return ((bits >> 14) & 0x3FFF) + 1, (bits & 0x3FFF) + 1
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        return int.from_bytes(data[28:30], "little") & 0x3FFF, int.from_bytes(data[26:28], "little") & 0x3FFF
    return UNREADABLE


def decode_pixels(encoded: bytes, height: int, width: int) -> int:
    """Pixels decoding ``encoded`` takes: height x width from its header, and for a GIF its screen plus
    every frame's raster (each frame descriptor's own size; see :func:`_gif_frames`)."""
    if encoded.startswith(GIF):
        return height * width + sum(w * h for w, h in _gif_frames(encoded))
    return height * width


def image_pixels(encoded: bytes) -> int | None:
    """Pixels ``tf.io.decode_image`` would allocate for ``encoded``, read from its header without decoding
    (0 for bytes that are no JPEG/PNG/GIF/BMP/WebP image; None for an image whose header gives no size, to
    be refused): what the prediction server (serving/) holds a request's images to, as the scan holds a
    record to MAX_IMAGE_PIXELS."""
    height, width = header_size(encoded)
    if (height, width) == UNREADABLE:
        return None
    return decode_pixels(encoded, height, width)


def _gif_frames(data: bytes) -> list[tuple[int, int]]:
    """(width, height) of each frame of a GIF, from its image descriptors (the data sub-blocks are skipped,
    not decoded). Stops where the structure is damaged: the decode then fails on it."""
    frames = []
    end = len(data)
    pos = 13
    if end > 10 and data[10] & 0x80:  # a global colour table
        pos += 3 * (2 << (data[10] & 7))

    def skip_blocks(pos):
        while pos < end:
            size = data[pos]
            pos += 1 + size
            if not size:
                break
        return pos

    while pos < end:
        kind = data[pos]
        if kind == 0x21:  # an extension: label, then sub-blocks
            pos = skip_blocks(pos + 2)
        elif kind == 0x2C and pos + 10 <= end:  # an image descriptor
            frames.append((int.from_bytes(data[pos + 5:pos + 7], "little"),
                           int.from_bytes(data[pos + 7:pos + 9], "little")))
            flags = data[pos + 9]
            pos += 10 + (3 * (2 << (flags & 7)) if flags & 0x80 else 0)
            pos = skip_blocks(pos + 1)  # after the LZW code size
        else:  # the trailer, or damage
            break
    return frames


def header_sizes(encoded):
    """int64 [N, 2] (height, width) of a batch of encoded images from their headers, vectorised; (0, 0) for
    bytes that are no JPEG/PNG/GIF/BMP/WebP image, UNREADABLE for a WebP :func:`header_size` cannot
    read. A damaged JPEG header fails the whole batch (its file is then
    checked record by record with :func:`header_size`)."""
    import tensorflow as tf

    padded = tf.strings.join([encoded, b"\0" * 30])
    head = tf.cast(tf.io.decode_raw(tf.strings.substr(padded, 0, 30),
                                    tf.uint8), tf.int64)  # [N, 30]: the first bytes, zero-padded

    def number(offset, length, big_endian):
        weights = 256 ** tf.range(length, dtype=tf.int64)
        return tf.reduce_sum(head[:, offset:offset + length] * (weights[::-1] if big_endian else weights), 1)

    def signed32(value):
        return tf.where(value >= 2**31, value - 2**32, value)

    def starts(magic):
        return tf.equal(tf.strings.substr(encoded, 0, len(magic)), magic)

    png, gif, bmp = starts(PNG), starts(GIF), starts(BMP)
    zero = tf.zeros_like(png, tf.int64)
    # WebP as _webp_size reads it (a shorter one, or another first chunk, is UNREADABLE).
    webp = starts(RIFF) & tf.equal(tf.strings.substr(padded, 8, 4), WEBP)
    chunk = tf.where(tf.strings.length(encoded) >= 30, tf.strings.substr(padded, 12, 4), b"")
    vp8x = webp & tf.equal(chunk, b"VP8X")
    vp8l = webp & tf.equal(chunk, b"VP8L") & tf.equal(head[:, 20], 0x2F)
    vp8 = webp & tf.equal(chunk, b"VP8 ") & tf.equal(tf.strings.substr(padded, 23, 3), b"\x9d\x01\x2a")
    bits = number(21, 4, False)
    unreadable = tf.fill(tf.shape(zero), tf.constant(UNREADABLE[0], tf.int64))
    webp_height = tf.where(vp8x, number(27, 3, False) + 1, tf.where(
        vp8l, bits // 0x4000 % 0x4000 + 1, tf.where(vp8, number(28, 2, False) % 0x4000, unreadable)))
    webp_width = tf.where(vp8x, number(24, 3, False) + 1, tf.where(vp8l, bits % 0x4000 + 1, tf.where(
        vp8, number(26, 2, False) % 0x4000, unreadable)))
    height = tf.where(png, number(20, 4, True), tf.where(gif, number(8, 2, False), tf.where(
        bmp, tf.abs(signed32(number(22, 4, False))), tf.where(webp, webp_height, zero))))
    width = tf.where(png, number(16, 4, True), tf.where(gif, number(6, 2, False), tf.where(
        bmp, signed32(number(18, 4, False)), tf.where(webp, webp_width, zero))))
    where = tf.where(starts(JPEG))
    shapes = tf.map_fn(lambda e: tf.io.extract_jpeg_shape(e, tf.int64)[:2], tf.gather_nd(encoded, where),
                       fn_output_signature=tf.TensorSpec([2], tf.int64))
    return tf.tensor_scatter_nd_update(tf.stack([height, width], axis=1), where, shapes)


def _checked(encoded, channels: int):
    """:func:`decode`'s verdict on ``encoded`` for less: a JPEG is decoded at 1/8 scale. libjpeg still reads
    and entropy-decodes its whole stream, so truncated or corrupt data fails alike (no verdict differed over
    1,584 random truncations, bit flips and overwrites of the flowers photos); only the inverse DCT,
    upsampling and colour conversion shrink: ~20% less CPU in the second pass over the flowers photos. For
    checking only: the pixels are not the model's."""
    import tensorflow as tf

    return tf.cond(tf.io.is_jpeg(encoded), lambda: tf.io.decode_jpeg(encoded, channels=channels, ratio=8),
                   lambda: decode(encoded, channels))


def decoded_height(channels: int, exact: bool = False, scaled: bool = False):
    """Encoded bytes -> the decoded image's height: the second pass's check that a record decodes (with
    ``scaled``, a JPEG at 1/8 scale: see :func:`_checked`). The height is all it returns: a tensor that
    depends on the decode, so the decode runs, and a few bytes, not the pixels.

    The pipeline's version does the least per image (it runs in a loop over each batch, where every op
    costs microseconds): no empty-image check (the first pass refused images whose header has no pixels).
    ``exact``, for the records of a failed batch, checks everything.
    """
    import tensorflow as tf

    def height(encoded):
        shape = tf.shape(_checked(encoded, channels) if scaled else decode(encoded, channels))
        if exact:
            # An empty image decodes but would fail training's resize: make it fail here like an
            # undecodable one.
            tf.debugging.assert_positive(shape[0] * shape[1], message="empty image")
        return shape[0]

    return height
