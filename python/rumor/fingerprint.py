"""Model fingerprints: what two peers compare at the handshake before they mix anything.

Two forms, both ending in "/p<parameter count>/f32" like the C++ models' (core/model.cpp):
  - the C++ dense models, for the torch models they are equivalent to (rumor.torch finds them):
        mlp:784-256-128-10/ce/p235146/f32   logreg:784-10/ce/p7850/f32   linreg:13-1/mse/p14/f32
  - any other torch model: every parameter (and floating-point buffer) in order, by name and
    shape:  torch:conv1.weight=16x1x5x5,conv1.bias=16,...,fc.bias=10/p12345/f32
    When that list would not fit a Hello (1024 characters), a hash of it stands in:
        torch#3f2a9c0d11e4b7a2:conv1.weight=16x1x5x5,.../p12345/f32   (as many leading entries as fit)
Pure Python, no torch: the parsing and first_difference() also explain a refused handshake.
"""
import hashlib

MAX_LEN = 1024  # core/message.cpp: a longer fingerprint is a malformed Hello


def _dims(shape):
    return "x".join(str(int(d)) for d in shape) if len(shape) else "scalar"


def dense_fingerprint(kind, widths, loss):
    count = sum(widths[i] * widths[i + 1] + widths[i + 1] for i in range(len(widths) - 1))
    return f"{kind}:{'-'.join(str(w) for w in widths)}/{loss}/p{count}/f32"


def torch_fingerprint(entries):
    """entries: [(name, shape)] in flat-buffer order."""
    count = 0
    parts = []
    for name, shape in entries:
        n = 1
        for d in shape:
            n *= int(d)
        count += n
        parts.append(f"{name}={_dims(shape)}")
    tail = f"/p{count}/f32"
    full = "torch:" + ",".join(parts) + tail
    if len(full) <= MAX_LEN:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:16]
    head = f"torch#{digest}:"
    kept = []
    room = MAX_LEN - len(head) - len(tail) - 4
    for p in parts:
        if sum(len(k) + 1 for k in kept) + len(p) + 1 > room:
            break
        kept.append(p)
    return head + ",".join(kept) + ",..." + tail


def parse(fp):
    """(kind, body, count) or None: kind is "mlp"/"logreg"/"linreg"/"torch"/"torch#..."."""
    if "/p" not in fp or not fp.endswith("/f32"):
        return None
    body, _, rest = fp.rpartition("/p")
    count = rest[:-4]
    kind, sep, spec = body.partition(":")
    if not sep or not count.isdigit():
        return None
    return kind, spec, int(count)


def _entries(spec):
    out = []
    for part in spec.split(","):
        if part == "...":
            continue
        name, _, dims = part.rpartition("=")
        out.append((name, dims))
    return out


def first_difference(ours, theirs):
    """A sentence naming the first difference between two fingerprints, or None if equal."""
    if ours == theirs:
        return None
    a, b = parse(ours), parse(theirs)
    if a is None or b is None:
        return f"fingerprints differ: ours '{ours}', theirs '{theirs}'"
    (ka, sa, ca), (kb, sb, cb) = a, b
    dense = ("mlp", "logreg", "linreg")
    if ka != kb and not (ka.startswith("torch") and kb.startswith("torch")):
        what = lambda k, s: (f"a dense {k} model ({s})" if k in dense else "a torch model")
        return f"ours is {what(ka, sa)}, theirs {what(kb, sb)}"
    if ka in dense:
        wa, la = sa.split("/")[0], sa.split("/")[-1]
        wb, lb = sb.split("/")[0], sb.split("/")[-1]
        if wa != wb:
            return f"layer widths differ: ours {wa}, theirs {wb}"
        if la != lb:
            return f"losses differ: ours {la}, theirs {lb}"
        return f"fingerprints differ: ours '{ours}', theirs '{theirs}'"
    ea, eb = _entries(sa), _entries(sb)
    for i, (x, y) in enumerate(zip(ea, eb)):
        if x != y:
            return (f"parameter {i}: ours {x[0]} shape {x[1].replace('x', ' x ')}, "
                    f"theirs {y[0]} shape {y[1].replace('x', ' x ')}")
    hashed = ka != "torch" or kb != "torch"
    if len(ea) != len(eb) and not hashed:
        if len(ea) > len(eb):
            return f"ours has {len(ea)} parameters, theirs {len(eb)}: {ea[len(eb)][0]} is missing from theirs"
        return f"ours has {len(ea)} parameters, theirs {len(eb)}: theirs also has {eb[len(ea)][0]}"
    if ca != cb:
        return f"parameter counts differ: ours {ca}, theirs {cb}"
    return ("the parameter lists differ beyond what the fingerprints list (they are hashed: "
            f"ours {ka}, theirs {kb})")
