#!/usr/bin/python3
"""Writes tests/data/fixtures/pipeline/: small JPEGs and Pillow's outputs for the image pipeline, plus manifest.json.

tests/data/test_image_pipeline.cpp decodes the JPEGs with a DCT-scaling hint and runs the pipeline modes, and
compares with what Pillow produces for the same file with draft() (libjpeg's scaled IDCT, as our decoder) followed by
resize(box=...) the way Pillow's own thumbnail() uses draft's box:
  - draft:       im.draft("RGB", (min_w, min_h)); im.load()                      -> the decoded pixels
  - center_crop: draft for the resized size, resize(box = draft's box) to the torchvision Resize(S) size, centre crop
  - border:      draft for the longer-side-S size, resize(box), pasted centred on a white S x S canvas (img2dataset)
  - rrc:         draft for S over the window, crop to the whole pixels around the scaled window, resize(box) to S x S
  - *_full:      the same without draft (plain decode)
Run from the repository root with Debian's python3-pil:  /usr/bin/python3 scripts/make_pipeline_fixtures.py
"""
import json
import math
import os
import random

from PIL import Image, ImageDraw, ImageFilter

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "fixtures", "pipeline")
FILTERS = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}


def photo_like(w, h, seed):
    """Sky-to-ground gradient, blurred blobs and polygons, fine texture and sensor noise: smooth areas, soft and
    hard edges and high frequencies, so every part of the DCT is exercised."""
    rng = random.Random(seed)
    im = Image.new("RGB", (w, h))
    px = im.load()
    top = [rng.randint(90, 200) for _ in range(3)]
    bottom = [rng.randint(20, 120) for _ in range(3)]
    for y in range(h):
        t = y / max(h - 1, 1)
        for x in range(w):
            px[x, y] = tuple(int(a + (b - a) * t + 12 * math.sin(x / 7.0 + c)) for c, (a, b) in
                             enumerate(zip(top, bottom)))
    draw = ImageDraw.Draw(im)
    for _ in range(14):
        x0, y0 = rng.randint(-w // 4, w), rng.randint(-h // 4, h)
        x1, y1 = x0 + rng.randint(w // 10, w // 2), y0 + rng.randint(h // 10, h // 2)
        color = tuple(rng.randint(0, 255) for _ in range(3))
        if rng.random() < 0.5:
            draw.ellipse((x0, y0, x1, y1), fill=color)
        else:
            draw.polygon([(rng.randint(0, w), rng.randint(0, h)) for _ in range(5)], fill=color)
    im = im.filter(ImageFilter.GaussianBlur(1.5))
    draw = ImageDraw.Draw(im)
    for _ in range(6):  # a few sharp lines after the blur
        draw.line([(rng.randint(0, w), rng.randint(0, h)) for _ in range(2)],
                  fill=tuple(rng.randint(0, 255) for _ in range(3)), width=rng.randint(1, 3))
    px = im.load()
    for y in range(h):
        for x in range(w):
            px[x, y] = tuple(max(0, min(255, v + rng.randint(-5, 5))) for v in px[x, y])
    return im


def draft_open(path, min_w, min_h):
    """Pillow's drafted decode; returns the RGB image and draft's box (the source's extent in the drafted image)."""
    im = Image.open(path)
    w, h = im.size
    res = im.draft("RGB", (min_w, min_h)) if min_w > 0 else None
    box = res[1] if res else (0, 0, w, h)
    return im.convert("RGB"), tuple(float(v) for v in box), (w, h)


def center_geometry(w, h, s):
    if w < h:
        rw, rh = s, int(s * h / w)
    elif h < w:
        rw, rh = int(s * w / h), s
    else:
        rw, rh = s, s
    return rw, rh, int(round((rw - s) / 2.0)), int(round((rh - s) / 2.0))


def border_geometry(w, h, s):
    scale = s / max(w, h)
    rw, rh = max(1, min(s, round(w * scale))), max(1, min(s, round(h * scale)))
    return rw, rh, (s - rw) // 2, (s - rh) // 2


def main():
    os.makedirs(OUT, exist_ok=True)
    sources = {
        "a_420.jpg": (photo_like(520, 390, 1), {"quality": 90}),
        "b_444.jpg": (photo_like(300, 460, 2), {"quality": 85, "subsampling": 0}),
        "c_gray.jpg": (photo_like(256, 200, 3).convert("L"), {"quality": 88}),
        "d_tiny.jpg": (photo_like(40, 30, 4), {"quality": 90}),
        "e_422.jpg": (photo_like(400, 250, 5), {"quality": 85, "subsampling": 1}),
    }
    for name, (im, kw) in sources.items():
        im.save(os.path.join(OUT, name), "JPEG", **kw)
    cases = []

    def path(name):
        return os.path.join(OUT, name)

    def save(im, out):
        im.save(path(out))
        return out

    def draft_case(src, mw, mh):
        im, _, _ = draft_open(path(src), mw, mh)
        out = save(im, f"{src[:-4]}_draft_{mw}x{mh}.png")
        cases.append({"op": "draft", "src": src, "min_width": mw, "min_height": mh, "out": out,
                      "width": im.size[0], "height": im.size[1]})

    def center_case(src, s, flt, draft=True):
        w, h = Image.open(path(src)).size
        rw, rh, x0, y0 = center_geometry(w, h, s)
        im, box, _ = draft_open(path(src), rw if draft else 0, rh)
        r = im.resize((rw, rh), FILTERS[flt], box=box).crop((x0, y0, x0 + s, y0 + s))
        out = save(r, f"{src[:-4]}_center{s}_{flt}{'' if draft else '_full'}.png")
        cases.append({"op": "center_crop", "src": src, "size": s, "filter": flt, "dct": draft, "out": out,
                      "scale": round(w / box[2]) if draft else 1})

    def border_case(src, s, flt, draft=True):
        w, h = Image.open(path(src)).size
        rw, rh, left, top = border_geometry(w, h, s)
        im, box, _ = draft_open(path(src), rw if draft else 0, rh)
        canvas = Image.new("RGB", (s, s), (255, 255, 255))
        canvas.paste(im.resize((rw, rh), FILTERS[flt], box=box), (left, top))
        out = save(canvas, f"{src[:-4]}_border{s}_{flt}{'' if draft else '_full'}.png")
        cases.append({"op": "border", "src": src, "size": s, "filter": flt, "dct": draft, "out": out,
                      "scale": round(w / box[2]) if draft else 1})

    def rrc_case(src, s, flt, win, draft=True):
        x, y, ww, wh = win
        w, h = Image.open(path(src)).size
        mw, mh = -(-s * w // ww), -(-s * h // wh)
        im, box, _ = draft_open(path(src), mw if draft else 0, mh)
        d = round(w / box[2])
        bx0, by0, bx1, by1 = x / d, y / d, (x + ww) / d, (y + wh) / d
        ix0, iy0 = math.floor(bx0), math.floor(by0)
        ix1, iy1 = min(math.ceil(bx1), im.size[0]), min(math.ceil(by1), im.size[1])
        r = im.crop((ix0, iy0, ix1, iy1)).resize((s, s), FILTERS[flt], box=(bx0 - ix0, by0 - iy0, bx1 - ix0, by1 - iy0))
        out = save(r, f"{src[:-4]}_rrc{s}_{x}_{y}_{ww}x{wh}_{flt}{'' if draft else '_full'}.png")
        cases.append({"op": "rrc", "src": src, "size": s, "filter": flt, "dct": draft, "out": out,
                      "window": [x, y, ww, wh], "scale": d})

    draft_case("a_420.jpg", 128, 96)   # 1/4
    draft_case("e_422.jpg", 200, 120)  # 1/2
    draft_case("b_444.jpg", 40, 40)    # 1/4
    draft_case("c_gray.jpg", 32, 25)   # 1/8
    draft_case("e_422.jpg", 100, 62)   # 1/4
    draft_case("d_tiny.jpg", 16, 16)   # 1/1
    for flt in ("bicubic", "bilinear"):
        center_case("a_420.jpg", 96, flt)
        center_case("b_444.jpg", 64, flt)
        border_case("e_422.jpg", 100, flt)
        rrc_case("a_420.jpg", 64, flt, (37, 21, 301, 250))
    center_case("e_422.jpg", 120, "bicubic")  # 1/2
    center_case("c_gray.jpg", 24, "bicubic")
    center_case("d_tiny.jpg", 16, "bicubic")
    border_case("b_444.jpg", 72, "bicubic")
    rrc_case("a_420.jpg", 48, "bicubic", (200, 100, 97, 131))
    rrc_case("b_444.jpg", 56, "bicubic", (10, 300, 150, 140))
    center_case("a_420.jpg", 96, "bicubic", draft=False)
    border_case("e_422.jpg", 100, "bicubic", draft=False)
    rrc_case("a_420.jpg", 64, "bicubic", (37, 21, 301, 250), draft=False)
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump({"pillow": Image.__version__, "cases": cases}, f, indent=1)


if __name__ == "__main__":
    main()
