#!/usr/bin/python3
"""The C++ half of the API reference, from Doxygen's XML of include/halox.

    apigen.py check <xml dir>            every public symbol has a comment, or exit 1
    apigen.py pages <xml dir> <out dir>  write the reST pages Breathe renders

`check` is stricter than Doxygen's WARN_IF_UNDOCUMENTED, which passes over destructors,
defaulted members, enumerators and the members of nested structs: here every public class,
struct, union, namespace member, class member (constructors and destructors included; deleted
functions excepted), enumerator and macro needs a `///` comment. It prints one
`<header>:<line>: <what> is not documented` line per symbol, like a compiler.

`pages` writes, under <out dir>:

    index.rst                     the C++ API: the namespaces and the list of headers
    headers.rst                   every header, with its description's first sentence
    namespace/<name>.rst          one per namespace: its classes, enums, types and functions
    header/<name>.rst             one per header: its description, the enums, type aliases,
                                  constants, free functions and macros it declares, and links
                                  to its classes
    class/<qualified name>.rst    one per class or struct of a namespace (nested ones appear on
                                  their enclosing class's page)

so a new header, class or function shows up without editing any page by hand.
"""

import os
import sys
import xml.etree.ElementTree as ET

# Namespaces whose contents are not public API (also excluded in the Doxyfile).
PRIVATE_NAMESPACES = ("detail",)


def text(node):
    return "".join(node.itertext()).strip() if node is not None else ""


def documented(node):
    return bool(text(node.find("briefdescription")) or text(node.find("detaileddescription")))


def load(xml_dir):
    """Index of the Doxygen XML: compound id -> (kind, name, compounddef element)."""
    index = ET.parse(os.path.join(xml_dir, "index.xml")).getroot()
    compounds = {}
    for c in index.findall("compound"):
        kind = c.get("kind")
        if kind in ("dir", "page", "example"):
            continue
        root = ET.parse(os.path.join(xml_dir, c.get("refid") + ".xml")).getroot()
        compounds[c.get("refid")] = (kind, c.findtext("name"), root.find("compounddef"))
    return compounds


def is_private_scope(name):
    return any(part in PRIVATE_NAMESPACES for part in name.split("::"))


def location(node):
    loc = node.find("location")
    if loc is None:
        return "?", 0
    return loc.get("file", "?"), int(loc.get("line", "0") or 0)


def public_members(cdef):
    """The public member definitions of a compound (every section of a namespace or file)."""
    for section in cdef.findall("sectiondef"):
        kind = section.get("kind")
        if kind.startswith(("private", "protected", "package")):
            continue
        for m in section.findall("memberdef"):
            if m.get("prot") in ("private", "protected"):
                continue
            yield m


def private_compounds(compounds):
    """Ids of classes declared private or protected inside another class (and of everything
    nested in those): implementation details, whatever their own members' access."""
    hidden = set()
    for _, (_, _, cdef) in compounds.items():
        for inner in cdef.findall("innerclass") if cdef is not None else ():
            if inner.get("prot") in ("private", "protected"):
                hidden.add(inner.get("refid"))
    names = {refid: name for refid, (_, name, _) in compounds.items()}
    hidden_names = [names[h] + "::" for h in hidden if h in names]
    return hidden | {refid for refid, name in names.items()
                     if any(name.startswith(h) for h in hidden_names)}


def cmd_check(xml_dir):
    missing = []
    seen = set()
    compounds = load(xml_dir)
    hidden = private_compounds(compounds)
    for refid, (kind, name, cdef) in compounds.items():
        if is_private_scope(name) or cdef is None or refid in hidden:
            continue
        if kind in ("class", "struct", "union") and cdef.get("prot", "public") == "public":
            if not documented(cdef):
                missing.append((*location(cdef), f"{kind} {name}"))
        for m in public_members(cdef):
            mid = m.get("id")
            if mid in seen:
                continue
            seen.add(mid)
            mname = m.findtext("name")
            qualified = m.findtext("qualifiedname") or f"{name}::{mname}"
            if is_private_scope(qualified):
                continue
            args = m.findtext("argsstring") or ""
            if m.get("kind") == "function" and args.replace(" ", "").endswith("=delete"):
                continue
            if not documented(m):
                what = f"{m.get('kind')} {qualified}{args if m.get('kind') == 'function' else ''}"
                missing.append((*location(m), what))
            for ev in m.findall("enumvalue"):
                if not documented(ev):
                    missing.append((*location(m), f"enumerator {qualified}::{ev.findtext('name')}"))
    for path, line, what in sorted(set(missing)):
        print(f"include/{path}:{line}: {what} is not documented")
    if missing:
        print(f"apigen: {len(missing)} public symbol(s) without a /// comment", file=sys.stderr)
        return 1
    return 0


