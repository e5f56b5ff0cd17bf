#!/usr/bin/env python3
"""test_api_packaging.py - checks of the public library's packaging.

usage:
  test_api_packaging.py exports LIBTESSERA_SO TESSERA_H
      `nm -D --defined-only` of the shared library lists exactly the functions
      tessera.h declares with TS_API (nothing internal, no toolchain symbols),
      and its SONAME is libtessera.so.<TS_VERSION_MAJOR>.
  test_api_packaging.py cli_includes SRC_CLI_DIR
      every #include "..." in src/cli/*.c|h names tessera.h or a header of
      src/cli itself (the CLI is a client of the public API only).
  test_api_packaging.py install BUILD_DIR SRC_DIR MODELS_DIR CC [CFLAG...]
      `cmake --install` into a temporary prefix; the expected files are there;
      examples/simple.c and the usage example at the top of tessera.h compile
      with `pkg-config --cflags --libs tessera`; simple runs on SmolLM2 against
      the installed libtessera.so (and links statically against libtessera.a).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

failures = []


def fail(msg):
    print("FAIL:", msg)
    failures.append(msg)


def run(cmd, env=None, timeout=300):
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


def header_api(path):
    """Names of the functions declared TS_API in the header."""
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)  # the usage example is in a comment
    text = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    names = set()
    for decl in re.findall(r"TS_API\s+[^;]*?;", text, flags=re.S):
        m = re.search(r"(\w+)\s*\(", decl)
        if m:
            names.add(m.group(1))
    return names


def header_major(path):
    m = re.search(r"#define TS_VERSION_MAJOR (\d+)", open(path, encoding="utf-8").read())
    return m.group(1)


def check_exports(lib, header):
    p = run(["nm", "-D", "--defined-only", lib])
    if p.returncode != 0:
        fail(f"nm failed: {p.stderr}")
        return
    syms = set()
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            syms.add(parts[2].split("@")[0])
    want = header_api(header)
    if len(want) < 40:
        fail(f"only {len(want)} TS_API declarations found in {header}: parser broken?")
    extra = sorted(syms - want)
    missing = sorted(want - syms)
    if extra:
        fail(f"exported but not in tessera.h ({len(extra)}): {extra[:20]}")
    if missing:
        fail(f"declared TS_API but not exported: {missing}")
    bad = [s for s in syms if not s.startswith("ts_")]
    if bad:
        fail(f"exported symbols without the ts_ prefix: {bad}")
    p = run(["readelf", "-d", lib])
    soname = re.search(r"\(SONAME\).*\[(.*)\]", p.stdout)
    want_soname = f"libtessera.so.{header_major(header)}"
    if not soname or soname.group(1) != want_soname:
        fail(f"SONAME {soname.group(1) if soname else None}, want {want_soname}")
    if not failures:
        print(f"ok: {len(syms)} exported symbols == the {len(want)} TS_API functions of tessera.h; SONAME {want_soname}")


def check_cli_includes(cli_dir):
    local = {f for f in os.listdir(cli_dir) if f.endswith(".h")}
    n = 0
    for f in sorted(os.listdir(cli_dir)):
        if not f.endswith((".c", ".h")):
            continue
        for i, line in enumerate(open(os.path.join(cli_dir, f), encoding="utf-8"), 1):
            m = re.match(r'\s*#\s*include\s*"([^"]+)"', line)
            if m:
                n += 1
                inc = m.group(1)
                if inc != "tessera.h" and inc not in local:
                    fail(f"src/cli/{f}:{i}: includes \"{inc}\": the CLI may include only tessera.h and src/cli headers")
            m = re.match(r"\s*#\s*include\s*<([^>]+)>", line)
            if m and ("/" in m.group(1) and not m.group(1).startswith("sys/")):
                fail(f"src/cli/{f}:{i}: includes <{m.group(1)}>: only libc headers besides tessera.h")
    if n == 0:
        fail("no #include lines found: wrong directory?")
    if not failures:
        print(f"ok: {n} quoted includes in {cli_dir}, all tessera.h or CLI-local")


def usage_example(header):
    """The compilable example in the comment at the top of tessera.h."""
    lines, on = [], False
    for line in open(header, encoding="utf-8"):
        if line.startswith(" * Usage"):
            on = True
            continue
        if on and line.startswith(" * Conventions"):
            break
        if on and line.startswith(" *   "):
            lines.append(line[5:])
        elif on and line.strip() == "*":
            lines.append("\n")
    return "".join(lines)


def check_install(build, src, models, cc, cflags):
    model = os.path.join(models, "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model):
        fail(f"{model} is missing: run tools/fetch_models.sh")
        return
    tmp = tempfile.mkdtemp(prefix="tessera-install-")
    try:
        prefix = os.path.join(tmp, "prefix")
        p = run(["cmake", "--install", build, "--prefix", prefix])
        if p.returncode != 0:
            fail(f"cmake --install failed: {p.stdout}{p.stderr}")
            return
        for rel in ["include/tessera.h", "lib/libtessera.a", "lib/pkgconfig/tessera.pc", "bin/tessera"]:
            if not os.path.isfile(os.path.join(prefix, rel)):
                fail(f"not installed: {rel}")
        libdir = os.path.join(prefix, "lib")
        sos = sorted(f for f in os.listdir(libdir) if f.startswith("libtessera.so"))
        major = header_major(os.path.join(src, "include", "tessera.h"))
        if "libtessera.so" not in sos or f"libtessera.so.{major}" not in sos:
            fail(f"shared library files {sos}: want libtessera.so -> libtessera.so.{major} -> ...")
        env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(libdir, "pkgconfig"))
        p = run(["pkg-config", "--cflags", "--libs", "tessera"], env=env)
        if p.returncode != 0:
            fail(f"pkg-config tessera: {p.stderr}")
            return
        pc_flags = p.stdout.split()
        norm = [f[:2] + os.path.normpath(f[2:]) if f.startswith(("-I", "-L")) else f for f in pc_flags]
        if f"-I{prefix}/include" not in norm or f"-L{libdir}" not in norm:
            fail(f"pkg-config paths do not point into the install prefix {prefix}: {pc_flags}")
        exe = os.path.join(tmp, "simple")
        p = run([cc, *cflags, os.path.join(src, "examples", "simple.c"), "-o", exe, *pc_flags])
        if p.returncode != 0:
            fail(f"compiling examples/simple.c: {p.stderr}")
            return
        needed = run(["readelf", "-d", exe]).stdout
        if f"libtessera.so.{major}" not in needed:
            fail("simple is not linked against the shared libtessera")
        renv = dict(os.environ, LD_LIBRARY_PATH=libdir)
        p = run([exe, model, "The capital of France is", "6"], env=renv)
        if p.returncode != 0 or "Paris" not in p.stdout or "6 generated" not in p.stderr:
            fail(f"simple: exit {p.returncode}\nstdout {p.stdout!r}\nstderr {p.stderr!r}")
        else:
            print(f"ok: simple ran on the installed library: {p.stdout.strip()!r}")
        p = run(["ldd", exe], env=renv)
        if libdir not in p.stdout:
            fail(f"simple does not load libtessera from the install prefix:\n{p.stdout}")
        # the usage example in the header compiles and links as is
        ex = os.path.join(tmp, "usage.c")
        with open(ex, "w") as f:
            f.write(usage_example(os.path.join(src, "include", "tessera.h")))
        p = run([cc, *cflags, "-Wall", "-Wextra", "-Werror", ex, "-o", os.path.join(tmp, "usage"), *pc_flags])
        if p.returncode != 0:
            fail(f"the usage example of tessera.h does not compile:\n{p.stderr}")
        # static linking against libtessera.a works too
        p = run(["pkg-config", "--static", "--libs-only-l", "tessera"], env=env)
        libs = [x for x in p.stdout.split() if x != "-ltessera"]
        sexe = os.path.join(tmp, "simple_static")
        p = run([cc, *cflags, os.path.join(src, "examples", "simple.c"), "-o", sexe, f"-I{prefix}/include",
                 os.path.join(libdir, "libtessera.a"), *libs])
        if p.returncode != 0:
            fail(f"static link against libtessera.a: {p.stderr}")
        else:
            p = run([sexe, model, "Hello", "2"])
            if p.returncode != 0:
                fail(f"statically linked simple: exit {p.returncode}: {p.stderr}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not failures:
        print("ok: install tree, pkg-config, example build and run")


def main():
    mode = sys.argv[1]
    if mode == "exports":
        check_exports(sys.argv[2], sys.argv[3])
    elif mode == "cli_includes":
        check_cli_includes(sys.argv[2])
    elif mode == "install":
        check_install(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], [f for f in sys.argv[6:] if f])
    else:
        fail(f"unknown mode {mode}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
