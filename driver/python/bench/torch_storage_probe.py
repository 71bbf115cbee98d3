"""Issue 27 evidence: what torch does to a CPU tensor's memory while a DLPack
capsule of it is alive. Run as MALLOC_MMAP_THRESHOLD_=131072 python3 this.py
(a fixed threshold, so a freed 4 MiB block is unmapped, never kept by glibc).
old_still_mapped=False means the address the capsule gave is freed."""
import ctypes, torch
print(torch.__version__)
N = 1 << 22  # 4 MiB: glibc serves it with mmap, so a freed block is unmapped
def mapped(addr):
    for line in open("/proc/self/maps"):
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        if lo <= addr < hi:
            return True
    return False
def probe(name, op, make=lambda: torch.zeros(N, dtype=torch.uint8)):
    t = make()
    cap = t.__dlpack__(max_version=(1, 0)) if True else None
    old = t.data_ptr(); sold = t.untyped_storage().data_ptr()
    res = t.untyped_storage().resizable()
    try:
        op(t); err = None
    except Exception as e:
        err = f"{type(e).__name__}: {str(e)[:90]}"
    print(f"{name:34} resizable={res} raised={err} moved={t.data_ptr()!=old} old_still_mapped={mapped(old)}")
    del cap
probe("resize_ grow (x2)", lambda t: t.resize_(2 * N))
probe("resize_ shrink", lambda t: t.resize_(N // 2))
probe("resize_ shrink then grow back", lambda t: (t.resize_(N // 2), t.resize_(N)))
probe("set_(new storage)", lambda t: t.set_(torch.zeros(N, dtype=torch.uint8).untyped_storage()))
probe("set_() empty", lambda t: t.set_())
probe("untyped_storage().resize_(0)", lambda t: t.untyped_storage().resize_(0))
probe("untyped_storage().resize_(2N)", lambda t: t.untyped_storage().resize_(2 * N))
probe(".data = other", lambda t: setattr(t, "data", torch.zeros(N, dtype=torch.uint8)))
probe("share_memory_()", lambda t: t.share_memory_())
probe("add(out=t) wrong shape", lambda t: torch.add(torch.zeros(2 * N, dtype=torch.uint8), 1, out=t))
probe("resize_ grow, from_numpy tensor", lambda t: t.resize_(2 * N), make=lambda: torch.from_numpy(__import__('numpy').zeros(N, 'uint8')))
probe("resize_ grow, from_dlpack alias", lambda t: t.resize_(2 * N), make=lambda: torch.from_dlpack(torch.zeros(N, dtype=torch.uint8).__dlpack__()))
probe("set_ on from_numpy tensor", lambda t: t.set_(torch.zeros(N, dtype=torch.uint8).untyped_storage()), make=lambda: torch.from_numpy(__import__('numpy').zeros(N, 'uint8')))
# does the capsule share the tensor's TensorImpl? (shape read after resize)
t = torch.zeros(N, dtype=torch.uint8); cap = t.__dlpack__(max_version=(1,0))
a = torch.from_dlpack(cap); print("alias ptr == old", a.data_ptr() == t.data_ptr())
t.resize_(2 * N); print("after grow alias ptr still old, t moved:", a.data_ptr() != t.data_ptr(), "alias old mapped", mapped(a.data_ptr()))
# detached alias keeps storage across set_ ?
t = torch.zeros(N, dtype=torch.uint8); d = t.detach(); old = t.data_ptr()
t.set_(torch.zeros(1, dtype=torch.uint8).untyped_storage()); print("detach alias keeps old storage across set_:", d.data_ptr() == old and mapped(old))
t = torch.zeros(N, dtype=torch.uint8); s = t.untyped_storage(); old = t.data_ptr()
t.set_(torch.zeros(1, dtype=torch.uint8).untyped_storage()); print("held untyped_storage keeps old across set_:", s.data_ptr() == old and mapped(old))
print([n for n in dir(torch._C) if 'esiz' in n]); print([n for n in dir(torch.UntypedStorage) if 'esiz' in n or 'lock' in n.lower()])
print("pinned resizable", torch.empty(8, pin_memory=torch.cuda.is_available()).untyped_storage().resizable())