def rst_inline(para):
    """One paragraph of Doxygen XML as one line of reST: code spans as literals, everything
    else as escaped text (nested markup flattened)."""
    if para is None:
        return ""

    def escape(t):
        return "".join("\\" + c if c in "\\*`|_<>[]" else c for c in t)

    out = [escape(para.text or "")]
    for child in para:
        inner = " ".join(text(child).split())
        if child.tag == "computeroutput" and inner:
            out.append(f"``{inner}``")
        else:
            out.append(escape(text(child)))
        out.append(escape(child.tail or ""))
    return " ".join("".join(out).split())


def title(s, char="="):
    return f"{s}\n{char * len(s)}\n"


def slug(name):
    return name.replace("::", "-").replace("/", "-").replace(".", "-")


def member_directive(m, qualified):
    """The Breathe directive of one namespace-level member, or None."""
    kind = m.get("kind")
    if kind == "function":
        # Breathe tells overloads apart by their parameter types. Templates and their
        # specialisations are named as Doxygen spells them.
        params = []
        for p in m.findall("param"):
            t = text(p.find("type"))
            if p.findtext("array"):
                t += p.findtext("array")
            params.append(t)
        quals = ""
        args = m.findtext("argsstring") or ""
        tail = args[args.rfind(")") + 1:]
        if "noexcept" in tail:
            quals = " noexcept"
        return f".. doxygenfunction:: {qualified}({', '.join(params)}){quals}"
    return {
        "enum": f".. doxygenenum:: {qualified}",
        "typedef": f".. doxygentypedef:: {qualified}",
        "variable": f".. doxygenvariable:: {qualified}",
        "define": f".. doxygendefine:: {m.findtext('name')}",
    }.get(kind)


KIND_ORDER = [("define", "Macros"), ("enum", "Enumerations"), ("typedef", "Type aliases"),
              ("variable", "Constants"), ("function", "Functions")]


