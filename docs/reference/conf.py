"""Sphinx configuration of the halox API reference.

Built by docs/reference/build.sh (``./quickstart docs``), which stages this folder, the topic
pages (docs/*.md) and README.md into one source tree, runs Doxygen and writes the C++ pages
(docs/reference/apigen.py) before Sphinx runs. Environment:

    HALOX_DOXYGEN_XML   Doxygen's XML of include/halox (required)
    HALOX_PYTHONPATH    folder holding an importable ``halox`` package with its compiled
                        extension (required)
    HALOX_SOURCE_DIR    the repository: Markdown links to its files that are not pages
                        (``../examples/demo.cpp``) must name files that exist (required)

Warnings are errors (``-W --keep-going``) and cross-references are checked (nitpicky), so a
page that names a symbol that does not exist, a Markdown link to a missing page or heading,
or a public Python symbol without a docstring fails the build.
"""

import inspect
import os
import re
import sys

project = "halox"
author = "the halox authors"
copyright = "the halox authors"
try:
    sys.path.insert(0, os.environ["HALOX_PYTHONPATH"])
    _xml = os.environ["HALOX_DOXYGEN_XML"]
    _source_dir = os.environ["HALOX_SOURCE_DIR"]
except KeyError as e:
    raise RuntimeError(f"conf.py: {e} is not set; build with docs/reference/build.sh") from None

extensions = ["breathe", "sphinx.ext.autodoc", "sphinx.ext.graphviz", "myst_parser"]
# The header pages' include graphs (Doxygen's, drawn by Graphviz's dot).
graphviz_output_format = "svg"
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Doxyfile", "*.py"]
# The topic pages link to each other's headings (`dist_ops.md#memory`): give every heading
# down to level 4 the anchor GitHub gives it.
myst_heading_anchors = 4

# ---- C++: Breathe on Doxygen's XML --------------------------------------------------------------
breathe_projects = {"halox": _xml}
breathe_default_project = "halox"
breathe_domain_by_extension = {"hpp": "cpp"}
breathe_show_include = False
# Unmarked roles in docstrings (:class:, :func:) are Python's; the C++ pages name their domain.
primary_domain = "py"
# Code blocks without a language (formulas, command output) are not highlighted.
highlight_language = "none"
cpp_index_common_prefix = ["halox::ops::", "halox::"]

# ---- Python: autodoc of the built package ---------------------------------------------------------
autodoc_default_options = {"members": True, "undoc-members": True, "member-order": "bysource"}
autodoc_typehints = "signature"
# A method without a docstring of its own (forward, extra_repr) must not show torch's.
autodoc_inherit_docstrings = False
# The signatures pybind11 writes name the extension module (halox._halox.HaloPlan); the
# classes are documented under the package that exports them.
_EXT = re.compile(r"\bhalox\._halox\.")


def _public_python_api(app, what, name, obj, skip, options):
    """Members of halox.torch's layers that come from torch.nn (forward, extra_repr, the
    parameters...) are torch's API, not halox's: a Dist* layer shows what halox adds,
    including what its private base classes define."""
    if what == "class" and not skip:
        owner = None
        cls = getattr(app.env, "_halox_current_class", None)
        for c in getattr(cls, "__mro__", ()):
            if name in c.__dict__:
                owner = c
                break
        if owner is None:  # an annotation only, e.g. torch.nn.MaxPool2d.kernel_size
            for c in getattr(cls, "__mro__", ()):
                if name in c.__dict__.get("__annotations__", {}):
                    owner = c
                    break
        if owner is not None and not owner.__module__.startswith("halox"):
            return True
    return None


# Python symbols without a docstring fail the build (a warning, and warnings are errors): those
# of the pure-Python modules (python/halox/*.py) and those of the compiled extension
# (python/src: the `doc` argument of pybind11's def, def_property_readonly, def_readwrite,
# class_, enum_ and value) alike.
#
# One exemption: the members that pybind11 itself adds to every enum class (py::enum_), the
# `name` and `value` properties. They are pybind11's, defined without a docstring and with no
# way to give them one from the bindings; the enums themselves and each of their values
# (.value("x", X, "doc")) carry halox's docstrings.
_PYBIND11_ENUM_MEMBERS = ("name", "value")


