#!/usr/bin/env python3
"""Seeds the fuzz targets' corpora from fixtures/: frames, pages, cursor tokens, bundles and
segment files taken from the golden logs, and a real snapshot when an evctl binary is given.
Usage: fuzz-corpus.py OUT_DIR [EVCTL]"""
import base64, glob, os, struct, subprocess, sys, tempfile

out = sys.argv[1]
evctl = sys.argv[2] if len(sys.argv) > 2 else None
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF

def put(target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

def frames_of(segment):
    b = open(segment, "rb").read()
    o, frames = 72, []
    while o + 96 <= len(b):
        stored = struct.unpack_from("<I", b, o + 56)[0]
        n = 96 + stored
        if o + n > len(b):
            break
        frames.append(b[o:o + n])
        o += n
    return frames

def token(entries):
    body = b"".join(origin + varint(seq) for origin, seq in sorted(entries))
    body += struct.pack("<I", crc32c(body))
    return "lbc1." + base64.urlsafe_b64encode(body).decode().rstrip("=")

def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)

def page(frames, next_token, more=False):
    t = next_token.encode()
    b = b"LBKP" + bytes([1, 1 if more else 0, 0, 0]) + struct.pack("<H", len(t)) + t
    for f in frames:
        b += struct.pack("<I", len(f)) + f
    return b + struct.pack("<II", 0, len(frames))

def bundle(frames):
    b = b"LBKB" + bytes([1, 0, 0, 0])
    for f in frames:
        b += struct.pack("<I", len(f)) + f
    return b + b"LBKE" + struct.pack("<QI", len(frames), crc32c(b))

golden = sorted(glob.glob(os.path.join(root, "fixtures/log/golden/log/*/*.seg")))
frames = [f for s in golden for f in frames_of(s)]
origin = bytes.fromhex(os.path.basename(os.path.dirname(golden[0])).replace("-", "")) if golden else b"\0" * 16
for i, f in enumerate(frames[:8]):
    put("FuzzFrame", "golden-%d" % i, f)
# Signed frames (flag bit 1, a signature block after the payload): docs/FORMAT.md, "Signed frames".
signed = sorted(glob.glob(os.path.join(root, "fixtures/log/golden-signed/log/*/*.seg")))
for i, f in enumerate([f for s in signed for f in frames_of(s)][:4]):
    put("FuzzFrame", "golden-signed-%d" % i, f)
# A share's sealed frame (flag bits 2 and 3, a share block): docs/FORMAT.md, "Share frames".
share_frame = os.path.join(root, "fixtures/log/golden-share-frame.bin")
if os.path.exists(share_frame):
    put("FuzzFrame", "golden-share", open(share_frame, "rb").read())
empty = token([])
put("FuzzCursor", "empty", empty.encode())
put("FuzzCursor", "one", token([(origin, 31)]).encode())
put("FuzzCursor", "two", token([(origin, 1), (b"\x11" * 16, 2**40)]).encode())
# The /v1/watch stream: cursor events, a comment keep-alive, CRLF lines, data over several lines.
put("FuzzEventStream", "cursors", ("event: cursor\ndata: %s\n\n: keep-alive\n\nevent: cursor\ndata: %s\n\n" % (empty, token([(origin, 31)]))).encode())
put("FuzzEventStream", "crlf-multiline", b"event: cursor\r\ndata: a\r\ndata: b\r\n\r\ndata\n\n")
put("FuzzEventStream", "retry-after-date", b"Sun, 06 Nov 1994 08:49:37 GMT")
put("FuzzEventStream", "retry-after-seconds", b" 0120 ")
put("FuzzEventStream", "retry-after-rfc850", b"Sunday, 06-Nov-94 08:49:37 GMT")
put("FuzzEventStream", "retry-after-asctime", b"Sun Nov  6 08:49:37 1994")
for i in range(0, min(len(frames), 6), 2):
    put("FuzzPageReceive", "golden-%d" % i, page(frames[: i + 2], token([(origin, 99)])))
