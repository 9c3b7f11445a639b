#!/usr/bin/python3
"""Writes tests/data/fixtures/tar/: the same small archive in Python tarfile's USTAR, GNU and PAX formats.

tests/data/test_tar.cpp reads them with vlm's TarReader (interoperability with a second, independent writer).
Members: a directory, a symlink, a short name, a 130-byte path (ustar prefix / GNU long name / pax path), an empty
file, and a file under "./". Run: /usr/bin/python3 scripts/make_tar_fixtures.py
"""
import io
import os
import tarfile

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "fixtures", "tar")
LONG = "long_directory_name_" + "x" * 40 + "/" + "nested_directory_" + "y" * 30 + "/000042.seg.png"


def members():
    return [
        ("dir/", None, tarfile.DIRTYPE),
        ("dir/link.txt", "target.txt", tarfile.SYMTYPE),
        ("dir/000001.txt", b"hello tar\n", tarfile.REGTYPE),
        (LONG, bytes(range(256)) * 3, tarfile.REGTYPE),
        ("dir/empty.json", b"", tarfile.REGTYPE),
        ("./dotted/000002.txt", b"dot slash", tarfile.REGTYPE),
    ]


def main():
    os.makedirs(OUT, exist_ok=True)
    for fmt_name, fmt in (("ustar", tarfile.USTAR_FORMAT), ("gnu", tarfile.GNU_FORMAT), ("pax", tarfile.PAX_FORMAT)):
        with tarfile.open(os.path.join(OUT, f"python_{fmt_name}.tar"), "w", format=fmt) as tf:
            for name, data, kind in members():
                info = tarfile.TarInfo(name)
                info.type = kind
                info.mtime = 1700000000
                if kind == tarfile.SYMTYPE:
                    info.linkname = data
                    tf.addfile(info)
                elif kind == tarfile.DIRTYPE:
                    info.mode = 0o755
                    tf.addfile(info)
                else:
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
    print("long name length", len(LONG))


if __name__ == "__main__":
    main()
