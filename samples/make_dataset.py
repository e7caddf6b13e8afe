#!/usr/bin/env python3
"""Write a data set as gpipe-run --data reads it, from data a Debian package installs
(no download) or synthetic:

  digits    scikit-learn's bundled 8x8 digit images (python3-sklearn): DIR/inputs.npy
            (float32 [1797, 1, 8, 8], scaled to [0, 1]) and DIR/targets.npy (int64 classes 0-9),
            in a fixed shuffled order, so that --eval-fraction holds out every digit
  fortunes  the fortune cookie texts (fortunes-min) as byte-level tokens: DIR/train.bin and
            DIR/val.bin (uint16, 0-255, the last 10% of the bytes held out), nanoGPT's format
  blobs     points scattered around one random centre per class: DIR/inputs.npy (float32
            [N, F]) and DIR/targets.npy (int64 [N])

    /usr/bin/python3 samples/make_dataset.py digits --out data/digits
    gpipe-run cnn.gpipe --train --data data/digits --eval-fraction 0.2 --epochs 10 --optimizer adam --lr 3e-3
    /usr/bin/python3 samples/make_dataset.py fortunes --out data/fortunes
    gpipe-run gpt.gpipe --train --data data/fortunes/train.bin --seq-len 64 --eval-data data/fortunes/val.bin
"""
import argparse
import glob
import os
import sys

import numpy as np


# Where Debian's python3-sklearn keeps the digits: read directly by an
# interpreter without scikit-learn (a virtual environment's).
DIGITS_CSV = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"


def load_digits_arrays(seed: int):
    """The 1797 digits as (float32 [N, 1, 8, 8] in [0, 1], int64 [N]), in an order shuffled by `seed`."""
    try:
        from sklearn.datasets import load_digits
        data = load_digits()
        images, labels = data.images, data.target
    except ImportError:
        if not os.path.exists(DIGITS_CSV):
            sys.exit("make_dataset: the digits need scikit-learn: apt install python3-sklearn")
        table = np.loadtxt(DIGITS_CSV, delimiter=",")
        images, labels = table[:, :64].reshape(-1, 8, 8), table[:, 64]
    order = np.random.default_rng(seed).permutation(len(labels))
    return (images[order] / 16.0).astype(np.float32)[:, None, :, :], labels[order].astype(np.int64)


def digits(args) -> None:
    inputs, targets = load_digits_arrays(args.seed)
    os.makedirs(args.out, exist_ok=True)
    np.save(os.path.join(args.out, "inputs.npy"), inputs)
    np.save(os.path.join(args.out, "targets.npy"), targets)
    print(f"wrote {args.out}: {len(targets)} digit images, inputs [1, 8, 8] float32, targets 0-9 int64")


def fortunes(args) -> None:
    files = sorted(f for f in glob.glob(os.path.join(args.fortunes, "*"))
                   if os.path.isfile(f) and not os.path.islink(f) and not f.endswith(".dat"))
    if not files:
        sys.exit(f"make_dataset: no fortune files in {args.fortunes}; apt install fortunes-min, "
                 "or give --fortunes DIR of text files")
    text = b"".join(open(f, "rb").read() for f in files)
    tokens = np.frombuffer(text, dtype=np.uint8).astype(np.uint16)
    held_out = len(tokens) // 10
    os.makedirs(args.out, exist_ok=True)
    tokens[:-held_out].tofile(os.path.join(args.out, "train.bin"))
    tokens[-held_out:].tofile(os.path.join(args.out, "val.bin"))
    print(f"wrote {args.out}: {len(tokens)} byte tokens from {len(files)} files "
          f"({len(tokens) - held_out} in train.bin, {held_out} in val.bin), uint16, vocabulary 256")


def blobs(args) -> None:
    if args.examples < 1 or args.features < 1 or args.classes < 2:
        sys.exit("make_dataset: --examples and --features must be positive and --classes at least 2")
    rng = np.random.default_rng(args.seed)
    centres = rng.standard_normal((args.classes, args.features)).astype(np.float32)
    targets = rng.integers(0, args.classes, args.examples).astype(np.int64)
    inputs = centres[targets] + args.noise * rng.standard_normal((args.examples, args.features)).astype(np.float32)
    os.makedirs(args.out, exist_ok=True)
    np.save(os.path.join(args.out, "inputs.npy"), inputs)
    np.save(os.path.join(args.out, "targets.npy"), targets)
    print(f"wrote {args.out}: {args.examples} examples, inputs [{args.features}] float32, "
          f"targets in [0, {args.classes}) int64")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["digits", "fortunes", "blobs"])
    parser.add_argument("--out", required=True, help="directory to write the data set into")
    parser.add_argument("--seed", type=int, default=0, help="digits: the order; blobs: the points")
    parser.add_argument("--fortunes", default="/usr/share/games/fortunes", help="fortunes: the text files")
    parser.add_argument("--examples", type=int, default=2000, help="blobs")
    parser.add_argument("--features", type=int, default=512, help="blobs")
    parser.add_argument("--classes", type=int, default=10, help="blobs")
    parser.add_argument("--noise", type=float, default=6.0, help="blobs: spread of each class around its centre")
    args = parser.parse_args()
    {"digits": digits, "fortunes": fortunes, "blobs": blobs}[args.kind](args)


if __name__ == "__main__":
    main()
