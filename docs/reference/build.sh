#!/usr/bin/env bash
# Builds the halox API reference: Doxygen on include/halox, then Sphinx with Breathe (C++),
# autodoc (the Python package) and MyST (README.md and docs/*.md as chapters).
#
#   docs/reference/build.sh <build dir> <python dir>
#
# <build dir> receives doxygen/ (XML and warnings.log), src/ (the staged Sphinx sources),
# doctrees/ and html/ (the site: html/index.html). <python dir> holds an importable `halox`
# package with its compiled extension, e.g. build/mpich/python. Needs doxygen and sphinx-build
# with Breathe and MyST (Debian: doxygen python3-sphinx python3-breathe python3-myst-parser).
#
# Fails on any Doxygen warning (an undocumented public symbol, a bad command in a comment), on
# a public C++ symbol without a comment that Doxygen lets pass (docs/reference/apigen.py
# check), and on any Sphinx warning: a broken cross-reference or link, a Python symbol without
# a docstring. Every problem is listed before it fails (Sphinx runs with --keep-going).
# Environment: HALOX_DOCS_JOBS (Sphinx processes, default 1), HALOX_DOXYGEN and
# HALOX_SPHINX_BUILD (the programs, default doxygen and sphinx-build from PATH).
set -euo pipefail

[[ $# -eq 2 ]] || { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
pydir=$(cd "$2" && pwd)
jobs=${HALOX_DOCS_JOBS:-1}
python=/usr/bin/python3
[[ -x $python ]] || python=python3

ls "$pydir"/halox/_halox*.so >/dev/null 2>&1 ||
  { echo "build.sh: no compiled halox extension in $pydir/halox" >&2; exit 1; }
doxygen=${HALOX_DOXYGEN:-doxygen}
sphinx_build=${HALOX_SPHINX_BUILD:-sphinx-build}
for tool in "$doxygen" "$sphinx_build"; do
  command -v "$tool" >/dev/null || { echo "build.sh: '$tool' not found" >&2; exit 1; }
done

status=0
start=$SECONDS

# 1. Doxygen: XML of the public headers. Its warnings are errors (WARN_AS_ERROR).
echo "docs: doxygen include/halox"
rm -rf "$out/doxygen"
mkdir -p "$out/doxygen"
if ! (cd "$root" && HALOX_SOURCE_DIR=$root HALOX_DOXYGEN_OUT=$out/doxygen "$doxygen" "$here/Doxyfile"); then
  echo "docs: doxygen failed:" >&2
  sed "s|^$root/||" "$out/doxygen/warnings.log" >&2
  status=1
fi
[[ -f $out/doxygen/xml/index.xml ]] || { echo "docs: doxygen wrote no XML" >&2; exit 1; }

# 2. What Doxygen lets pass: destructors, defaulted members, enumerators, nested structs.
echo "docs: every public C++ symbol documented (apigen.py check)"
"$python" "$here/apigen.py" check "$out/doxygen/xml" || status=1

# 3. The Sphinx sources: this folder's pages, the generated C++ pages, README.md and the topic
# pages (with the files they link to), staged in one tree so that their links keep working.
src=$out/src
rm -rf "$src"
mkdir -p "$src/docs"
cp -r "$here"/conf.py "$here"/*.rst "$here"/_templates "$src/"
cp "$root/README.md" "$src/"
cp "$root"/docs/*.md "$src/docs/"
find "$root/docs" -maxdepth 1 -type f ! -name '*.md' -exec cp {} "$src/docs/" \;
"$python" "$here/apigen.py" pages "$out/doxygen/xml" "$src/api"
# The Python package: the modules of this checkout (their docstrings as they are now) next to
# the compiled extension of <python dir>.
rm -rf "$out/python"
mkdir -p "$out/python/halox"
cp "$pydir"/halox/_halox*.so "$pydir"/halox/_build.py "$out/python/halox/"
# Subpackages (halox/torch/) keep their folders.
(cd "$root/python/halox" && find . -name '*.py' -exec cp --parents {} "$out/python/halox/" \;)

# 4. Sphinx: warnings are errors, cross-references checked (-n), every problem listed.
echo "docs: sphinx-build -W --keep-going -n -b html -> $out/html"
if ! HALOX_DOXYGEN_XML=$out/doxygen/xml HALOX_PYTHONPATH=$out/python HALOX_SOURCE_DIR=$root \
  "$sphinx_build" -q -E -W --keep-going -n -j "$jobs" -b html -d "$out/doctrees" "$src" "$out/html"; then
  echo "docs: sphinx-build failed (see the warnings above)" >&2
  status=1
fi

if ((status == 0)); then
  echo "docs: $out/html/index.html ($((SECONDS - start)) s)"
else
  echo "docs: FAILED ($((SECONDS - start)) s)" >&2
fi
exit "$status"
