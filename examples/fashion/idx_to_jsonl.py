#!/usr/bin/env python3
"""Fashion-MNIST IDX files -> one grayscale PNG per image + a JSONL that `vlm data build --from` reads.

Python 3 standard library only (gzip, struct, zlib). Each JSONL line is
  {"image": "images/train/00042.png", "caption": "A photo of a sneaker, a low sports shoe.",
   "label": 7, "class": "sneaker", "qa": [{"question": ..., "answer": ...}, ...]}
`vlm data build` keeps every field but image and caption in the shard's KEY.json, so the "qa" list is what
data.task = "vqa" / "mixed" trains on.

Questions per image:
  "What item of clothing is this?"  -> the class name ("sneaker")
  "Is this <a name>?"              -> "yes" / "no"; <a name> is the image's own class half of the time, otherwise
                                       another class, chosen from the image index (the same on every run)

The train split's lines ask both questions (the loader shuffles them with the caption turn). The t10k split is
written twice, as t10k.jsonl (the clothing question) and t10k-yesno.jsonl (the yes/no question), over the same PNGs:
evaluation groups every question it does not know into one type, so each held-out set holds one question type.

Usage: idx_to_jsonl.py --idx-dir /usr/share/datasets/fashion-mnist --split train|t10k --out DIR [--limit N]
"""
import argparse
import gzip
import json
import os
import random
import struct
import sys
import time
import zlib

# Fashion-MNIST's label order. Answers are short lower-case names; captions are full sentences.
# (answer, noun phrase, caption): answers are short lower-case names, captions full sentences.
CLASSES = [
    ("t-shirt", "a t-shirt", "A photo of a t-shirt, a short-sleeved top."),
    ("trousers", "a pair of trousers", "A photo of a pair of trousers."),
    ("pullover", "a pullover", "A photo of a pullover, a knitted top with long sleeves."),
    ("dress", "a dress", "A photo of a dress."),
    ("coat", "a coat", "A photo of a coat, a long-sleeved jacket."),
    ("sandal", "a sandal", "A photo of a sandal, an open shoe."),
    ("shirt", "a shirt", "A photo of a shirt with a collar."),
    ("sneaker", "a sneaker", "A photo of a sneaker, a low sports shoe."),
    ("bag", "a bag", "A photo of a bag."),
    ("ankle boot", "an ankle boot", "A photo of an ankle boot."),
]
QUESTION = "What item of clothing is this?"


def read_idx(path):
    """Returns (dims, payload bytes) of a gzipped IDX file of unsigned bytes."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        sys.exit(f"{path}: not an IDX file of unsigned bytes")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    payload = data[4 + 4 * ndim:]
    expected = 1
    for d in dims:
        expected *= d
    if len(payload) != expected:
        sys.exit(f"{path}: {len(payload)} bytes of data, expected {expected}")
    return dims, payload


def png_gray(width, height, pixels):
    """An 8-bit grayscale PNG of `pixels` (row-major bytes)."""
    def chunk(tag, body):
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body) & 0xFFFFFFFF)
    rows = b"".join(b"\x00" + pixels[y * width:(y + 1) * width] for y in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b""))


def qa_for(index, label):
    rng = random.Random(index * 7919 + 17)
    asked = label if rng.random() < 0.5 else rng.choice([c for c in range(len(CLASSES)) if c != label])
    return [{"question": QUESTION, "answer": CLASSES[label][0]},
            {"question": f"Is this {CLASSES[asked][1]}?", "answer": "yes" if asked == label else "no"}]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--idx-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--split", required=True, choices=["train", "t10k"])
    ap.add_argument("--out", required=True, help="folder for images/<split>/ and <split>.jsonl")
    ap.add_argument("--limit", type=int, default=0, help="convert only the first N images (0 = all)")
    a = ap.parse_args()

    (n, h, w), images = read_idx(os.path.join(a.idx_dir, f"{a.split}-images-idx3-ubyte.gz"))
    (n_labels,), labels = read_idx(os.path.join(a.idx_dir, f"{a.split}-labels-idx1-ubyte.gz"))
    if n_labels != n:
        sys.exit(f"{a.split}: {n} images but {n_labels} labels")
    count = min(n, a.limit) if a.limit > 0 else n
    image_dir = os.path.join(a.out, "images", a.split)
    os.makedirs(image_dir, exist_ok=True)
    # (file, which of qa_for's questions) per output JSONL
    outputs = [(f"{a.split}.jsonl", slice(None))] if a.split == "train" else \
              [(f"{a.split}.jsonl", slice(0, 1)), (f"{a.split}-yesno.jsonl", slice(1, 2))]
    files = [open(os.path.join(a.out, name + ".tmp"), "w") for name, _ in outputs]
    start = time.time()
    for i in range(count):
        label = labels[i]
        if label >= len(CLASSES):
            sys.exit(f"{a.split}: image {i} has label {label}")
        rel = f"images/{a.split}/{i:05d}.png"
        with open(os.path.join(a.out, rel), "wb") as f:
            f.write(png_gray(w, h, images[i * w * h:(i + 1) * w * h]))
        name, _, caption = CLASSES[label]
        qa = qa_for(i, label)
        for out, (_, which) in zip(files, outputs):
            out.write(json.dumps({"image": rel, "caption": caption, "label": label, "class": name,
                                  "qa": qa[which]}) + "\n")
        if (i + 1) % 5000 == 0 or i + 1 == count:
            print(f"\r[convert {a.split}] {i + 1}/{count} images ({time.time() - start:.0f}s)", end="",
                  file=sys.stderr, flush=True)
    print(file=sys.stderr)
    for out, (name, _) in zip(files, outputs):
        out.close()
        os.replace(os.path.join(a.out, name + ".tmp"), os.path.join(a.out, name))
    counts = [0] * len(CLASSES)
    for i in range(count):
        counts[labels[i]] += 1
    print(json.dumps({"split": a.split, "images": count, "jsonl": [os.path.join(a.out, n) for n, _ in outputs],
                      "per_class": {CLASSES[c][0]: counts[c] for c in range(len(CLASSES))}}))


if __name__ == "__main__":
    main()
