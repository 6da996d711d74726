#!/usr/bin/env python3
"""Check in the compiled code that the decode GEMVs issue a batch of weight loads before using any of them.

    cuobjdump -sass build/sm_90/qwen3 > /tmp/qwen3.sass      (on the GPU machine: its CUDA has cuobjdump)
    python3 oracle/sass_loads.py /tmp/qwen3.sass              exit 1 if a GEMV kernel waits between its loads

Why: gemv.cuh's kernels keep 8 independent 16-byte loads in flight per lane (a batch), all issued before any
is used, so that their round trips overlap. The source says so, but the compiler decides: until the seventeenth
session, INT4's bf16 scales were converted to float right after their load, inside the branch that guards it,
and each of a batch's U steps waited for its scale before issuing the next step's loads (2 loads in flight
instead of 8). Nothing in a test or a timing showed that; the SASS did.

Rule, per GEMV kernel (function name contains gemv_kernel): the code is cut into segments at every block
barrier (BAR.SYNC), the wait for the previous kernel (ACQBULK, griddepcontrol.wait) and every backward branch
(a loop's end). Inside one segment, no instruction may read or overwrite the destination of a global load
(LDG, not the copies to shared memory) issued earlier in that segment and then be followed by another global
load: that order makes the later load wait for the earlier one's round trip.
"""
import argparse
import re
import sys

INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
LOAD = re.compile(r"^(?:@!?U?P\w+\s+)?(LDG(?:\.[\w]+)*)\s+R(\d+)\s*,")
REG = re.compile(r"\bR(\d+)\b")
BRANCH = re.compile(r"^(?:@!?U?P\w+\s+)?BRA(?:\.[\w]+)*\s+(?:\S+,\s*)?0x([0-9a-f]+)")


def functions(text):
    """(name, [(address, instruction text)]) for every function of a cuobjdump -sass listing."""
    for part in re.split(r"\n\s*Function : ", text)[1:]:
        name, body = part.split("\n", 1)
        yield name.strip(), [(int(a, 16), t) for a, t in INSTR.findall(body)]


def load_width(op):
    return 4 if ".128" in op else 2 if ".64" in op else 1


def serialized_loads(code):
    """Places where a load waits for an earlier one: (address of the use, address of the load it waits for,
    address of the next load)."""
    found = []
    pending = {}     # register -> address of the load that writes it (this segment)
    waited = None    # (use address, load address) of the first wait in this segment, if any
    for addr, text in code:
        body = re.sub(r"^@!?U?P\w+\s+", "", text)
        br = BRANCH.match(text)
        if body.startswith(("BAR.SYNC", "ACQBULK")) or (br and int(br.group(1), 16) <= addr):
            pending, waited = {}, None
            continue
        m = LOAD.match(text)
        operands = body.split(None, 1)[1] if " " in body else ""
        used = [int(r) for r in REG.findall(operands) if int(r) in pending]  # read, or overwritten: either waits
        if m:  # a load's own address registers are read before it issues, and its destination must be free
            used += [int(m.group(2)) + k for k in range(load_width(m.group(1))) if int(m.group(2)) + k in pending]
        if m and waited:
            found.append((waited[0], waited[1], addr))
            waited = None
        if used and waited is None:
            waited = (addr, pending[used[0]])
        for r in used:
            src = pending.get(r)
            if src is None:  # already cleared with another register of the same load
                continue
            for k in [k for k, v in pending.items() if v == src]:
                del pending[k]
        if m:
            for k in range(load_width(m.group(1))):
                pending[int(m.group(2)) + k] = addr
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sass", help="cuobjdump -sass output of a binary holding the GEMV kernels")
    a = ap.parse_args()
    text = open(a.sass).read()
    kernels = bad = 0
    for name, code in functions(text):
        if "gemv_kernel" not in name:
            continue
        kernels += 1
        found = serialized_loads(code)
        if found:
            bad += 1
            use, load, nxt = found[0]
            print(f"{name}: {len(found)} serialized load(s); first: the instruction at {use:#06x} waits for the load at "
                  f"{load:#06x} before the load at {nxt:#06x} is issued")
    if kernels == 0:
        sys.exit(f"{a.sass}: no gemv_kernel functions (is it a cuobjdump -sass listing of an engine?)")
    print(f"{kernels} GEMV kernels, {bad} with serialized loads")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
