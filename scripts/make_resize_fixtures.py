#!/usr/bin/python3
"""Writes tests/data/fixtures/resize/: two source images and Pillow's resize outputs for them, plus manifest.json.

tests/data/test_transforms.cpp resizes the sources with vlm's resize and requires every pixel to be within 2 levels
of Pillow's. Run from the repository root with Debian's python3-pil:  /usr/bin/python3 scripts/make_resize_fixtures.py
"""
import json
import os
import random

from PIL import Image

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "fixtures", "resize")
FILTERS = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}


def noisy_gradient(w, h, seed):
    """Smooth gradients plus strong noise: exercises rounding, clipping and the negative bicubic lobes."""
    rng = random.Random(seed)
    im = Image.new("RGB", (w, h))
    px = im.load()
    for y in range(h):
        for x in range(w):
            base = (x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), (x + y) * 255 // max(w + h - 2, 1))
            px[x, y] = tuple(max(0, min(255, b + rng.randint(-60, 60))) for b in base)
    return im


def checkers(w, h, seed):
    """Hard edges (4-pixel checkerboard in saturated colours) with light noise."""
    rng = random.Random(seed)
    im = Image.new("RGB", (w, h))
    px = im.load()
    for y in range(h):
        for x in range(w):
            on = ((x // 4) + (y // 4)) % 2
            c = (250, 20, 30) if on else (10, 40, 240)
            px[x, y] = tuple(max(0, min(255, v + rng.randint(-10, 10))) for v in c)
    return im


def shorter_center_crop(im, shorter, crop_w, crop_h, flt):
    """torchvision Resize(shorter) + CenterCrop((crop_h, crop_w)) on a PIL image."""
    w, h = im.size
    if w <= h:
        nw, nh = shorter, int(shorter * h / w)
    else:
        nw, nh = int(shorter * w / h), shorter
    r = im.resize((nw, nh), flt)
    left, top = int(round((nw - crop_w) / 2.0)), int(round((nh - crop_h) / 2.0))
    return r.crop((left, top, left + crop_w, top + crop_h))


def main():
    os.makedirs(OUT, exist_ok=True)
    sources = {"src_a.png": noisy_gradient(64, 48, 1), "src_b.png": checkers(37, 29, 2)}
    for name, im in sources.items():
        im.save(os.path.join(OUT, name))
    cases = []

    def resize(src, w, h, flt):
        out = f"{src[:-4]}_{w}x{h}_{flt}.png"
        sources[src].resize((w, h), FILTERS[flt]).save(os.path.join(OUT, out))
        cases.append({"op": "resize", "src": src, "out": out, "width": w, "height": h, "filter": flt})

    def crop_case(src, shorter, cw, ch, flt):
        out = f"{src[:-4]}_short{shorter}_crop{cw}x{ch}_{flt}.png"
        shorter_center_crop(sources[src], shorter, cw, ch, FILTERS[flt]).save(os.path.join(OUT, out))
        cases.append({"op": "shorter_center_crop", "src": src, "out": out, "shorter": shorter, "width": cw,
                      "height": ch, "filter": flt})

    for flt in ("bilinear", "bicubic"):
        resize("src_a.png", 20, 15, flt)    # downscale by 3.2
        resize("src_a.png", 90, 71, flt)    # upscale
        resize("src_a.png", 31, 64, flt)    # shrink x, grow y
        resize("src_b.png", 50, 61, flt)    # upscale, odd sizes
        resize("src_b.png", 11, 7, flt)     # strong downscale
        crop_case("src_b.png", 24, 24, 24, flt)
        crop_case("src_a.png", 20, 16, 16, flt)
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump({"pillow": Image.__version__ if hasattr(Image, "__version__") else "", "cases": cases}, f, indent=1)


if __name__ == "__main__":
    main()
