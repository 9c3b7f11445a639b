#!/usr/bin/python3
"""Pillow, the peer of `vlm bench data`: decode + resize of the same JPEGs, one image at a time on one core.

Reads every jpg/jpeg/png/webp member of the webdataset shards into memory, then times, for each image:
  plain: Image.open -> convert("RGB") (decodes) -> resize to the mode's size -> crop / pad -> tobytes()
  draft: the same with im.draft("RGB", needed size) first, so libjpeg decodes at 1/2, 1/4 or 1/8 scale (the
         DCT-domain downscale Pillow's thumbnail() uses), and resize(box=draft's box)
The modes follow torchvision / img2dataset: center_crop (Resize(S) + CenterCrop(S)), border (longer side to S,
pasted on a white S x S canvas), rrc (RandomResizedCrop(S) with a fixed-seed Python RNG: same distribution of windows,
not the same windows as ours). Prints one JSON object; times are the best of --repeats passes over all images,
in wall time (perf_counter) and CPU time (process_time, which other processes on a loaded machine do not inflate).
Run with Debian's python3-pil:  /usr/bin/python3 bench/peers/data_pillow.py --shards a.tar,b.tar --json
"""
import argparse
import io
import json
import math
import random
import sys
import tarfile
import time

import PIL
from PIL import Image

FILTERS = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}
IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".webp")


def load(shards):
    images = []
    for shard in shards:
        with tarfile.open(shard) as tar:
            for m in tar:
                if m.isfile() and m.name.lower().endswith(IMAGE_EXTS):
                    images.append(tar.extractfile(m).read())
    return images


def center_geometry(w, h, s):
    if w < h:
        rw, rh = s, int(s * h / w)
    elif h < w:
        rw, rh = int(s * w / h), s
    else:
        rw, rh = s, s
    return rw, rh, int(round((rw - s) / 2.0)), int(round((rh - s) / 2.0))


def rrc_window(w, h, rng, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    area = w * h
    lo, hi = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(10):
        target = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(lo, hi))
        cw, ch = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
        if 0 < cw <= w and 0 < ch <= h:
            return rng.randint(0, w - cw), rng.randint(0, h - ch), cw, ch
    return 0, 0, w, h


def process(data, size, flt, mode, draft, rng):
    im = Image.open(io.BytesIO(data))
    w, h = im.size
    if mode == "center_crop":
        rw, rh, x0, y0 = center_geometry(w, h, size)
        res = im.draft("RGB", (rw, rh)) if draft else None  # None for formats without draft()
        im = im.convert("RGB").resize((rw, rh), flt, box=res[1] if res else None)
        out = im.crop((x0, y0, x0 + size, y0 + size))
    elif mode == "border":
        scale = size / max(w, h)
        rw, rh = max(1, min(size, round(w * scale))), max(1, min(size, round(h * scale)))
        res = im.draft("RGB", (rw, rh)) if draft else None
        out = Image.new("RGB", (size, size), (255, 255, 255))
        out.paste(im.convert("RGB").resize((rw, rh), flt, box=res[1] if res else None),
                  ((size - rw) // 2, (size - rh) // 2))
    else:
        x, y, cw, ch = rrc_window(w, h, rng)
        d = 1
        if draft:
            res = im.draft("RGB", (-(-size * w // cw), -(-size * h // ch)))
            d = round(w / res[1][2]) if res else 1
        im = im.convert("RGB")
        bx0, by0, bx1, by1 = x / d, y / d, (x + cw) / d, (y + ch) / d
        ix0, iy0 = math.floor(bx0), math.floor(by0)
        ix1, iy1 = min(math.ceil(bx1), im.size[0]), min(math.ceil(by1), im.size[1])
        out = im.crop((ix0, iy0, ix1, iy1)).resize((size, size), flt,
                                                   box=(bx0 - ix0, by0 - iy0, bx1 - ix0, by1 - iy0))
    return out.tobytes()


def best_pass(images, args, draft):
    best_wall, best_cpu = float("inf"), float("inf")
    for _ in range(args.repeats):
        rng = random.Random(0)
        t0, c0 = time.perf_counter(), time.process_time()
        for data in images:
            process(data, args.size, FILTERS[args.filter], args.mode, draft, rng)
        best_cpu = min(best_cpu, time.process_time() - c0)
        best_wall = min(best_wall, time.perf_counter() - t0)
    return best_wall, best_cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards", required=True, help="comma list of webdataset tar shards")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--filter", choices=sorted(FILTERS), default="bicubic")
    ap.add_argument("--mode", choices=["center_crop", "border", "rrc"], default="center_crop")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print only the JSON result")
    args = ap.parse_args()
    images = load([s for s in args.shards.split(",") if s])
    if not images:
        sys.exit("data_pillow.py: no images in " + args.shards)
    result = {"peer": "pillow", "pillow_version": PIL.__version__, "python": sys.version.split()[0],
              "images": len(images), "size": args.size, "filter": args.filter, "mode": args.mode}
    for name, draft in (("plain", False), ("draft", True)):
        seconds, cpu_seconds = best_pass(images, args, draft)
        result[name] = {"seconds": seconds, "ms_per_image": 1e3 * seconds / len(images),
                        "images_per_s": len(images) / seconds, "cpu_seconds": cpu_seconds,
                        "cpu_ms_per_image": 1e3 * cpu_seconds / len(images)}
    if args.json:
        print(json.dumps(result))
    else:
        for name in ("plain", "draft"):
            r = result[name]
            print(f"Pillow {PIL.__version__} {name}: {r['ms_per_image']:.3f} ms/img ({r['cpu_ms_per_image']:.3f} "
                  f"CPU ms/img), {r['images_per_s']:.0f} img/s")


if __name__ == "__main__":
    main()