def _defined_in_extension(name):
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:i]))
        if module is not None:
            top = getattr(module, parts[i], None)
            return getattr(top, "__module__", "") == "halox._halox"
    return False


def _pybind11_enum_member(name):
    """True for pybind11's own `name`/`value` properties of a py::enum_ class (see
    _PYBIND11_ENUM_MEMBERS); pybind11 marks its enum classes with `__entries`."""
    owner, _, member = name.rpartition(".")
    module, _, cls_name = owner.rpartition(".")
    cls = getattr(sys.modules.get(module), cls_name, None)
    return (member in _PYBIND11_ENUM_MEMBERS and isinstance(cls, type)
            and "__entries" in cls.__dict__ and "__members__" in cls.__dict__)


def _record_class(app, what, name, obj, options, lines):
    if what == "class":
        app.env._halox_current_class = obj
    public = not any(part.startswith("_") and not part.startswith("__")
                     for part in name.split("."))
    if not public or what == "module" or any(line.strip() for line in lines):
        return
    from sphinx.util import logging

    where = ""
    if _defined_in_extension(name):
        if _pybind11_enum_member(name):
            return
        where = " (give it one in its pybind11 binding, python/src/*.cpp)"
    logging.getLogger("halox").warning(f"{what} {name} has no docstring{where}", type="halox",
                                       subtype="undocumented")


def _signature(app, what, name, obj, options, signature, return_annotation):
    if signature:
        signature = _EXT.sub("halox.", signature)
    if return_annotation:
        return_annotation = _EXT.sub("halox.", return_annotation)
    return signature, return_annotation


def _repository_file(app, env, node, contnode):
    """A Markdown link to a file of the repository that is not a page (a source file, an
    example): its text, unlinked, when the file exists; a broken link otherwise."""
    if node.get("refdomain") or node.get("reftype") not in ("myst", "any"):
        return None
    target = node.get("reftarget", "")
    if "://" in target or target.startswith("#"):
        return None
    page_dir = os.path.dirname(env.doc2path(node["refdoc"], False))
    path = os.path.normpath(os.path.join(page_dir, target.split("#")[0]))
    if path.startswith("..") or not os.path.exists(os.path.join(_source_dir, path)):
        return None
    return contnode


def setup(app):
    app.connect("missing-reference", _repository_file)
    app.connect("autodoc-process-docstring", _record_class)
    app.connect("autodoc-skip-member", _public_python_api)
    app.connect("autodoc-process-signature", _signature)


# ---- cross-references -----------------------------------------------------------------------------
nitpicky = True
# Names from outside halox that the signatures mention: the standard library, MPI, NumPy,
# PyTorch and pybind11's generic types have no pages here.
nitpick_ignore_regex = [
    ("cpp:identifier", r"std(::.*)?"),
    ("cpp:identifier", r"MPI_[A-Za-z_]+"),
    ("cpp:identifier", r"u?int(8|16|32|64)_t"),
    ("cpp:identifier", r"size_t"),
    # Implementation types that handles point to (halox::detail, forward-declared impl and
    # state structs): not public API, so they have no pages.
    ("cpp:identifier", r"detail(::.*)?|state|impl"),
    ("py:class", r"(numpy|torch|collections\.abc|typing|os)\..*"),
    ("py:class", r"handle|object|buffer|capsule|iterable|iterator|callable|sequence|function"),
    ("py:class", r"(int|float|str|bool|bytes|list|dict|tuple|None|Optional|Any)"),
]

# ---- HTML ---------------------------------------------------------------------------------------------
html_theme = "alabaster"
html_title = "halox API reference"
html_short_title = "halox"
html_theme_options = {
    "description": "Halo exchange and redistribution of distributed N-d tensors",
    "page_width": "1180px",
    "sidebar_width": "250px",
    "fixed_sidebar": True,
    "show_relbars": True,
}
html_sidebars = {"**": ["about.html", "navigation.html", "relations.html", "searchbox.html"]}
html_show_sourcelink = False
html_copy_source = False
templates_path = ["_templates"]