put("FuzzPageReceive", "empty", page([], empty))
fixture_page = os.path.join(root, "fixtures/replication/page-golden-first.bin")
if os.path.exists(fixture_page):
    put("FuzzPageReceive", "fixture", open(fixture_page, "rb").read())
fixture_page2 = os.path.join(root, "fixtures/replication/page-golden-first-v2.bin")
if os.path.exists(fixture_page2):
    put("FuzzPageReceive", "fixture-v2", open(fixture_page2, "rb").read())
put("FuzzBundle", "golden-all", bundle(frames))
put("FuzzBundle", "golden-two", bundle(frames[:2]))
put("FuzzBundle", "empty", bundle([]))
for s in sorted(glob.glob(os.path.join(root, "fixtures/log/*/log/*/*.seg"))):
    case = s.split("/fixtures/log/")[1].split("/")[0]
    put("FuzzStore", case + "-" + os.path.basename(s), open(s, "rb").read())
if evctl:
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "s")
        try:
            subprocess.run([evctl, "init", "--store", store], check=True, capture_output=True)
            sample = subprocess.run([evctl, "sample", "--count", "40", "--seed", "3"], check=True, capture_output=True).stdout
            subprocess.run([evctl, "append", "--store", store], input=sample, check=True, capture_output=True)
            snap = os.path.join(tmp, "snap.sqlite")
            subprocess.run([evctl, "snapshot", "--store", store, "--out", snap], check=True, capture_output=True)
            put("FuzzSnapshot", "real", open(snap, "rb").read())
        except (subprocess.CalledProcessError, OSError) as e:
            print("fuzz-corpus: no snapshot seed (%s)" % e, file=sys.stderr)
put("FuzzSnapshot", "not-sqlite", b"SQLite format 3\0" + b"\0" * 84)
for f in sorted(glob.glob(os.path.join(root, "fixtures/legacy/*.json")) + glob.glob(os.path.join(root, "fixtures/legacy/*.sqlite"))):
    put("FuzzLegacyImport", os.path.basename(f), open(f, "rb").read())
put("FuzzLegacyImport", "nested", b'{"items": [{"id": 1, "title": [[[[{"a": null}]]]], "created_at": 1e300}]}')
# NDJSON mutations: every entity and op of `evctl sample`, escapes, CRLF, a blank line, a bad line.
if evctl:
    try:
        sample = subprocess.run([evctl, "sample", "--count", "30", "--seed", "5"], check=True, capture_output=True).stdout
        put("FuzzNDJSON", "sample", sample)
    except (subprocess.CalledProcessError, OSError) as e:
        print("fuzz-corpus: no NDJSON sample seed (%s)" % e, file=sys.stderr)
put("FuzzNDJSON", "escapes-crlf", b'{"entity":"item","op":"create","id":"00000000-0000-4000-8000-00000000000A","fields":{"title":"a \\"q\\" \\u00e9\\n","notes":null,"sort_order":1.5e3,"status":"inbox"},"actor":"ann","base":0}\r\n  \t\n{"entity":"item_tag","op":"create","fields":{"item_id":"00000000-0000-4000-8000-00000000000a","tag_id":"00000000-0000-4000-8000-0000000000bb"}}\n')
put("FuzzNDJSON", "bad-second", b'{"entity":"tag","op":"create","id":"00000000-0000-4000-8000-000000000001","fields":{"name":"x"},"event_id":"00000000-0000-4000-8000-0000000000e1"}\n{"entity":"tag","op":"create"}\n')
put("FuzzInspectorInput", "form", b"token=abc%20def+ghi&next=%2Fui%2Flog%3Fentity%3Ditem&csrf=&x")
put("FuzzInspectorInput", "place", b"117671888423682453-9993b3da-c5ab-4138-85d4-ea499b66948d-2951")
put("FuzzInspectorInput", "time", b"2026-01-31T12:00:00.250Z")
put("FuzzInspectorInput", "fields", b'[["title","a \\"quoted\\" line\\n"],["n","-3"]]')
print("fuzz corpora seeded in %s from %d golden frames" % (out, len(frames)))
