"""What a cubin or hsaco image holds (ELF headers, symbols, kernel parameters), read with the
standard library only: the host's compile records it, tests check it."""

import struct

EM_CUDA = 190
EM_AMDGPU = 224
EIATTR_KPARAM_INFO = 0x17
EIATTR_CBANK_PARAM_SIZE = 0x19
EIATTR_MAX_THREADS = 0x05
AMDGPU_MACH = {0x02C: "gfx900", 0x02F: "gfx908", 0x030: "gfx90a", 0x040: "gfx940", 0x041: "gfx941",
               0x04C: "gfx942", 0x04F: "gfx950", 0x036: "gfx1030", 0x041 + 0x100: "?"}


def elf_facts(data):
    """Machine, architecture, function symbols and (cubin: .nv.info; hsaco: metadata note) the
    kernel parameters of a cubin or hsaco image."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not a 64-bit ELF image")
    (e_type, e_machine, _, _, _, e_shoff, e_flags, _, _, _, e_shentsize, e_shnum,
     e_shstrndx) = struct.unpack_from("<HHIQQQIHHHHHH", data, 16)
    sections = []
    for i in range(e_shnum):
        off = e_shoff + i * e_shentsize
        name, stype, flags, addr, offset, size, link, info, align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, off)
        sections.append({"name_off": name, "type": stype, "offset": offset, "size": size, "link": link,
                         "entsize": entsize})
    shstr = sections[e_shstrndx]
    for s in sections:
        s["name"] = _cstr(data, shstr["offset"] + s["name_off"])
    symbols = []
    for s in sections:
        if s["type"] != 2:  # SHT_SYMTAB
            continue
        strtab = sections[s["link"]]
        for j in range(s["size"] // 24):
            st_name, st_info, st_other, st_shndx, st_value, st_size = struct.unpack_from(
                "<IBBHQQ", data, s["offset"] + j * 24)
            symbols.append({"name": _cstr(data, strtab["offset"] + st_name), "type": st_info & 0xF,
                            "bind": st_info >> 4, "size": st_size})
    facts = {"machine": e_machine, "flags": e_flags, "functions": sorted({s["name"] for s in symbols
                                                                         if s["type"] == 2 and s["name"]}),
             "objects": sorted({s["name"] for s in symbols if s["type"] == 1 and s["name"]}), "kernels": {}}
    if e_machine == EM_CUDA:
        facts["format"] = "cubin"
        facts["arch"] = "sm_%d" % ((e_flags >> 8) & 0xFF) if (e_flags >> 8) & 0xFF else "sm_%d" % (e_flags & 0xFF)
        for s in sections:
            if s["name"].startswith(".nv.info."):
                facts["kernels"][s["name"][len(".nv.info."):]] = _nv_info(data[s["offset"]:s["offset"] + s["size"]])
    elif e_machine == EM_AMDGPU:
        facts["format"] = "hsaco"
        facts["arch"] = AMDGPU_MACH.get(e_flags & 0xFF, "mach 0x%x" % (e_flags & 0xFF))
        for s in sections:
            if s["type"] == 7:  # SHT_NOTE
                for meta in _notes(data[s["offset"]:s["offset"] + s["size"]]):
                    for k in meta.get("amdhsa.kernels", []):
                        facts["kernels"][k.get(".name")] = {
                            "params": [{"offset": a.get(".offset"), "size": a.get(".size"),
                                        "kind": a.get(".value_kind")} for a in k.get(".args", [])],
                            "group_segment_fixed_size": k.get(".group_segment_fixed_size"),
                            "kernarg_segment_size": k.get(".kernarg_segment_size"),
                            "wavefront_size": k.get(".wavefront_size"),
                            "vgpr_count": k.get(".vgpr_count"), "sgpr_count": k.get(".sgpr_count")}
                    if "amdhsa.target" in meta:
                        facts["target"] = meta["amdhsa.target"]
    else:
        facts["format"] = "elf"
    return facts


def _cstr(data, offset):
    end = data.index(b"\0", offset)
    return data[offset:end].decode(errors="replace")


def _nv_info(blob):
    """EIATTR records of a .nv.info.<kernel> section: parameter ordinals, offsets, sizes."""
    params, out, pos = [], {}, 0
    while pos + 2 <= len(blob):
        fmt, attr = blob[pos], blob[pos + 1]
        if fmt == 0x04:  # EIFMT_SVAL: u16 size, then data
            size = struct.unpack_from("<H", blob, pos + 2)[0]
            payload = blob[pos + 4:pos + 4 + size]
            pos += 4 + size
            if attr == EIATTR_KPARAM_INFO and size >= 12:
                _, ordinal, offset, flags = struct.unpack_from("<IHHI", payload, 0)
                params.append({"ordinal": ordinal, "offset": offset, "size": (flags >> 18) & 0x3FFF})
            elif attr == EIATTR_MAX_THREADS and size >= 12:
                out["max_threads"] = list(struct.unpack_from("<III", payload, 0))
        elif fmt == 0x03:  # EIFMT_HVAL: u16 value
            value = struct.unpack_from("<H", blob, pos + 2)[0]
            if attr == EIATTR_CBANK_PARAM_SIZE:
                out["param_bytes"] = value
            pos += 4
        elif fmt in (0x01, 0x02):  # EIFMT_NVAL / EIFMT_BVAL
            pos += 4 if fmt == 0x01 else 4
        else:
            break
    out["params"] = sorted(params, key=lambda p: p["ordinal"])
    return out


def _notes(blob):
    pos, metas = 0, []
    while pos + 12 <= len(blob):
        namesz, descsz, ntype = struct.unpack_from("<III", blob, pos)
        name = blob[pos + 12:pos + 12 + namesz].rstrip(b"\0")
        desc_off = pos + 12 + ((namesz + 3) & ~3)
        desc = blob[desc_off:desc_off + descsz]
        pos = desc_off + ((descsz + 3) & ~3)
        if name == b"AMDGPU" and ntype == 32:  # NT_AMDGPU_METADATA, MessagePack
            value, _ = _msgpack(desc, 0)
            if isinstance(value, dict):
                metas.append(value)
    return metas


def _msgpack(b, i):
    """The subset of MessagePack the AMDGPU code object metadata uses."""
    t = b[i]
    if t <= 0x7F:
        return t, i + 1
    if t >= 0xE0:
        return t - 0x100, i + 1
    if 0x80 <= t <= 0x8F:
        return _mp_map(b, i + 1, t & 0x0F)
    if 0x90 <= t <= 0x9F:
        return _mp_array(b, i + 1, t & 0x0F)
    if 0xA0 <= t <= 0xBF:
        n = t & 0x1F
        return b[i + 1:i + 1 + n].decode(errors="replace"), i + 1 + n
    simple = {0xC0: None, 0xC2: False, 0xC3: True}
    if t in simple:
        return simple[t], i + 1
    fixed = {0xCC: "B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: "b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q",
             0xCA: ">f", 0xCB: ">d"}
    if t in fixed:
        fmt = fixed[t]
        return struct.unpack_from(fmt, b, i + 1)[0], i + 1 + struct.calcsize(fmt)
    if t in (0xD9, 0xDA, 0xDB, 0xC4, 0xC5, 0xC6):
        fmt = {0xD9: "B", 0xDA: ">H", 0xDB: ">I", 0xC4: "B", 0xC5: ">H", 0xC6: ">I"}[t]
        n = struct.unpack_from(fmt, b, i + 1)[0]
        start = i + 1 + struct.calcsize(fmt)
        raw = b[start:start + n]
        return (raw.decode(errors="replace") if t >= 0xD9 else raw), start + n
    if t in (0xDC, 0xDD):
        fmt = ">H" if t == 0xDC else ">I"
        return _mp_array(b, i + 1 + struct.calcsize(fmt), struct.unpack_from(fmt, b, i + 1)[0])
    if t in (0xDE, 0xDF):
        fmt = ">H" if t == 0xDE else ">I"
        return _mp_map(b, i + 1 + struct.calcsize(fmt), struct.unpack_from(fmt, b, i + 1)[0])
    raise ValueError("msgpack type 0x%x not supported" % t)


def _mp_array(b, i, n):
    out = []
    for _ in range(n):
        v, i = _msgpack(b, i)
        out.append(v)
    return out, i


def _mp_map(b, i, n):
    out = {}
    for _ in range(n):
        k, i = _msgpack(b, i)
        v, i = _msgpack(b, i)
        out[k] = v
    return out, i
