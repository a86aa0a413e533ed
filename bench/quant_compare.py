#!/usr/bin/env python3
"""Compares two GGUF files tensor by tensor: type per name, and for tensors of
the same quantized type how many blocks differ in their bytes (e.g. a file of
`inferx quantize` against llama.cpp's of the same source and type).

usage: quant_compare.py OURS.gguf THEIRS.gguf   (standard library only)
"""
import struct
import sys

# type code -> (name, elements per block, bytes per block)
TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
         6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 10: ("Q2_K", 256, 84),
         11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
         14: ("Q6_K", 256, 210), 20: ("IQ4_NL", 32, 18), 23: ("IQ4_XS", 256, 136),
         30: ("BF16", 1, 2)}
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def read_gguf(path):
    data = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)[0]
        pos += struct.calcsize("<" + fmt)
        return v

    def string():
        nonlocal pos
        n = take("Q")
        s = data[pos:pos + n].decode("utf-8", "replace")
        pos += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(SCALARS[t])

    if data[:4] != b"GGUF":
        sys.exit(f"{path}: not a GGUF file")
    pos = 4
    take("I")
    n_tensors, n_kv = take("Q"), take("Q")
    kv = {}
    for _ in range(n_kv):
        k = string()
        kv[k] = value(take("I"))
    tensors = {}
    for _ in range(n_tensors):
        name = string()
        ne = [take("Q") for _ in range(take("I"))]
        tensors[name] = (ne, take("I"), take("Q"))
    align = kv.get("general.alignment", 32)
    return kv, tensors, data, (pos + align - 1) // align * align


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    a, b = read_gguf(sys.argv[1]), read_gguf(sys.argv[2])
    print(f"general.file_type: {a[0].get('general.file_type')} / {b[0].get('general.file_type')}")
    same_types, per_type = 0, {}
    for name, (ne, t, off) in a[1].items():
        if name not in b[1]:
            print(f"{name}: only in the first file")
            continue
        _, tb, offb = b[1][name]
        if t != tb:
            print(f"{name}: {TYPES.get(t, (t,))[0]} / {TYPES.get(tb, (tb,))[0]}")
            continue
        same_types += 1
        tname, blck, size = TYPES[t]
        if blck == 1:
            continue
        n = 1
        for d in ne:
            n *= d
        nb = n // blck
        x = a[2][a[3] + off:a[3] + off + nb * size]
        y = b[2][b[3] + offb:b[3] + offb + nb * size]
        diff = sum(x[i * size:(i + 1) * size] != y[i * size:(i + 1) * size] for i in range(nb))
        acc = per_type.setdefault(tname, [0, 0])
        acc[0] += diff
        acc[1] += nb
    print(f"same type: {same_types} of {len(a[1])} tensors ({len(b[1])} in the second file)")
    for tname, (diff, nb) in sorted(per_type.items()):
        print(f"{tname}: {diff} of {nb} blocks differ ({100.0 * diff / nb:.2f}%)")


if __name__ == "__main__":
    main()