def cmd_pages(xml_dir, out):
    compounds = load(xml_dir)
    namespaces = {}  # name -> cdef
    classes = {}  # qualified name -> (kind, cdef)
    headers = {}  # "halox/halo.hpp" -> cdef
    for refid, (kind, name, cdef) in compounds.items():
        if is_private_scope(name):
            continue
        if kind == "namespace" and name.startswith("halox"):
            namespaces[name] = cdef
        elif kind in ("class", "struct", "union"):
            classes[name] = (kind, cdef)
        elif kind == "file":
            headers[location(cdef)[0]] = cdef

    # Classes of a namespace get a page; nested ones are rendered inside their outer class.
    page_classes = sorted(n for n in classes if n.rsplit("::", 1)[0] in namespaces)

    # Namespace members, grouped by the header that declares them (macros come from the
    # headers themselves).
    by_header = {h: {k: [] for k, _ in KIND_ORDER} for h in headers}
    by_namespace = {ns: {k: [] for k, _ in KIND_ORDER} for ns in namespaces}
    for ns, cdef in namespaces.items():
        for m in public_members(cdef):
            qualified = m.findtext("qualifiedname") or f"{ns}::{m.findtext('name')}"
            if is_private_scope(qualified):
                continue
            header = location(m)[0]
            entry = (qualified, m)
            by_header.setdefault(header, {k: [] for k, _ in KIND_ORDER})[m.get("kind")].append(entry)
            by_namespace[ns][m.get("kind")].append(entry)
    for header, cdef in headers.items():
        for m in public_members(cdef):
            if m.get("kind") == "define":
                by_header[header]["define"].append((m.findtext("name"), m))
    classes_by_header = {}
    for n in page_classes:
        classes_by_header.setdefault(location(classes[n][1])[0], []).append(n)

    def write(rel, body):
        path = os.path.join(out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(body)

    def class_ref(n):
        return f":cpp:class:`{n}`"

    def member_ref(qualified, m):
        kind = m.get("kind")
        if kind == "define":
            return f"``{qualified}``"
        role = {"function": "func", "enum": "enum", "typedef": "type", "variable": "var"}[kind]
        return f":cpp:{role}:`{qualified}`"

    def brief(cdef):
        b = rst_inline(cdef.find("briefdescription/para"))
        if not b:
            b = rst_inline(cdef.find("detaileddescription/para"))
            b = b.split(". ")[0].rstrip(".") + "." if b else ""
        return f" -- {b}" if b else ""

    # Class pages.
    for n in page_classes:
        kind, cdef = classes[n]
        directive = "doxygenstruct" if kind == "struct" else "doxygenclass"
        if kind == "union":
            directive = "doxygenunion"
        header = location(cdef)[0]
        write(f"class/{slug(n)}.rst",
              f".. _api-class-{slug(n)}:\n\n" + title(f"{n}") +
              f"\n``#include <{header}>`` (:doc:`../header/{slug(header)}`)\n\n"
              f".. {directive}:: {n}\n   :members:\n   :undoc-members:\n")

    # Header pages.
    for header in sorted(headers):
        cdef = headers[header]
        lines = [title(header), "",
                 f".. doxygenfile:: {header}",
                 "   :sections: briefdescription detaileddescription incdepgraph",
                 "   :allow-dot-graphs:", ""]
        if classes_by_header.get(header):
            lines += [title("Classes", "-"), ""]
            lines += [f"* :doc:`{n} <../class/{slug(n)}>`{brief(classes[n][1])}"
                      for n in classes_by_header[header]]
            lines.append("")
        for kind, heading in KIND_ORDER:
            entries = by_header.get(header, {}).get(kind, [])
            if not entries:
                continue
            lines += [title(heading, "-"), ""]
            done = set()
            for qualified, m in entries:
                d = member_directive(m, qualified)
                if d and d not in done:
                    done.add(d)
                    lines += [d, ""]
        write(f"header/{slug(header)}.rst", "\n".join(lines))

    # Namespace pages: links only (every entity is rendered once, on its header's page or its
    # own class page).
    for ns in sorted(namespaces):
        cdef = namespaces[ns]
        lines = [f".. _api-namespace-{slug(ns)}:", "", title(f"namespace {ns}"), "",
                 f".. doxygennamespace:: {ns}", "   :desc-only:", ""]
        mine = [n for n in page_classes if n.rsplit("::", 1)[0] == ns]
        if mine:
            lines += [title("Classes and structs", "-"), ""]
            lines += [f"* :doc:`{n} <../class/{slug(n)}>`{brief(classes[n][1])}" for n in mine]
            lines += ["", ".. toctree::", "   :hidden:", ""]
            lines += [f"   ../class/{slug(n)}" for n in mine]
            lines.append("")
        for kind, heading in KIND_ORDER:
            entries = by_namespace[ns][kind]
            if not entries:
                continue
            lines += [title(heading, "-"), ""]
            seen = set()
            for qualified, m in entries:
                header = location(m)[0]
                if "<" in qualified:
                    continue  # a template's specialisations: the template is listed
                key = (qualified, header)
                if key in seen:
                    continue
                seen.add(key)
                b = brief(m)
                lines.append(f"* {member_ref(qualified, m)} (:doc:`{header} "
                             f"<../header/{slug(header)}>`){b}")
            lines.append("")
        inner = [text(e) for e in cdef.findall("innernamespace")]
        inner = [i for i in inner if i in namespaces]
        if inner:
            lines += [title("Namespaces", "-"), ""]
            lines += [f"* :doc:`{i} <{slug(i)}>`" for i in inner]
            lines.append("")
        write(f"namespace/{slug(ns)}.rst", "\n".join(lines))

    # The headers, one page each.
    lines = [title("Headers"), "",
             "Each public header: what it is for, the enumerations, type aliases, constants,",
             "functions and macros it declares, and links to its classes.", ""]
    lines += [f"* :doc:`{h} <header/{slug(h)}>`{brief(headers[h])}" for h in sorted(headers)]
    lines += ["", ".. toctree::", "   :hidden:", ""]
    lines += [f"   header/{slug(h)}" for h in sorted(headers)]
    lines.append("")
    write("headers.rst", "\n".join(lines))

    # The C++ API's front page.
    lines = [title("C++ API"), "",
             "The public headers under ``include/halox``: the core library (``halox::halox``,",
             "namespace ``halox``, umbrella header ``<halox/halox.hpp>``) and the operators",
             "(``halox::ops``, namespace ``halox::ops``, headers ``<halox/ops/ops.hpp>`` and",
             "``<halox/ops/distributed.hpp>``). Generated from the headers' comments: every",
             "class and struct has a page, and every header a page with its functions, enums",
             "and constants.", "",
             ".. toctree::", "   :maxdepth: 2", ""]
    lines += [f"   namespace/{slug(ns)}" for ns in sorted(namespaces)]
    lines += ["   headers", ""]
    write("index.rst", "\n".join(lines))
    print(f"apigen: {len(namespaces)} namespaces, {len(headers)} headers, "
          f"{len(page_classes)} class pages")
    return 0


def main(argv):
    if len(argv) == 3 and argv[1] == "check":
        return cmd_check(argv[2])
    if len(argv) == 4 and argv[1] == "pages":
        return cmd_pages(argv[2], argv[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
