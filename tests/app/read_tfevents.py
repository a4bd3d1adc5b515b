#!/usr/bin/env python3
"""An independent reader of TensorBoard event files, from the format alone (TFRecord framing
with masked CRC-32C, tensorflow.Event protocol buffers), for the tests: it shares no code with
the trainer's writer.

usage: read_tfevents.py <event file> <metrics.jsonl>
Checks every record's CRCs, that the first event is file_version brain.Event:2, that no
(step, tag) appears twice, and that the scalars are exactly metrics.jsonl's numbers (each
rounded to float32, as simple_value holds them), no more and no fewer. Prints a summary; exits
1 on the first difference.
"""
import json
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(b, at):
    v = shift = 0
    while True:
        byte = b[at]
        at += 1
        v |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return v, at


def fields(b):
    """(number, wire type, value) of a message: ints, bytes, or raw little-endian bytes."""
    at = 0
    while at < len(b):
        key, at = varint(b, at)
        number, wt = key >> 3, key & 7
        if wt == 0:
            v, at = varint(b, at)
        elif wt == 1:
            v, at = b[at:at + 8], at + 8
        elif wt == 5:
            v, at = b[at:at + 4], at + 4
        elif wt == 2:
            n, at = varint(b, at)
            v, at = b[at:at + n], at + n
        else:
            raise ValueError(f"wire type {wt}")
        yield number, wt, v


def events(path):
    data = open(path, "rb").read()
    at = 0
    while at < len(data):
        header = data[at:at + 8]
        (n,) = struct.unpack("<Q", header)
        (lcrc,) = struct.unpack("<I", data[at + 8:at + 12])
        payload = data[at + 12:at + 12 + n]
        (dcrc,) = struct.unpack("<I", data[at + 12 + n:at + 16 + n])
        if lcrc != masked(header) or dcrc != masked(payload):
            sys.exit(f"FAIL: {path}: bad CRC at byte {at}")
        at += 16 + n
        yield payload


def main():
    path, metrics = sys.argv[1], sys.argv[2]
    scalars, first = {}, True
    for payload in events(path):
        step, version, values = 0, None, []
        for number, wt, v in fields(payload):
            if number == 2:
                step = v
            elif number == 3:
                version = v.decode()
            elif number == 5:
                for vn, _, value in fields(v):
                    if vn != 1:
                        continue
                    tag, simple = None, None
                    for fn, _, fv in fields(value):
                        if fn == 1:
                            tag = fv.decode()
                        elif fn == 2:
                            (simple,) = struct.unpack("<f", fv)
                    values.append((tag, simple))
        if first and version != "brain.Event:2":
            sys.exit(f"FAIL: the first event's file_version is {version!r}")
        first = False
        for tag, simple in values:
            if (step, tag) in scalars:
                sys.exit(f"FAIL: step {step} {tag} written twice")
            scalars[(step, tag)] = simple
    want = {}
    for line in open(metrics):
        r = json.loads(line)
        for k, v in r.items():
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                want[(r["step"], k)] = struct.unpack("<f", struct.pack("<f", v))[0]
    if want.keys() != scalars.keys():
        missing, extra = sorted(want.keys() - scalars.keys()), sorted(scalars.keys() - want.keys())
        sys.exit(f"FAIL: scalars missing {missing[:3]}, extra {extra[:3]}")
    for key, v in want.items():
        if scalars[key] != v and not (v != v and scalars[key] != scalars[key]):
            sys.exit(f"FAIL: step {key[0]} {key[1]}: {scalars[key]} in the events, {v} in metrics")
    steps = sorted({s for s, _ in scalars})
    print(f"{len(scalars)} scalars over steps {steps[0]}-{steps[-1]} equal metrics.jsonl's")


main()
