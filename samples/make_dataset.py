#!/usr/bin/env python3
"""Write a synthetic classification data set as gpipe-run --data reads it:
DIR/inputs.npy (float32 [N, F]) and DIR/targets.npy (int64 [N]), points
scattered around one random centre per class (learnable in a few epochs).

    /usr/bin/python3 samples/make_dataset.py --out data/blobs --features 512 --classes 10
    gpipe-run mlp.gpipe --train --data data/blobs --eval-fraction 0.1 --epochs 2 --optimizer adam --lr 1e-3
"""
import argparse
import os

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="directory to write inputs.npy and targets.npy into")
    parser.add_argument("--examples", type=int, default=2000)
    parser.add_argument("--features", type=int, default=512)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--noise", type=float, default=6.0, help="spread of each class around its centre")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.examples < 1 or args.features < 1 or args.classes < 2:
        parser.error("--examples and --features must be positive and --classes at least 2")
    rng = np.random.default_rng(args.seed)
    centres = rng.standard_normal((args.classes, args.features)).astype(np.float32)
    targets = rng.integers(0, args.classes, args.examples).astype(np.int64)
    inputs = centres[targets] + args.noise * rng.standard_normal((args.examples, args.features)).astype(np.float32)
    os.makedirs(args.out, exist_ok=True)
    np.save(os.path.join(args.out, "inputs.npy"), inputs)
    np.save(os.path.join(args.out, "targets.npy"), targets)
    print(f"wrote {args.out}: {args.examples} examples, inputs [{args.features}] float32, "
          f"targets in [0, {args.classes}) int64")


if __name__ == "__main__":
    main()
